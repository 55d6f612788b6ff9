"""`DatasetSource`: a user's own map-style `torch.utils.data.Dataset` as an elastune data source.

A workload returns its Dataset from `Workload.dataset()` (or builds `DatasetSource(...)` in its own
`data_source()`), and its data code stays as it is: items are read by index and joined by a collate
function (default `torch.utils.data.default_collate`, or the workload's `collate(samples)`) into
whatever batch it makes (dicts, tuples, tensors, numbers; a variable-length value as a `Ragged`).

What the source guarantees:

* Position purity. Training sample k of the endless stream is training item `order_e[k mod n]`,
  e = k // n its epoch and `order_e` a permutation of the n training items drawn from (seed, e):
  each epoch is shuffled differently, and `read(s, a + b)` is `read(s, a)` followed by
  `read(s + a, b)` for every split. So micro-batch x accumulation, an OOM retry (the step re-read at
  a smaller micro-batch) and a resumed run (continuing at sample `step x batch`) see exactly the
  samples an uninterrupted run does.
* A fixed held-out set, disjoint from training: a held-out Dataset's items in index order (the
  first `n` asked for, or all of them where it has fewer), or, without one, `eval_samples` items of
  the Dataset chosen by the seed and never trained on; `eval_batches` gives them in the same order
  on every call.
* Per-item random streams. Each `__getitem__` runs with the global random generators a Dataset
  usually draws augmentations from (torch's CPU generator, Python's `random`, NumPy's legacy
  `np.random`) seeded from (seed, epoch, index) for a training item, and from (seed, index) for a
  held-out one: a random crop or mask is a pure function of position too, different each epoch and
  the same on a resume. The generators are restored after each read, so reading leaves the training
  process's own random stream (dropout, for one) untouched.

What the Dataset must guarantee: `len()` and `dataset[i]` for every i below it, and an item that
depends only on i and those global generators. A generator of its own (`np.random.default_rng()`
without a seed, a `torch.Generator()` it keeps) is outside what elastune can reseed: derive its
seed from the index instead. A Dataset whose items change between calls (reading a file that
changes, a cache filled in arrival order) breaks the guarantees above silently.

Bad input is a DataError naming what to fix: an empty Dataset, a held-out share that leaves nothing
to train on, items the collate function cannot join (with the field whose shapes differ), a collate
result that is not a batch of one sample per item.
"""

from __future__ import annotations

import numbers
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, default_collate

from elastune.data.batch import Batch, batch_size, slice_batch
from elastune.data.source import check_range
from elastune.errors import DataError

__all__ = ["Collate", "DatasetSource"]

Collate = Callable[[list[Any]], Batch]

# Domains of the seeds drawn from the one `seed`, so no two uses share a stream.
_ITEM, _HELD_OUT_ITEM, _SPLIT, _ORDER = range(4)
_MASK64 = (1 << 64) - 1


def _mix(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix64 over each in turn): a fixed function, unlike
    Python's `hash`, which varies between processes for some types."""
    h = 0x9E3779B97F4A7C15
    for part in parts:
        h = (h ^ (part & _MASK64)) + 0x9E3779B97F4A7C15 & _MASK64
        h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _MASK64
        h ^= h >> 31
    return h >> 1


@contextmanager
def _global_generators_kept() -> Iterator[None]:
    """Whatever the reads inside seed, the global generators are as they were afterwards."""
    kept = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(kept[0])
        random.setstate(kept[1])
        np.random.set_state(kept[2])


def _seed_global_generators(seed: int) -> None:
    torch.default_generator.manual_seed(seed)  # the CPU generator only: a loader worker must not touch CUDA
    random.seed(seed)
    np.random.seed(seed % 2**32)  # NumPy's legacy seed is 32-bit


def _length(dataset: Any, what: str, origin: str) -> int:
    if isinstance(dataset, IterableDataset) or not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        kind = "an IterableDataset" if isinstance(dataset, IterableDataset) else f"a {type(dataset).__name__}"
        raise DataError(
            f"{origin}: the {what} is {kind}, not a map-style Dataset: elastune reads items by position "
            "(__len__ and __getitem__), so a step, its retry and a resume read the same ones; wrap the data "
            "in a torch.utils.data.Dataset, or write a data_source() that streams it"
        )
    n = len(dataset)
    if n <= 0:
        raise DataError(f"{origin}: the {what} ({type(dataset).__name__}) has no items (len {n}); give it at least one")
    return n


