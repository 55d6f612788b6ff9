"""The MLflow record of a sweep over HTTP: a real `mlflow server` on 127.0.0.1 (conftest's `mlflow_server`)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from elastune.tracking.mlflow import SweepTracker, artifact_path, list_sweeps, load_sweep, mlflow_run_url
from elastune.validate import load_run_config
from mlflow import MlflowClient

from tests.unit.test_tracking_mlflow import check_round_trip, make_sweep

pytestmark = pytest.mark.integration


def test_round_trip_over_http(mlflow_server: str) -> None:
    server = mlflow_server
    tracker = SweepTracker(server)
    record = check_round_trip(server, tracker, "http-1")
    run_id = record.mlflow_run_id or ""
    # Artifacts went through the server's proxy (mlflow-artifacts:), not to a local folder.
    assert MlflowClient(tracking_uri=server).get_run(run_id).info.artifact_uri.startswith("mlflow-artifacts:")
    best = record.best()
    assert best is not None
    assert load_run_config(artifact_path("http-1", "best_config.yaml", server)).to_dict() == best.config
    assert artifact_path("http-1", "pareto.png", server).read_bytes()[:4] == b"\x89PNG"
    assert [r.sweep_id for r in list_sweeps(server)].count("http-1") == 1  # the server is shared: others may be there
    # Resuming over HTTP reopens the same parent run.
    assert SweepTracker(server).start_sweep(make_sweep("http-1")) == run_id
    assert load_sweep("http-1", server).mlflow_run_id == run_id
    url = mlflow_run_url(server, run_id)
    assert url is not None and url.endswith(f"/#/runs/{run_id}")
    with urllib.request.urlopen(url.split("#")[0], timeout=10) as page:  # the UI the link opens
        assert page.status == 200 and b"<html" in page.read(4096).lower()
