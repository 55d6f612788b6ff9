"""The data-loading knobs (training/batches.py): loader workers read the same batches as the
training process would, in other processes and ahead of the step; prefetch needs workers; pinned
memory needs a GPU."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from elastune.cli import main
from elastune.config import DataConfig, RunConfig
from elastune.data.clicks import ClickBatch
from elastune.data.synthetic import SyntheticCriteo
from elastune.training.batches import step_batches
from elastune.training.loop import train

MakeCfg = Callable[..., RunConfig]


class Recording(SyntheticCriteo):
    """Synthetic data that leaves a file per read: which process read which position."""

    def __init__(self, folder: Path) -> None:
        super().__init__((50, 40), zipf_alpha=1.1, pooling=1, seed=0)
        self.folder = folder

    def read(self, start: int, n: int) -> ClickBatch:
        (self.folder / f"{start}-{os.getpid()}").touch()
        return super().read(start, n)


def _reads(folder: Path) -> dict[int, int]:
    return {int(start): int(pid) for start, pid in (f.name.split("-") for f in folder.iterdir())}


def _wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_read_the_same_batches_elsewhere_and_ahead(tmp_path: Path, workers: int) -> None:
    data = DataConfig(loader_workers=workers, prefetch=2) if workers else DataConfig()
    batches = step_batches(Recording(tmp_path), data, done=64, steps=6, effective=16, rank=1, world=2)
    first = next(batches)
    # read ahead: workers have the next steps under way without being asked; in-process reads wait
    if workers:
        assert _wait_for(lambda: len(_reads(tmp_path)) >= 4), _reads(tmp_path)
    else:
        assert _reads(tmp_path) == {(64 * 2) + 16: os.getpid()}
    got = [first, *batches]
    # rank 1 of 2: the second half of each 32-sample group step, from the 64 samples this rank has done
    starts = [(64 + 16 * i) * 2 + 16 for i in range(6)]
    reads = _reads(tmp_path)
    assert sorted(reads) == starts
    assert (set(reads.values()) == {os.getpid()}) == (workers == 0)
    plain = SyntheticCriteo((50, 40), zipf_alpha=1.1, pooling=1, seed=0)
    for batch, start in zip(got, starts, strict=True):
        assert torch.equal(batch.sparse, plain.read(start, 16).sparse)


def test_training_with_workers_gives_the_same_model(tiny_cfg: MakeCfg, tmp_path: Path) -> None:
    runs = {}
    for workers in (0, 2):
        path = tmp_path / f"{workers}.ckpt"
        result = train(tiny_cfg(f"data.loader_workers={workers}", f"checkpoint.path={path}"))
        runs[workers] = (result.samples, torch.load(path, weights_only=False)["model"])
    assert runs[0][0] == runs[2][0]
    for key, value in runs[0][1].items():
        torch.testing.assert_close(runs[2][1][key], value, atol=1e-6, rtol=0)


def test_prefetch_needs_workers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--set", "data.prefetch=4"]) == 2
    err = capsys.readouterr().err
    assert "data.prefetch=4" in err and "data.loader_workers" in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs a GPU")
def test_pinned_batches_on_a_gpu() -> None:
    data = DataConfig(pin_memory=True)
    source = SyntheticCriteo((50,), zipf_alpha=1.1, pooling=1, seed=0)
    batch = next(step_batches(source, data, done=0, steps=1, effective=8, rank=0, world=1))
    assert batch.sparse.is_pinned() and batch.dense.is_pinned()
