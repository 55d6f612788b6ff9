"""A sweep that searches a workload's own option (`workload_options.hidden` of the towers in
tests/unit/plugin_workload/tower.py, an import path), on the shared local Ray: each trial trains
with the value it drew, its resolved config carries it, and the parameters MLflow keeps are points
of the spec's space (what the confirmation stage and `train --from-sweep` admit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from elastune.tracking.mlflow import load_sweep
from elastune.tuning.spec import validate_sweep_spec
from elastune.tuning.sweep import SweepOptions, run_sweep

from tests.integration.sweep_specs import TINY_BASE, tiny_spec

pytestmark = pytest.mark.integration

TOWER = "tests.unit.plugin_workload.tower:make_workload"


def test_a_sweep_searches_a_workload_option(ray_local: Any, tmp_path: Path) -> None:
    raw = tiny_spec(name="tiny-options")
    raw["base"] = {**TINY_BASE, "workload": TOWER, "workload_options": {}, "batch": {"micro": 64}}
    raw["parameters"] = {"workload_options.hidden": {"type": "choice", "values": [4, 32]}}
    raw["constraints"] = {"quality_tolerance": 0.5, "reference": {"workload_options.hidden": 4}}
    raw["budget"] = {"max_trials": 2, "max_concurrent": 2, "trial_samples": 384}
    spec = validate_sweep_spec(raw)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = run_sweep(spec, SweepOptions(tracking_uri=uri, home=tmp_path / "sweeps"))
    assert record.status == "finished"
    searched = [t for t in record.trials if t.trial_id != "reference"]
    assert sorted(t.params["workload_options.hidden"] for t in searched) == [4, 32]
    assert all(t.status == "ok" for t in searched), [(t.trial_id, t.status) for t in searched]
    for trial in searched:
        assert trial.config["workload"] == TOWER
        assert trial.config["workload_options"] == {"hidden": trial.params["workload_options.hidden"]}
    (reference,) = [t for t in record.trials if t.trial_id == "reference"]
    assert reference.config["workload_options"] == {"hidden": 4}
    stored = load_sweep(record.sweep_id, uri)
    kept = {t.trial_id: t.params for t in stored.trials if t.trial_id != "reference"}
    assert kept == {t.trial_id: t.params for t in searched}
    assert [spec.point_problem(params) for params in kept.values()] == [None, None]
