"""Issue 33's "done means", through a sweep on the shared local Ray: a workload with an unusual batch
(a torch Dataset of nested-dict items, each with a variable number of ids, joined into a Ragged by
its own collate) and an unusual metric (a regression judged by RMSE, lower is better; a classifier
judged by accuracy, higher is better) sweeps to the end (tests/unit/plugin_workload/unusual.py).

The grid is full vs hashed embeddings against the full reference, with a tolerance of 0.1%: the
full trial matches the reference, and hashing (fewer rows than ids) moves the metric by more than
that, so whether the hashed trial is within the tolerance depends on the metric's direction alone.
The test judges every trial by hand, in the declared direction, and checks the sweep did the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from elastune.tracking.records import TrialRecord
from elastune.tuning.spec import SweepSpec
from elastune.tuning.sweep import SweepOptions, run_sweep

from tests.integration.sweep_specs import tiny_spec

pytestmark = pytest.mark.integration

TOLERANCE = 0.001


def _within(trial: TrialRecord, reference: float, direction: str) -> bool:
    """The declared direction's bound, written out here rather than asked of elastune."""
    assert trial.quality is not None
    slack = TOLERANCE * abs(reference)
    return trial.quality <= reference + slack if direction == "min" else trial.quality >= reference - slack


@pytest.mark.parametrize(
    ("workload", "metric", "direction"), [("BasketSpend", "rmse", "min"), ("BasketKind", "accuracy", "max")]
)
def test_an_unusual_workload_sweeps_to_the_end_judged_by_its_own_metric(
    ray_local: Any, tmp_path: Path, workload: str, metric: str, direction: str
) -> None:
    raw = tiny_spec(name=f"unusual-{metric}")
    raw["base"] = {
        "device": "cpu",
        "workload": f"tests.unit.plugin_workload.unusual:{workload}",
        "model": {"embedding_dim": 8},
        "optimizer": {"lr": 0.02},
        "batch": {"micro": 128},
        "eval": {"samples": 512},
        "warmup_steps": 1,
    }
    raw["parameters"] = {"embedding.strategy": {"type": "choice", "values": ["full", "hashed"]}}
    raw["constraints"] = {
        "effective_batch": 128,
        "quality_tolerance": TOLERANCE,
        "reference": {"embedding.strategy": "full"},
    }
    raw["budget"] = {"max_trials": 2, "max_concurrent": 2, "trial_samples": 30 * 128}
    record = run_sweep(
        SweepSpec.model_validate(raw), SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", home=tmp_path)
    )

    assert record.status == "finished"
    assert (record.quality_metric, record.quality_direction) == (metric, direction)
    reference = record.reference_quality
    assert reference is not None
    ran = {t.params["embedding.strategy"]: t for t in record.trials if t.trial_id != "reference"}
    assert sorted(ran) == ["full", "hashed"] and all(t.status == "ok" for t in ran.values()), [
        (t.status, t.error) for t in record.trials
    ]
    for trial in ran.values():  # every eval metric the workload computes, by name, the quality among them
        assert set(trial.metrics) == {"loss", metric}, trial.metrics
        assert trial.quality == trial.metrics[metric] and trial.samples_per_s
    # hashing moved the metric beyond the tolerance, so its direction decides the hashed trial
    hashed = ran["hashed"]
    assert hashed.quality is not None and abs(hashed.quality - reference) > 2 * TOLERANCE * abs(reference)
    for trial in ran.values():
        assert trial.quality_ok is _within(trial, reference, direction), (trial.quality, reference)
    # the best: the fastest of the trials within the tolerance (the reference run is one of them)
    candidates = [t for t in record.trials if t.status == "ok" and _within(t, reference, direction)]
    assert ran["full"] in candidates, (reference, ran["full"].quality)  # the reference's own config
    best = record.best()
    assert best is not None
    assert best.trial_id == max(candidates, key=lambda t: t.samples_per_s or 0.0).trial_id
