"""Issue 33's "done means", on one machine: a workload with an unusual batch (a torch Dataset of
nested-dict items holding a variable number of ids each, joined into a Ragged by its own collate)
and an unusual metric (a regression judged by RMSE, lower is better; a classifier judged by
accuracy, higher is better) trains and is estimated through the command line, as a user would run
it (tests/unit/plugin_workload/unusual.py). tests/integration/workloads/test_sweep_general.py sweeps it."""

from __future__ import annotations

import json

import pytest
import torch
from elastune.cli import main
from elastune.memory.estimate import estimate
from elastune.validate import load_run_config

from tests.unit.plugin_workload.unusual import Baskets

UNUSUAL = "tests.unit.plugin_workload.unusual"
# one intra-op thread: on a busy 2-core machine, tiny ops wait on a thread pool
SETS = ["device=cpu", "threads=1", "model.embedding_dim=8", "eval.samples=512", "warmup_steps=1", "optimizer.lr=0.02"]


def _args(*sets: str) -> list[str]:
    return [a for s in [*SETS, *sets] for a in ("--set", s)]


def _spend_spread() -> float:
    """The RMSE of always guessing the held-out spends' mean: what a model that learnt nothing scores.
    BasketSpend's held-out Dataset is read in index order: its first eval.samples items."""
    held_out = Baskets(2000, first=10**6)
    return float(torch.stack([held_out[i]["spend"] for i in range(512)]).std(unbiased=False))


def _majority_share() -> float:
    """The accuracy of always guessing the commonest kind of basket (over the whole Dataset, of which
    the held-out items are a random share)."""
    data = Baskets(6000)
    return float(torch.bincount(torch.stack([data[i]["kind"] for i in range(len(data))])).max()) / len(data)


@pytest.mark.parametrize(
    ("workload", "metric", "direction"), [("BasketSpend", "rmse", "min"), ("BasketKind", "accuracy", "max")]
)
def test_an_unusual_batch_and_metric_train_and_are_estimated(
    workload: str, metric: str, direction: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [f"workload={UNUSUAL}:{workload}", "steps=40", "batch.micro=64", "batch.accum=2"]
    assert main(["train", "--format", "json", *_args(*sets)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["quality_metric"], result["quality_direction"]) == (metric, direction)
    assert set(result["metrics"]) == {"loss", metric}
    assert result["quality"] == result["metrics"][metric] == result[f"val_{metric}"]
    assert result["samples"] == 40 * 128 and result["effective_batch"] == 128
    # it learnt from the ragged baskets: clearly better than a model that learnt nothing
    if metric == "rmse":
        assert result["quality"] < 0.5 * _spend_spread(), result["metrics"]
    else:
        assert result["quality"] > _majority_share() + 0.15, result["metrics"]

    # priced from its own example batch (nested dicts, a Ragged at the first sample's length)
    assert main(["estimate", "--format", "json", *_args(*sets)]) == 0
    small = json.loads(capsys.readouterr().out)["estimated_peak_bytes"]
    assert main(["estimate", "--format", "json", *_args(*sets[:-2], "batch.micro=1024", "batch.accum=1")]) == 0
    large = json.loads(capsys.readouterr().out)["estimated_peak_bytes"]
    assert 0 < small < large  # more samples in flight at once: more activations


def test_baskets_pooled_by_an_embedding_bag_over_offsets_are_estimated() -> None:
    cfg = load_run_config(None, [*SETS, f"workload={UNUSUAL}:BasketSpendBag", "batch.micro=64"])
    assert estimate(cfg).peak_bytes > 0
