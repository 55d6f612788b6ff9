"""What every data source shares: the `DataSource` protocol, its range check, the typed arrays
sources build batches from, and the `DataArtifact` a file source keeps beside the weights.

The one property everything else leans on is that a source is a *pure function of position*:
`read(start, n)` returns training samples `[start, start + n)` of an endless stream, and the same
samples whatever way the range is split into calls. That is what makes gradient accumulation
(one batch read as k micro-batches), OOM retries (re-read a batch at a smaller micro-batch) and
checkpoint resume (continue at sample `step * batch_size`) exact rather than approximate.

`ReadAhead` leans on it too: it reads the range a training loop will ask for next on a thread while
the loop trains on this one, and whatever it guessed, a read returns `read(start, n)` of the range
asked for.

A source may say `synthetic = True` (the generated streams do: SyntheticCriteo, SyntheticText,
SyntheticClassification): it stands in for a real pipeline, and on a CPU device the training loop
leaves the time its reads take out of samples/s (training/throughput.py says why).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from elastune.data.batch import Batch, slice_batch

__all__ = [
    "F32",
    "F64",
    "I64",
    "READ_AHEAD_BLOCK",
    "READ_AHEAD_THREAD",
    "U32",
    "DataArtifact",
    "DataSource",
    "Mask",
    "ReadAhead",
    "check_range",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
Mask = npt.NDArray[np.bool_]


@runtime_checkable
class DataSource(Protocol):
    """Where training and evaluation samples come from (see the module docstring)."""

    table_sizes: tuple[int, ...]
    pooling: int

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start+n) of the stream.

        Deterministic: read(s, a+b) == concat(read(s, a), read(s+a, b)) exactly, whatever the
        split. This is what makes micro-batch x accumulation, OOM retries and checkpoint resume
        exact.
        """
        ...

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        """The held-out eval set: n samples, disjoint from training, the same every call."""
        ...


# ReadAhead's block: samples read ahead at a time, at least (SyntheticCriteo's chunk): a thread
# started once a block, and ~1 MiB a block at DLRM's shape, two blocks held
READ_AHEAD_BLOCK = 4096
READ_AHEAD_THREAD = "elastune-read-ahead"  # its threads' name


def check_range(start: int, n: int) -> None:
    if start < 0 or n < 0:
        raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")


