"""data/source.py's ReadAhead: the batches read through it are those read in place, in the same
order, whatever the reads' pattern (a data-parallel rank's stride, a resume, a micro-batch size
that changes, a range read twice); a read ahead that fails costs nothing; the reads are made on
threads, and after close() in place. The training loop does not use it yet: bench/overhead.py's
`read-ahead` arm measures what it would save first."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import torch
from elastune.config import DataConfig, RunConfig
from elastune.data.clicks import ClickBatch
from elastune.data.dataset import DatasetSource
from elastune.data.source import READ_AHEAD_THREAD, ReadAhead
from elastune.data.synthetic import SyntheticCriteo
from elastune.training.batches import step_batches

MakeCfg = Callable[..., RunConfig]


def running() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READ_AHEAD_THREAD]


def ended(seconds: float = 30.0) -> bool:
    """Whether every read-ahead thread ends by itself (none waits for anything but its read)."""
    for thread in running():
        thread.join(seconds)
    return not running()


class Stream(SyntheticCriteo):
    """A synthetic stream that notes which thread made each read, and has no sample at `bad`."""

    def __init__(self, bad: int = -1) -> None:
        # small chunks, so that reads and blocks start and end inside chunks and span several
        super().__init__((50, 40, 7), zipf_alpha=1.1, pooling=2, seed=3, chunk=48)
        self.bad, self.threads = bad, []

    def read(self, start: int, n: int) -> ClickBatch:
        self.threads.append(threading.current_thread().name)
        if start <= self.bad < start + n:
            raise ValueError(f"no sample {self.bad}")
        return super().read(start, n)


def assert_same(got: ClickBatch, want: ClickBatch) -> None:
    for field in ("dense", "sparse", "labels"):
        assert torch.equal(getattr(got, field), getattr(want, field)), field


# (start, n) in the order a caller reads them
PATTERNS = {
    "steps": [(16 * k, 16) for k in range(8)],
    "rank 1 of 2": [(16 * (2 * k + 1), 16) for k in range(8)],  # a group's step apart
    "resumed at step 5": [(16 * k, 16) for k in range(5, 10)],
    "micro-batch changes": [(0, 16), (16, 16), (32, 40), (72, 40), (112, 8), (120, 8), (128, 100)],
    "a range read twice, and none": [(0, 30), (30, 30), (30, 30), (60, 0), (60, 30), (0, 30), (90, 30)],
}


@pytest.mark.parametrize("block", [1, 64])  # a read at a time; blocks of several reads
@pytest.mark.parametrize("pattern", PATTERNS)
def test_reads_ahead_return_the_ranges_asked_for(pattern: str, block: int) -> None:
    source, plain = Stream(), Stream()
    with ReadAhead(source, block=block) as ahead:
        for start, n in PATTERNS[pattern]:
            assert_same(ahead.read(start, n), plain.read(start, n))
    assert not running()  # closed: the read under way, if any, waited for
    assert set(source.threads) == {READ_AHEAD_THREAD}  # every read made on a thread of its own


def test_reads_that_follow_each_other_are_read_a_block_at_a_time() -> None:
    source = Stream()
    with ReadAhead(source, block=64) as ahead:
        for k in range(12):
            assert_same(ahead.read(16 * k, 16), Stream().read(16 * k, 16))
    # the first read, then blocks of four reads: a thread started once a block, not once a read
    assert len(source.threads) == 1 + 4


@pytest.mark.parametrize("workers", [0, 2])
def test_step_batches_are_the_same_read_ahead_across_a_resume(workers: int) -> None:
    """The loop's iterator over a ReadAhead, resumed half-way on a new one (as a resumed run makes
    it), gives each rank the batches the in-place source gives; with loader workers (forked
    processes, where a ReadAhead reads in place) too."""
    data = DataConfig(loader_workers=workers, prefetch=2) if workers else DataConfig()
    for rank in (0, 1):
        plain = list(step_batches(Stream(), data, done=0, steps=8, effective=16, rank=rank, world=2))
        with ReadAhead(Stream()) as first, ReadAhead(Stream()) as second:
            got = list(step_batches(first, data, done=0, steps=5, effective=16, rank=rank, world=2))
            got += step_batches(second, data, done=5 * 16, steps=3, effective=16, rank=rank, world=2)
        assert len(got) == len(plain) == 8
        for a, b in zip(got, plain, strict=True):
            assert_same(a, b)


def test_a_failed_read_is_raised_where_it_is_asked_for_and_dropped_where_it_was_a_guess() -> None:
    with ReadAhead(Stream(bad=40), block=64) as ahead:
        assert_same(ahead.read(0, 16), Stream().read(0, 16))
        assert_same(ahead.read(16, 16), Stream().read(16, 16))  # its block, [16, 80), failed: read anew
        with pytest.raises(ValueError, match="no sample 40"):
            ahead.read(32, 16)  # as a read in place would
        assert_same(ahead.read(48, 16), Stream().read(48, 16))
    with ReadAhead(Stream(bad=1030), block=64) as ahead:
        ahead.read(1000, 16)  # reads ahead [1016, 1080): fails, but its range is never asked for
        assert_same(ahead.read(500, 16), Stream().read(500, 16))


def test_a_source_that_does_not_allow_it_is_read_in_place() -> None:
    """A DatasetSource seeds the global random generators around each item: never on a thread."""
    items = torch.arange(40.0).unsqueeze(1)
    source = DatasetSource(torch.utils.data.TensorDataset(items), eval_samples=8, seed=1)
    ahead = ReadAhead(source)
    for k in range(4):
        assert torch.equal(ahead.read(8 * k, 8)[0], source.read(8 * k, 8)[0])
    assert not running()


def test_after_close_reads_are_made_in_place() -> None:
    source, plain = Stream(), Stream()
    ahead = ReadAhead(source)
    ahead.read(0, 16)
    ahead.read(16, 16)
    ahead.close()
    ahead.close()  # twice: nothing left to wait for
    assert not running()
    assert_same(ahead.read(32, 16), plain.read(32, 16))
    assert source.threads[-1] == threading.current_thread().name
    assert list(map(len, ahead.eval_batches(40, 16))) == [16, 16, 8]
