"""The engine's data-parallel seam (training/loop.py `parallel=`): a group of ranks that each train
on their share of every step equals one process training on the whole step (what lets a sweep's
trial run as a Ray Train worker group; tuning/trial.py)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from elastune.training.loop import train
from elastune.tuning.worker_group import _TorchDDP  # what a Ray Train worker passes
from elastune.validate import load_run_config

from tests.conftest import TINY

WORLD = 2


STRATEGIES = ["full", "hashed"]
OVERRIDES = ["batch.accum=2"]


def _rank(rank: int, store_path: str, out: str) -> None:
    torch.set_num_threads(1)
    # A file store: the ranks meet through the file system, no socket is opened.
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=WORLD)
    try:
        # Every strategy in one group: spawning the ranks (each imports torch) is most of the cost.
        results = {}
        for strategy in STRATEGIES:
            per_rank = [*TINY, *OVERRIDES, f"embedding.strategy={strategy}", "batch.micro=32"]
            result = train(load_run_config(None, per_rank), parallel=_TorchDDP(rank=rank, world_size=WORLD))
            results[strategy] = {"logloss": result.metrics["logloss"], "samples": result.samples}
        torch.save(results, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or sys.platform != "linux", reason="needs torch.distributed (gloo)")
def test_two_ranks_of_half_the_batch_equal_one_process_of_the_whole(tmp_path: Path) -> None:
    # Each rank: micro 32 x accum 2, x 2 ranks = one process's micro 64 x accum 2 per step.
    out = str(tmp_path / "rank")
    with tempfile.NamedTemporaryFile(dir=tmp_path, delete=False) as store:
        mp.spawn(_rank, args=(store.name, out), nprocs=WORLD, join=True)
    ranks = [torch.load(f"{out}.{r}") for r in range(WORLD)]
    for strategy in STRATEGIES:
        alone = train(load_run_config(None, [*TINY, *OVERRIDES, f"embedding.strategy={strategy}", "batch.micro=64"]))
        first, second = ranks[0][strategy], ranks[1][strategy]
        assert first["logloss"] == pytest.approx(second["logloss"], abs=1e-7), strategy  # the ranks stay in step
        assert first["logloss"] == pytest.approx(alone.metrics["logloss"], abs=1e-6), strategy
        assert first["samples"] * WORLD == alone.samples, strategy
