"""A sweep of the digits example on a real local Ray, recorded in a real MLflow store, as `elastune
sweep` runs it: the trials import the installed `digits` package in Ray's workers, and the sweep is
judged by held-out accuracy (higher is better), with macro-F1 beside it, never log loss."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.cli import main
from mlflow import MlflowClient

pytestmark = pytest.mark.integration

# Every Ray address stays on loopback (Ray reads this once, before it starts).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# Two micro-batch splits of a step of 256 against the reference (one micro-batch per step), each
# 30 steps: about 5 epochs of the 1,437 training images, enough to be far from chance (10%).
TINY = {
    "name": "digits_tiny",
    "base": {"workload": "digits", "device": "cpu", "eval": {"samples": 512}, "warmup_steps": 2},
    "parameters": {"batch.micro": {"type": "choice", "values": [64, 128]}},
    "constraints": {"effective_batch": 256, "quality_tolerance": 0.2, "reference": {"batch.micro": 256}},
    "budget": {"max_trials": 2, "max_concurrent": 2, "trial_samples": 30 * 256},
    "confirm": {"top": 0},
    "search": {"algorithm": "grid", "scheduler": "none", "seed": 0},
    "resources": {"cpus_per_trial": 1},
    "edo": {"mode": "off"},
}


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A local Ray of 2 CPUs on 127.0.0.1, no dashboard, for this module; `elastune sweep` finds it
    running and uses it."""
    import ray

    context = ray.init(
        address="local", num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False
    )
    try:
        yield context
    finally:
        ray.shutdown()


def test_a_sweep_is_judged_by_accuracy(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))  # the sweep's state folder, left here
    spec = tmp_path / "digits_tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["sweep", str(spec), "--tracking-uri", uri, "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)

    assert result["status"] == "finished"
    assert (result["quality_metric"], result["quality_direction"]) == ("accuracy", "max")
    assert result["reference_quality"] > 0.5, result["reference_quality"]  # ten classes: chance is 0.1
    trials = result["trials"]
    assert sorted(t["params"]["batch.micro"] for t in trials) == [64, 128, 256]  # 256: the reference
    assert all(t["status"] == "ok" for t in trials), [(t["trial_id"], t["error"]) for t in trials]
    for trial in trials:
        assert set(trial["metrics"]) == {"accuracy", "macro_f1", "cross_entropy"}, trial["metrics"]
        assert trial["quality"] == trial["metrics"]["accuracy"] and 0 < trial["metrics"]["macro_f1"] <= 1

    # MLflow: each trial's run holds the workload's metrics, under their own names
    client = MlflowClient(uri)
    parent = client.get_run(result["mlflow_run_id"])
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{result['mlflow_run_id']}'"
    )
    assert len(children) == 3
    for run in children:
        assert {"val_accuracy", "val_macro_f1"} <= set(run.data.metrics), run.data.metrics
        assert "val_logloss" not in run.data.metrics
        assert run.data.params["workload"] == "digits"

    # The web UI over the same store: it offers the example's spec to launch and shows the sweep by
    # its own metrics (the sweep page's columns come from these: ui/static/sweep.js)
    from elastune.ui import UISettings, create_app
    from fastapi.testclient import TestClient

    specs = Path(__file__).resolve().parents[1] / "search_spaces"
    with TestClient(create_app(UISettings(tracking_uri=uri, spec_dir=specs, allowed_hosts=("testserver",)))) as ui:
        assert [s["name"] for s in ui.get("/api/specs").json()] == ["digits_quick"]
        detail = ui.get(f"/api/sweeps/{result['sweep_id']}").json()
        assert (detail["quality_metric"], detail["reference_quality"]) == ("accuracy", result["reference_quality"])
        shown = {name for t in detail["trials"] for name in t["metrics"]}
        assert shown == {"accuracy", "macro_f1", "cross_entropy"}, shown
        assert ui.get(f"/sweeps/{result['sweep_id']}").status_code == 200