class ReadAhead:
    """A source read ahead, for a training loop: while the caller trains on the samples of one
    `read(start, n)`, a thread reads the ones it will most likely ask for next. Reads that follow
    each other are read a block at a time (`block` samples at least, a whole number of reads): the
    caller's reads are slices of a block read already, and the next block is started as the caller
    starts on this one, so a thread starts once a block, not once a step. A data-parallel rank's
    reads, a group's step apart, are read one at a time.

    Exact whatever it guesses: a read returns the samples `source.read(start, n)` returns, sliced
    from a range read ahead (a DataSource is split-invariant) or, where none holds them or reading
    it failed, read anew (what was read ahead is dropped). Reads never overlap: the source sees one
    call at a time. At most two ranges are held, the one being read from and the next.

    Each range is read on a thread of its own that ends with the read: no thread waits for work, so
    none outlives the loop that reads by more than the one read under way (whether the loop ended
    or raised; `close()` waits for it, and reads in place from then on). Only a source that declares
    `reads_on_any_thread = True` is read ahead (SyntheticCriteo: numpy with generators of its own);
    any other is read in place, as it was. A DatasetSource must not be: it seeds the process's
    global random generators around each item, which a read on another thread would race with the
    training step's own draws (dropout). In a forked process (a DataLoader worker) reads are made
    in place too. training/loop.py does not use it yet: on a busy 2-core machine it halved a step's
    wait for its batch but not the step, and added ~5 MiB to CPU peaks; bench/overhead.py's
    `read-ahead` arm measures it first.
    """

    def __init__(self, source: DataSource, *, block: int = READ_AHEAD_BLOCK) -> None:
        self.source, self.block = source, block
        self.table_sizes, self.pooling = source.table_sizes, source.pooling
        self._owner = os.getpid()
        self._threaded = bool(getattr(source, "reads_on_any_thread", False))
        self._held: list[_Read] = []  # read ahead, in order: the range being read from, then the next
        self._last: int | None = None  # where the last read started

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start + n): those of `source.read(start, n)`, perhaps read already."""
        check_range(start, n)
        if not self._threaded or os.getpid() != self._owner:
            return self.source.read(start, n)
        end = start + n
        batch = self._take(start, end)
        if batch is None:  # not read ahead (or reading it failed): read anew, once no read is under way
            self._drop(self._held)
            # on a thread too: no training read then allocates in the training thread's heap (malloc
            # gives each thread an arena), so that heap's layout does not depend on what was guessed
            batch = _Read(self.source, start, end).batch()
        stride = start - self._last if self._last is not None and start > self._last else n
        self._last = start
        self._held = [r for r in self._held if r.hi > end]  # those used up are done with
        if n:
            self._read_next(start, end, stride)
        return batch

    def _take(self, start: int, end: int) -> Batch | None:
        """Samples [start, end) from a range read ahead (waiting for it), or None where none holds them."""
        for index, held in enumerate(self._held):
            if held.lo <= start and end <= held.hi:
                self._drop(self._held[:index])  # ranges before it were skipped
                self._held = self._held[index:]
                if held.failed():  # waits for it; a read anew says what is wrong, if anything is
                    return None
                whole = held.batch()
                if (start, end) == (held.lo, held.hi):
                    return whole
                return slice_batch(whole, start - held.lo, end - held.lo)  # views: no copy
        return None

    def _read_next(self, start: int, end: int, stride: int) -> None:
        """Start reading what the next read will most likely ask for, unless it is held."""
        n = end - start
        if stride == n:  # reads follow each other: as this block is started on, the next one
            if not any(r.lo >= end for r in self._held):
                at = self._held[-1].hi if self._held else end
                self._held.append(_Read(self.source, at, at + n * -(-self.block // n)))  # whole reads
        elif not any(r.lo <= start + stride and start + stride + n <= r.hi for r in self._held):
            self._held.append(_Read(self.source, start + stride, start + stride + n))  # a rank's next read

    def _drop(self, reads: list[_Read]) -> None:
        """Ranges not to be read from, once their reads have ended (the source is free only then)."""
        for held in reads:
            held.join()
        if reads is self._held:
            self._held = []

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        """The source's held-out batches, once no read is under way (one call at a time)."""
        for held in self._held:
            held.join()
        return self.source.eval_batches(n, batch_size)

    def close(self) -> None:
        """Wait for the read under way, if any; reads are made in place from then on."""
        self._drop(self._held)
        self._threaded = False

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Read(threading.Thread):
    """Samples [lo, hi) of a source, read on a thread of its own that ends with the read."""

    def __init__(self, source: DataSource, lo: int, hi: int) -> None:
        super().__init__(name=READ_AHEAD_THREAD, daemon=True)  # daemon: never holds the interpreter's exit
        self.source, self.lo, self.hi = source, lo, hi
        self._batch: Batch = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._batch = self.source.read(self.lo, self.hi - self.lo)
        except BaseException as exc:  # raised where the samples are asked for, if they are
            self._error = exc

    def failed(self) -> bool:
        self.join()
        return self._error is not None

    def batch(self) -> Batch:
        """The samples read (waiting for them); raises what the read raised."""
        if self.failed():
            assert self._error is not None
            raise self._error
        return self._batch


@dataclass(frozen=True)
class DataArtifact:
    """What turned a file source's data into the ids a model trained on: a table source's
    vocabulary, a text source's tokenizer. The weights' rows mean nothing without it, so
    training/checkpoint.py writes it beside a checkpoint (`<checkpoint><suffix>`) and refuses a
    resume whose data now gives other ids, and tracking/mlflow.py logs it on a sweep's parent run."""

    name: str  # what it is, in messages: "vocabulary", "tokenizer"
    text: str  # its JSON
    suffix: str  # the file beside a checkpoint: <checkpoint.path><suffix>
    mlflow_path: str  # the artifact on a sweep's MLflow parent run
    changed: str  # what a resume is told when the data now gives other ids
    ids: Callable[[Any], Any]  # what of the parsed JSON must be equal for the ids to be the same