class DatasetSource:
    """A map-style Dataset (and optionally a held-out one) as a DataSource (see the module docstring).

    `eval_samples`: without `held_out`, how many of `dataset`'s items are held out (a run's
    `eval.samples`). `origin`: who gave the Dataset, for messages (`MyWorkload.dataset()`).
    """

    # The DataSource protocol's click-model fields: a Dataset declares no tables (a workload's
    # `tables` does).
    table_sizes: tuple[int, ...] = ()
    pooling = 1

    def __init__(
        self,
        dataset: Dataset[Any],
        held_out: Dataset[Any] | None = None,
        *,
        eval_samples: int | None = None,
        collate: Collate = default_collate,
        seed: int = 0,
        origin: str = "DatasetSource",
    ) -> None:
        self.dataset, self.held_out, self.collate, self.seed, self.origin = dataset, held_out, collate, seed, origin
        n = _length(dataset, "training Dataset", origin)
        self._train_ids: torch.Tensor | None = None  # None: every item of `dataset`, by index
        self._held_ids: torch.Tensor | None = None  # None: every item of `held_out`, by index
        if held_out is not None:
            self._held_count = _length(held_out, "held-out Dataset", origin)
            self._held_from = held_out
        else:
            if eval_samples is None or eval_samples < 1:
                raise DataError(
                    f"{origin}: eval_samples={eval_samples}: without a held-out Dataset, say how many of the "
                    "Dataset's items to hold out for evaluation (a run's eval.samples), at least 1"
                )
            if eval_samples >= n:
                raise DataError(
                    f"{origin}: eval.samples={eval_samples} holds out every one of the Dataset's {n} items, "
                    f"leaving none to train on: set eval.samples below {n} (--set eval.samples=N), or return "
                    "a held-out Dataset beside it, (train, held_out)"
                )
            # A fixed split, drawn once from the seed: held-out items are never trained on.
            split = torch.randperm(n, generator=torch.Generator().manual_seed(_mix(seed, _SPLIT)))
            self._held_ids = split[:eval_samples].sort().values  # in index order: a file reads forward
            self._train_ids = split[eval_samples:].sort().values
            self._held_count, self._held_from = eval_samples, dataset
        self._train_count = n if self._train_ids is None else len(self._train_ids)
        self._orders: dict[int, torch.Tensor] = {}  # epoch -> its order, the last two (a read may span both)

    def __len__(self) -> int:
        """Training items in one epoch."""
        return self._train_count

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start + n): sample k is epoch k // len's item at k mod len."""
        check_range(start, n)
        picks: list[tuple[int, int]] = []  # (epoch, index in the Dataset)
        position, end = start, start + n
        while position < end:
            epoch, offset = divmod(position, self._train_count)
            take = min(end - position, self._train_count - offset)
            picks += [(epoch, int(i)) for i in self._order(epoch)[offset : offset + take].tolist()]
            position += take
        if not picks:  # n == 0: the structure of one sample, none of its rows
            first = int(self._order(start // self._train_count)[0])
            return slice_batch(self._batch(self.dataset, [(_mix(self.seed, _ITEM, 0, first), first)], "training"), 0, 0)
        seeded = [(_mix(self.seed, _ITEM, epoch, index), index) for epoch, index in picks]
        return self._batch(self.dataset, seeded, "training")

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        """The held-out items, the first min(n, held-out items) in a fixed order, `batch_size` at a time."""
        check_range(0, n)
        if batch_size < 1:
            raise ValueError(f"eval_batches(batch_size={batch_size}): must be >= 1")
        count = min(n, self._held_count)
        ids = list(range(count)) if self._held_ids is None else [int(i) for i in self._held_ids[:count].tolist()]
        for at in range(0, count, batch_size):
            chunk = ids[at : at + batch_size]
            yield self._batch(self._held_from, [(_mix(self.seed, _HELD_OUT_ITEM, i), i) for i in chunk], "held-out")

    # -- reading ------------------------------------------------------------------------------

    def _order(self, epoch: int) -> torch.Tensor:
        """Epoch `epoch`'s training items (indices into the Dataset), a permutation drawn from the seed."""
        order = self._orders.get(epoch)
        if order is None:
            generator = torch.Generator().manual_seed(_mix(self.seed, _ORDER, epoch))
            order = torch.randperm(self._train_count, generator=generator)
            if self._train_ids is not None:
                order = self._train_ids[order]
            if len(self._orders) >= 2:
                del self._orders[min(self._orders)]
            self._orders[epoch] = order
        return order

    def _batch(self, dataset: Any, seeded: Sequence[tuple[int, int]], what: str) -> Batch:
        """The items at `seeded`'s indices, each read under its own seed, joined by `collate`."""
        items = []
        with _global_generators_kept():
            for seed, index in seeded:
                _seed_global_generators(seed)
                items.append(dataset[index])
        indices = [index for _, index in seeded]
        name = _name(self.collate)
        try:
            batch = self.collate(items)
        except (TypeError, ValueError, RuntimeError, KeyError, IndexError) as exc:
            found = _unjoinable(items, indices) if self.collate is default_collate else None
            why = (
                f"default_collate cannot join them: {found}" if found else f"{name} raised {type(exc).__name__}: {exc}"
            )
            raise DataError(
                f"{self.origin}: {what} items {_shown(indices)}: {why}. Items of equal shapes join by default; "
                "otherwise override the workload's collate(samples) (DatasetSource: collate=) to make the batch, "
                "a value whose length varies per sample as elastune.Ragged.from_list([...])"
            ) from exc
        try:
            rows = batch_size(batch)
        except ValueError as exc:
            raise DataError(
                f"{self.origin}: {name} returned no batch for {what} items {_shown(indices)}: {exc}"
            ) from exc
        if rows != len(items):
            raise DataError(
                f"{self.origin}: {name} joined {len(items)} {what} items {_shown(indices)} into a batch of {rows} "
                "samples; it must return one sample per item (a leading dimension of len(samples))"
            )
        return batch


def _name(collate: Collate) -> str:
    """`MyWorkload.collate` for a bound method, else the function's own name."""
    owner = getattr(collate, "__self__", None)
    own = getattr(collate, "__name__", type(collate).__name__)
    return f"{type(owner).__name__}.{own}" if owner is not None else own


def _shown(indices: Sequence[int]) -> str:
    head = ", ".join(str(i) for i in indices[:4])
    return f"[{head}{', ...' if len(indices) > 4 else ''}] (of {len(indices)})"


_JOINED = "default_collate joins tensors, NumPy arrays, numbers, strings, mappings and sequences"


def _unjoinable(values: Sequence[Any], indices: Sequence[int], path: str = "item") -> str | None:
    """Where default_collate fails on these items (of these Dataset indices): the first field whose
    shapes, keys, lengths or types differ, or whose type it does not join; None where none is found."""
    first, at = values[0], indices[0]

    def odd(what: str, mine: object, other: object, index: int) -> str:
        return f"{path} has different {what}: {mine} in item {at}, {other} in item {index}"

    if isinstance(first, torch.Tensor | np.ndarray):
        for value, index in zip(values, indices, strict=True):
            other = list(value.shape) if isinstance(value, torch.Tensor | np.ndarray) else type(value).__name__
            if other != list(first.shape):
                return odd("shapes", list(first.shape), other, index)
        return None
    if isinstance(first, Mapping):
        for value, index in zip(values, indices, strict=True):
            if not isinstance(value, Mapping) or set(value) != set(first):
                return odd("keys", sorted(first), sorted(value) if isinstance(value, Mapping) else value, index)
        fields = (_unjoinable([v[k] for v in values], indices, f"{path}[{k!r}]") for k in first)
        return next((f for f in fields if f), None)
    if isinstance(first, str | bytes | numbers.Number):
        return None
    if isinstance(first, Sequence):
        for value, index in zip(values, indices, strict=True):
            if not isinstance(value, Sequence) or len(value) != len(first):
                length = len(value) if isinstance(value, Sequence) else type(value).__name__
                return odd("lengths (a sequence joins position by position)", len(first), length, index)
        fields = (_unjoinable([v[i] for v in values], indices, f"{path}[{i}]") for i in range(len(first)))
        return next((f for f in fields if f), None)
    return f"{path} is a {type(first).__name__} in item {at} ({_JOINED})"
