"""The servers this group's modules share, started by the first test that asks and stopped when
the group ends: a token-authenticated two-node Ray cluster with its job server (`ray job submit`,
the UI) and an `mlflow server`. Each binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
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

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]  # the repository: `python -m tests...` runs from here


@dataclass(frozen=True)
class RayHead:
    address: str  # the dashboard / job server: http://127.0.0.1:PORT
    token_file: Path  # Ray's token (RAY_AUTH_TOKEN_PATH)
    env: dict[str, str]  # for a client that authenticates as Ray does: RAY_AUTH_MODE=token + the token file

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token_file.read_text()}"}

    def alive_nodes(self) -> list[str]:
        """Node ids of the cluster's live nodes, as the dashboard lists them."""
        request = urllib.request.Request(f"{self.address}/nodes?view=summary", headers=self.headers())
        with urllib.request.urlopen(request, timeout=5) as response:
            summary = json.load(response)["data"]["summary"]
        return sorted(n["raylet"]["nodeId"] for n in summary if n["raylet"].get("state") == "ALIVE")


@pytest.fixture(scope="package")
def ray_token_head(
    free_port: Callable[[], int], wait_until: Callable[..., None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RayHead]:
    """A two-node Ray cluster on 127.0.0.1 with token auth on (Ray >= 2.52): a head with the job
    server and 1 CPU, and a second node with 1 CPU, so two one-CPU trials must spread over both
    nodes. Ready when the head has accepted a job and both nodes are alive.

    The head is a `ray start --block`, the second node served/second_node.py (see there why not
    `ray start`), each in its own process group: ending the groups ends this cluster and nothing
    else (`ray stop` would end every cluster on the machine). Every fixed-default port is chosen
    here, so another Ray on the machine cannot collide with this one. The cluster's processes (so
    a job's `python`) come from this venv, as after `source .venv/bin/activate`.
    """
    folder = tmp_path_factory.mktemp("ray-head")
    token_file = folder / "auth_token"
    token_file.write_text(secrets.token_hex(32))
    ray = str(Path(sys.executable).with_name("ray"))
    gcs, dashboard = free_port(), free_port()
    head = [ray, "start", "--head", "--block", "--num-cpus=1", f"--port={gcs}", "--node-ip-address=127.0.0.1"]
    head += ["--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", "--include-dashboard=true"]
    ports = ["dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port"]
    ports += ["runtime-env-agent-port", "ray-client-server-port"]
    head += ["--disable-usage-stats", *(f"--{p}={free_port()}" for p in ports)]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    env["ELASTUNE_HOME"] = str(folder / "elastune-home")  # where the cluster's jobs keep their files
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log = (folder / "ray.log").open("w")
    nodes = [subprocess.Popen(head, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)]
    cluster = RayHead(f"http://127.0.0.1:{dashboard}", token_file, env)
    try:
        from ray.job_submission import JobSubmissionClient

        def ready() -> bool:
            # The job agent is not ready when the dashboard first answers (Ray says 500 "No available agent").
            assert nodes[0].poll() is None, (folder / "ray.log").read_text()[-3000:]
            try:
                JobSubmissionClient(cluster.address, headers=cluster.headers()).submit_job(entrypoint="true")
            except (RuntimeError, ConnectionError):
                return False
            return True

        wait_until(lambda: nodes[0].poll() is not None or _listening(gcs), 60, "the Ray head's GCS")
        nodes.append(_second_node(gcs, free_port, env, folder / "second-node-1.log"))
        wait_until(ready, 180, "the Ray job server to accept a job", interval_s=1.0)
        # A second node that dies or has not joined in 60 s is started again with new ports (twice at
        # most); each try keeps its own log, and the failure shows them all.
        for attempt in range(1, 4):
            if _joined(cluster, nodes[-1], 60):
                break
            _kill_group(nodes.pop())
            if attempt == 3:
                tries = sorted(folder.glob("second-node-*.log"))
                logs = "\n".join(f"{f.name}:\n{f.read_text()[-3000:]}" for f in tries)
                pytest.fail(f"the second Ray node did not join in 3 tries of 60 s:\n{logs}")
            nodes.append(_second_node(gcs, free_port, env, folder / f"second-node-{attempt + 1}.log"))
        yield cluster
    finally:
        # A throwaway cluster: SIGKILL each node's process group (a SIGTERM'd head drains for
        # 5-30 s, and nothing of it is kept). Every process of a node is in its group.
        for node in nodes:
            _kill_group(node)
        log.close()


def _second_node(gcs: int, free_port: Callable[[], int], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """served/second_node.py joining the head at `gcs` with 1 CPU, on ports picked now."""
    command = [sys.executable, "-m", "tests.integration.served.second_node", f"127.0.0.1:{gcs}", "1"]
    command += [str(free_port()) for _ in range(4)]
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=ROOT
        )


def _joined(cluster: RayHead, node: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether the dashboard lists two live nodes within `timeout_s`; False at once when `node`
    (which exits when one of its processes dies) has exited."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and node.poll() is None:
        try:
            if len(cluster.alive_nodes()) == 2:
                return True
        except urllib.error.URLError:  # the dashboard refused one poll (seen once in CI): poll again
            pass
        time.sleep(0.5)
    return False


def _kill_group(node: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signal.SIGKILL)
    node.wait()


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


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


@dataclass
class UIProcess:
    base: str
    token: str
    proc: subprocess.Popen[bytes]

    def api(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


@contextlib.contextmanager
def ui_server(
    head: RayHead, folder: Path, port: int, wait_until: Callable[..., None], *extra: str
) -> Iterator[UIProcess]:
    """`elastune ui --token-file F` as a user starts it, against `head`'s job server, with its
    MLflow store in `folder`; stopped (its whole session) on exit."""
    token = "served-ui-token-" + os.urandom(12).hex()
    (folder / "token").write_text(token + "\n")
    command = [str(Path(sys.executable).with_name("elastune")), "ui", "--port", str(port)]
    command += ["--token-file", str(folder / "token"), "--ray-address", head.address]
    command += ["--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}", *extra]
    env = {k: v for k, v in os.environ.items() if k not in ("ELASTUNE_UI_TOKEN", "RAY_AUTH_TOKEN")}
    env["RAY_AUTH_TOKEN_PATH"] = str(head.token_file)
    log = (folder / "ui.log").open("wb")
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ui = UIProcess(f"http://127.0.0.1:{port}", token, proc)

    def up() -> bool:
        assert proc.poll() is None, (folder / "ui.log").read_text()
        with contextlib.suppress(httpx.HTTPError):
            return ui.api("GET", "/api/health").status_code == 200
        return False

    try:
        wait_until(up, 60, "elastune ui to answer")
        yield ui
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
