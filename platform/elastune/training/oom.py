"""Out-of-memory recovery: recognise an OOM and pick the next, smaller micro-batch.

On an OOM inside a step the loop drops what the step held, halves the micro-batch and doubles
accumulation, then redoes the step from its first micro-batch: the effective batch, and so the
math, stay exactly the same, and no sample is lost or counted twice.
"""

from __future__ import annotations

import torch

__all__ = ["is_oom", "shrink"]


def is_oom(exc: BaseException) -> bool:
    # torch.OutOfMemoryError covers the CUDA allocator; CPU allocations that fail surface as a
    # RuntimeError whose text says so.
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def shrink(micro: int, accum: int) -> tuple[int, int] | None:
    """The next split of the same effective batch, or None if the micro-batch cannot halve."""
    if micro < 2 or micro % 2:
        return None
    return micro // 2, accum * 2
