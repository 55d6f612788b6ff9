"""The MLflow record of a sweep over HTTP: a real `mlflow server` on 127.0.0.1, stopped by the fixture."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from elastune.config import load_run_config
from elastune.tracking.mlflow import SweepTracker, artifact_path, list_sweeps, load_sweep, mlflow_run_url
from mlflow import MlflowClient

from tests.unit.test_tracking_mlflow import check_round_trip, make_sweep

pytestmark = pytest.mark.integration


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int], wait_until: Callable[..., None]
) -> Iterator[str]:
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "art")]
    command += ["--workers", "1"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"  # no traffic beyond 127.0.0.1
    log = (root / "server.log").open("wb")
    # A session of its own, so teardown stops the server and the workers it forks, and nothing else.
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or _healthy(url), 120, f"mlflow server at {url}/health")
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited with {proc.returncode}:\n{_tail(root / 'server.log')}")
        yield url
    finally:
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:]


def test_round_trip_over_http(server: str) -> None:
    tracker = SweepTracker(server)
    record = check_round_trip(server, tracker, "http-1")
    run_id = record.mlflow_run_id or ""
    # Artifacts went through the server's proxy (mlflow-artifacts:), not to a local folder.
    assert MlflowClient(tracking_uri=server).get_run(run_id).info.artifact_uri.startswith("mlflow-artifacts:")
    best = record.best()
    assert best is not None
    assert load_run_config(artifact_path("http-1", "best_config.yaml", server)).to_dict() == best.config
    assert artifact_path("http-1", "pareto.png", server).read_bytes()[:4] == b"\x89PNG"
    assert [r.sweep_id for r in list_sweeps(server)] == ["http-1"]
    # Resuming over HTTP reopens the same parent run.
    assert SweepTracker(server).start_sweep(make_sweep("http-1")) == run_id
    assert load_sweep(None, server).mlflow_run_id == run_id
    url = mlflow_run_url(server, run_id)
    assert url is not None and url.endswith(f"/#/runs/{run_id}")
    with urllib.request.urlopen(url.split("#")[0], timeout=10) as page:  # the UI the link opens
        assert page.status == 200 and b"<html" in page.read(4096).lower()
