"""A sweep of the rating example on a real local Ray, recorded in a real MLflow store, as `elastune
sweep` runs it: the trials import the installed `movie_ratings` package in Ray's workers, search the
user table's storage through `embedding.overrides`, and the sweep is judged by held-out RMSE (lower
is better), with MAE beside it, never log loss."""

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

# The user table stored hashed or quotient-remainder against the reference's full table, each trial
# 30 steps of 1024 ratings.
TINY = {
    "name": "movie_ratings_tiny",
    "base": {
        "workload": "movie_ratings",
        "device": "cpu",
        "embedding": {"overrides": [{"match": {"name": "user_id"}, "strategy": "full"}]},
        "eval": {"samples": 8192},
        "warmup_steps": 2,
    },
    "parameters": {"embedding.overrides.0.strategy": {"type": "choice", "values": ["hashed", "qr"]}},
    "constraints": {"effective_batch": 1024, "quality_tolerance": 0.2, "reference": {"batch.micro": 1024}},
    "budget": {"max_trials": 2, "max_concurrent": 2, "trial_samples": 30 * 1024},
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


def test_a_sweep_is_judged_by_rmse(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))  # the sweep's state folder, left here
    spec = tmp_path / "movie_ratings_tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["sweep", str(spec), "--tracking-uri", uri, "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)

    assert result["status"] == "finished"
    assert (result["quality_metric"], result["quality_direction"]) == ("rmse", "min")
    assert 0 < result["reference_quality"] < 1.0, result["reference_quality"]  # the global mean's is about 1.06
    trials = result["trials"]
    searched = sorted(
        t["params"].get("embedding.overrides.0.strategy", "") for t in trials if t["trial_id"] != "reference"
    )
    assert searched == ["hashed", "qr"] and [t["trial_id"] for t in trials].count("reference") == 1
    assert all(t["status"] == "ok" for t in trials), [(t["trial_id"], t["error"]) for t in trials]
    for trial in trials:
        assert set(trial["metrics"]) == {"rmse", "mae", "mse"}, trial["metrics"]
        assert trial["quality"] == trial["metrics"]["rmse"] and 0 < trial["metrics"]["mae"] < trial["quality"]

    # MLflow: each trial's run holds the workload's metrics, under their own names
    client = MlflowClient(uri)
    parent = client.get_run(result["mlflow_run_id"])
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{result['mlflow_run_id']}'"
    )
    assert len(children) == 3
    for run in children:
        assert {"val_rmse", "val_mae"} <= set(run.data.metrics), run.data.metrics
        assert "val_logloss" not in run.data.metrics
        assert run.data.params["workload"] == "movie_ratings"
