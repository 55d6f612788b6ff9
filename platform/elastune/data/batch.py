"""A batch: any mapping, sequence or dataclass of tensors with a leading batch dimension.

elastune never looks inside a workload's batch. It splits a step's batch into micro-batches,
concatenates parts, moves a batch to the device, pins it and counts its samples through torch's
pytree utilities (elastune/compat.py), which see into dicts, lists, tuples, namedtuples and
dataclasses (a dataclass is registered the first time one is seen) and treat what they do not know
as a leaf. Leaves:

* a `torch.Tensor`: its first dimension is the batch (every tensor leaf has the same B rows);
* a `Ragged`: a variable-length value per sample (its samples' values one after another, and
  their lengths), for what does not pad into a rectangle;
* anything else (a string, a number, None): a constant of the whole batch, carried as it is.

Why pytree and not `tensordict.TensorDict`: a user's model takes the batch it was written for (a
dict from their collate function, a dataclass, a tuple), and pytree handles it as it is, with no
wrapper type between the data and the model and no dependency. TensorDict registers itself with
torch's pytree, so a workload whose batches are TensorDicts works here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import torch

from elastune.compat import pytree

__all__ = [
    "Batch",
    "Ragged",
    "batch_device",
    "batch_size",
    "concat_batches",
    "example_like",
    "pin_batch",
    "select_rows",
    "slice_batch",
    "to_device",
]

# What the loop hands a workload: whatever its data source produced (see the module docstring).
Batch: TypeAlias = Any


@dataclass(frozen=True, eq=False)
class Ragged:
    """A variable-length value per sample: sample i's rows are `values[offset_i : offset_i +
    lengths[i]]`. The lengths are host integers (a tuple), so splitting a batch reads no device
    tensor (no sync, and it works on the estimator's fake tensors)."""

    values: torch.Tensor
    lengths: tuple[int, ...]

    def __post_init__(self) -> None:
        if sum(self.lengths) != self.values.shape[0]:
            raise ValueError(f"Ragged: lengths sum to {sum(self.lengths)} but values have {self.values.shape[0]} rows")

    @classmethod
    def from_list(cls, parts: Sequence[torch.Tensor]) -> Ragged:
        """One value per sample (tensors of equal trailing shape, any first dimension)."""
        return cls(torch.cat(list(parts)) if parts else torch.zeros(0), tuple(int(p.shape[0]) for p in parts))

    def __len__(self) -> int:
        return len(self.lengths)

    def unbind(self) -> list[torch.Tensor]:
        """Each sample's value."""
        return list(torch.split(self.values, list(self.lengths)))

    def rows(self, start: int, stop: int) -> Ragged:
        offset = sum(self.lengths[:start])
        lengths = self.lengths[start:stop]
        return Ragged(self.values[offset : offset + sum(lengths)], lengths)

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Ragged:
        return Ragged(fn(self.values), self.lengths)


def _register(batch: Any) -> None:
    """Register, once, the dataclass types in `batch` with pytree, so it sees into them (an
    unregistered dataclass would be one opaque leaf)."""
    tree = pytree()
    if isinstance(batch, dict):
        for value in batch.values():
            _register(value)
    elif isinstance(batch, list | tuple):
        for value in batch:
            _register(value)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type | Ragged):
        kind = type(batch)
        if kind not in tree.SUPPORTED_NODES:
            tree.register_dataclass(kind)
        for item in dataclasses.fields(batch):
            _register(getattr(batch, item.name))


def _map(batch: Batch, tensor: Callable[[torch.Tensor], Any], ragged: Callable[[Ragged], Any]) -> Batch:
    _register(batch)
    tree = pytree()
    leaves, spec = tree.tree_flatten(batch)
    mapped = [
        tensor(leaf) if isinstance(leaf, torch.Tensor) else ragged(leaf) if isinstance(leaf, Ragged) else leaf
        for leaf in leaves
    ]
    return tree.tree_unflatten(mapped, spec)


def _rows(batch: Batch) -> list[torch.Tensor | Ragged]:
    _register(batch)
    return [leaf for leaf in pytree().tree_leaves(batch) if isinstance(leaf, torch.Tensor | Ragged)]


def batch_size(batch: Batch) -> int:
    """B, the samples in `batch`: its first tensor's first dimension (or its first Ragged's count).
    Raises ValueError for a batch with neither, or whose leaves disagree on B."""
    rows = _rows(batch)
    if any(isinstance(leaf, torch.Tensor) and leaf.dim() == 0 for leaf in rows):
        raise ValueError(  # a 0-dim tensor cannot be split into micro-batches (and has no shape[0] to count)
            f"a batch is a mapping, sequence or dataclass of tensors with a leading batch dimension; this one has "
            f"a 0-dim tensor ({type(batch).__name__}): give it a batch dimension, or make it a Python number"
        )
    sizes = {int(leaf.shape[0]) if isinstance(leaf, torch.Tensor) else len(leaf) for leaf in rows}
    if len(sizes) != 1:
        what = "no tensor" if not sizes else f"leaves of {sorted(sizes)} rows"
        raise ValueError(
            f"a batch is a mapping, sequence or dataclass of tensors with a leading batch dimension; this one has "
            f"{what} ({type(batch).__name__})"
        )
    return sizes.pop()


def slice_batch(batch: Batch, start: int, stop: int) -> Batch:
    """Samples [start, stop), tensors as views: micro-batching must not copy the batch."""
    return _map(batch, lambda t: t[start:stop], lambda r: r.rows(start, stop))


def select_rows(batch: Batch, order: torch.Tensor) -> Batch:
    """The samples at `order` (an index tensor), in that order: a step rearranged (an LM sorts its
    sequences by length before the micro-batch split)."""
    rows = [int(i) for i in order.tolist()]
    return _map(
        batch,
        lambda t: t[order.to(t.device)],
        lambda r: Ragged.from_list([r.unbind()[i] for i in rows]) if rows else r.rows(0, 0),
    )


def concat_batches(parts: Sequence[Batch]) -> Batch:
    """One batch of the parts' samples, in order (every part of the same structure)."""
    if len(parts) == 1:
        return parts[0]
    tree = pytree()
    for part in parts:
        _register(part)
    flat = [tree.tree_flatten(part) for part in parts]
    spec = flat[0][1]
    if any(other != spec for _, other in flat[1:]):
        raise ValueError("concat_batches: the parts are batches of different structure")
    joined: list[Any] = []
    for leaves in zip(*(leaves for leaves, _ in flat), strict=True):
        first = leaves[0]
        if isinstance(first, torch.Tensor):
            joined.append(torch.cat(leaves))
        elif isinstance(first, Ragged):
            joined.append(Ragged(torch.cat([r.values for r in leaves]), sum((r.lengths for r in leaves), ())))
        else:
            joined.append(first)  # a constant of the batch
    return tree.tree_unflatten(joined, spec)


def to_device(batch: Batch, device: torch.device | str, non_blocking: bool = False) -> Batch:
    """The batch on `device` (sources produce CPU tensors; the loop moves them); `non_blocking`
    copies from pinned memory asynchronously."""
    return _map(
        batch,
        lambda t: t.to(device, non_blocking=non_blocking),
        lambda r: r.apply(lambda v: v.to(device, non_blocking=non_blocking)),
    )


def pin_batch(batch: Batch) -> Batch:
    """The batch in page-locked host memory, for an asynchronous copy to a GPU."""
    return _map(batch, lambda t: t.pin_memory(), lambda r: r.apply(lambda v: v.pin_memory()))


def batch_device(batch: Batch) -> torch.device:
    """Where the batch's first tensor lives."""
    rows = _rows(batch)
    if not rows:
        return torch.device("cpu")
    first = rows[0]
    return first.device if isinstance(first, torch.Tensor) else first.values.device


def example_like(template: Batch, n: int) -> Batch:
    """A batch of `n` samples with `template`'s structure, dtypes and per-sample shapes, made with
    torch's factory functions (so under the estimator's fake tensors it allocates nothing): each
    tensor leaf zeros of [n, *its trailing shape]; each Ragged its first sample's length n times."""

    def tensor(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n, *t.shape[1:], dtype=t.dtype)

    def ragged(r: Ragged) -> Ragged:
        length = r.lengths[0] if r.lengths else 0
        return Ragged(torch.zeros(n * length, *r.values.shape[1:], dtype=r.values.dtype), (length,) * n)

    return _map(template, tensor, ragged)
