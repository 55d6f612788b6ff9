"""Fixtures for integration tests (real Ray, real MLflow server, real browser).

Generic helpers, and the two servers several modules use: a token-authenticated Ray head with its
job server, and an `mlflow server`. Those are package-scoped: started by the first test that asks,
stopped when the integration tests end (each takes 10-25 s to start on a 2-core machine, idle they
cost ~3% of it). A module's own servers live in that module and are stopped by its fixtures.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """A factory: a TCP port on 127.0.0.1 that nothing listens on right now."""

    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    return pick


@pytest.fixture(scope="session")
def wait_until() -> Callable[..., None]:
    """A factory: poll `condition()` until it is true, or fail with `what` after `timeout_s`."""

    def wait(condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(interval_s)

    return wait


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A real local Ray (2 CPUs, bound to 127.0.0.1, no dashboard) for one test module, shut down after it."""
    import ray

    context = ray.init(
        address="local",  # a new Ray, never one a `ray start` elsewhere on the machine left running
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        yield context
    finally:
        ray.shutdown()


@dataclass(frozen=True)
class RayHead:
    address: str  # the dashboard / job server: http://127.0.0.1:PORT
    token_file: Path  # Ray's token (RAY_AUTH_TOKEN_PATH)
    env: dict[str, str]  # for a client that authenticates as Ray does: RAY_AUTH_MODE=token + the token file

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token_file.read_text()}"}


@pytest.fixture(scope="package")
def ray_token_head(
    free_port: Callable[[], int], wait_until: Callable[..., None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RayHead]:
    """A Ray head with its job server on 127.0.0.1, token auth on (Ray >= 2.52), 2 CPUs; ready when
    it has accepted a job.

    `ray start --block` in its own process group: ending the group ends this cluster and nothing
    else (`ray stop` would end every cluster on the machine). Every port is chosen here, so another
    Ray on the machine cannot collide with this one. The cluster's processes (so a job's `python`)
    come from this venv, as after `source .venv/bin/activate`.
    """
    folder = tmp_path_factory.mktemp("ray-head")
    token_file = folder / "auth_token"
    token_file.write_text(secrets.token_hex(32))
    dashboard = free_port()
    ports = ["port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port"]
    ports += ["runtime-env-agent-port", "ray-client-server-port"]
    command = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--num-cpus=2"]
    command += ["--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}"]
    command += ["--include-dashboard=true", "--disable-usage-stats", *(f"--{p}={free_port()}" for p in ports)]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log = (folder / "ray.log").open("w")
    head_process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    head = RayHead(f"http://127.0.0.1:{dashboard}", token_file, env)
    try:
        from ray.job_submission import JobSubmissionClient

        def accepts_a_job() -> bool:
            # The job agent is not ready when the dashboard first answers (Ray says 500 "No available agent").
            assert head_process.poll() is None, (folder / "ray.log").read_text()[-3000:]
            try:
                JobSubmissionClient(head.address, headers=head.headers()).submit_job(entrypoint="true")
            except (RuntimeError, ConnectionError):
                return False
            return True

        wait_until(accepts_a_job, 180, "the Ray job server to accept a job", interval_s=1.0)
        yield head
    finally:
        # A throwaway cluster: SIGKILL its whole process group (a SIGTERM'd head drains for 5-30 s,
        # and nothing of it is kept). Every process of the cluster is in this group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head_process.pid, signal.SIGKILL)
        head_process.wait()
        log.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="package")
def mlflow_server(
    tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int], wait_until: Callable[..., None]
) -> Iterator[str]:
    """A real `mlflow server` (SQLite store, proxied artifacts) on 127.0.0.1; its URL."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "art")]
    command += ["--workers", "1"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"  # no traffic beyond 127.0.0.1
    # No job runner (huey consumers, a dozen processes, for GenAI scorers): elastune logs runs and artifacts only.
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    log = (root / "server.log").open("wb")
    # A session of its own, so teardown stops the server and the workers it forks, and nothing else.
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or _healthy(url), 120, f"mlflow server at {url}/health")
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited with {proc.returncode}:\n{(root / 'server.log').read_text()[-3000:]}")
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)
        log.close()
