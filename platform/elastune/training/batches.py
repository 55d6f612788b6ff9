"""The training loop's batches, one per optimizer step, through a real `torch.utils.data.DataLoader`.

A data source is a pure function of position (data/clicks.py), so step k's batch is simply the
source's samples at that step's position: item k of `StepBatches`. The DataLoader adds what the
run config's data-loading knobs ask for:

* `data.loader_workers`: 0 reads each step's batch in the training process, between steps; N > 0
  reads ahead in N worker processes (forked: the source is copied, not pickled), while the
  training process computes. Workers cost CPU cores the step itself may want.
* `data.prefetch`: batches each worker keeps ready (DataLoader's prefetch_factor; workers only).
* `data.pin_memory`: batches land in page-locked host memory, so the copy to a GPU can be
  asynchronous (`non_blocking`). Without a GPU it does nothing.

Whatever the knobs, step k sees the same samples: the loader only changes when they are read.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset

from elastune.config import DataConfig
from elastune.data.batch import Batch, pin_batch
from elastune.data.source import DataSource

__all__ = ["Step", "StepBatches", "step_batches"]


class Step:
    """One step's batch as the DataLoader carries it: its pin-memory thread calls `pin_memory()` on
    an object that has one, and this one pins whatever the batch holds (data/batch.py); torch's own
    pinning would pass a dataclass or a Ragged value through unpinned."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def pin_memory(self) -> Step:
        return Step(pin_batch(self.batch))


class StepBatches(Dataset[Step]):
    """Item i: the samples of the i-th step from here that this rank reads, `done` being the
    samples this rank has trained on so far. Each rank reads its own contiguous share of the
    group's step (`effective` samples), so the ranks never overlap."""

    def __init__(self, source: DataSource, *, done: int, steps: int, effective: int, rank: int, world: int):
        self.source, self.done, self.steps = source, done, steps
        self.effective, self.rank, self.world = effective, rank, world

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int) -> Step:
        if not 0 <= index < self.steps:
            raise IndexError(index)
        done = self.done + index * self.effective
        return Step(self.source.read(done * self.world + self.rank * self.effective, self.effective))


def step_batches(
    source: DataSource, data: DataConfig, *, done: int, steps: int, effective: int, rank: int, world: int
) -> Iterator[Batch]:
    """The next `steps` steps' batches, in order, as the data-loading knobs say."""
    dataset = StepBatches(source, done=done, steps=steps, effective=effective, rank=rank, world=world)
    workers = data.loader_workers
    loader = DataLoader(
        dataset,
        batch_size=None,  # an item is already a whole step's batch (and passes through as it is)
        shuffle=False,  # step order is the stream's order
        num_workers=workers,
        prefetch_factor=data.prefetch if workers else None,
        # pinned on the loader's own thread (Step.pin_memory); without a GPU torch would only warn
        pin_memory=data.pin_memory and torch.cuda.is_available(),
        # its own generator: a loader draws a seed from one when it starts, and drawing it from the
        # global RNG would make a resumed run's random stream differ from the uninterrupted one's
        generator=torch.Generator().manual_seed(0),
    )
    return (step.batch for step in loader)
