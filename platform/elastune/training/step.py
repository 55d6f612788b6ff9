"""One optimizer step's forward and backward over micro-batches: what the training loop runs and
what the estimator traces (memory/estimate.py), so a prediction prices the very code that runs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
from torch import nn

from elastune.data.batch import Batch, batch_device, batch_size, slice_batch
from elastune.workloads import Workload

__all__ = ["forward_backward"]


def forward_backward(
    model: nn.Module,
    workload: Workload,
    batch: Batch,
    micro: int,
    autocast: Callable[[], AbstractContextManager[object]],
    scaler: torch.amp.GradScaler,
    before_micro: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Accumulate the gradients of one optimizer step over `batch`, `micro` samples at a time.

    Each micro-batch's mean loss is weighted by its share of the batch's loss terms (its samples,
    or what the workload's `loss_weight` counts: an LM's real next-token targets), so the summed
    gradients equal those of the whole batch in one pass: micro x accum is exact, not an
    approximation. Returns the step's mean loss as a tensor (not `.item()`: a CPU-GPU sync).
    """
    total = batch_size(batch)
    whole = workload.loss_weight(batch)
    if isinstance(whole, torch.Tensor):  # a tensor on the device: no sync; an empty step weighs 0
        whole = whole.clamp(min=1)
    # One micro-batch is the batch itself, and where its weight is a count of samples its share is
    # exactly 1: no slice, no multiply. A tensor weight (an LM's targets) may be 0 for an empty step,
    # so it is still applied. (A fast DLRM step on a 2-core CPU is ~6 ms: the slice, the reweighting
    # and the pytree walks they take cost 1-2% of it, measured in-process against a bare step.)
    one_part = micro >= total
    weighted = not one_part or isinstance(whole, torch.Tensor)
    step_loss: torch.Tensor | None = None
    for index, start in enumerate(range(0, total, micro)):
        if before_micro is not None:
            before_micro(index)
        part = batch if one_part else slice_batch(batch, start, min(start + micro, total))
        with autocast():
            loss = workload.loss(model, part)
            if weighted:
                loss = loss * (workload.loss_weight(part) / whole)
        # Scale before backward so fp16 gradients do not underflow (a no-op for fp32/bf16).
        scaler.scale(loss).backward()
        step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
    if step_loss is None:  # an empty batch: no micro-batch ran
        return torch.zeros((), device=batch_device(batch))
    return step_loss
