"""Sweeps on real Ray clusters: `ray job submit` against a `ray start --head` with Ray's token
authentication on (recording to a real `mlflow server`), a two-node cluster, and fractional GPUs
on logical GPUs. Every process binds 127.0.0.1 and is stopped by its fixture."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from elastune.tracking.mlflow import load_sweep
from elastune.tuning.spec import SweepSpec
from elastune.tuning.sweep import SweepOptions, run_sweep

from tests.integration.sweep_specs import tiny_spec, write_spec
from tests.integration.test_mlflow_server import server  # noqa: F401  (a real mlflow server fixture)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture
def ray_head(free_port: Callable[[], int], wait_until: Callable[..., None]) -> Iterator[dict[str, Any]]:
    """`ray start --head` on 127.0.0.1 with token auth; stopped (only it) at the end."""
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    token = secrets.token_hex(16)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env.pop("RAY_ADDRESS", None)
    # The cluster's processes (and so a job's `python`) come from this venv, as after `source .venv/bin/activate`.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    gcs, dashboard, client = free_port(), free_port(), free_port()
    subprocess.run(
        [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}", "--num-cpus=2",
         f"--temp-dir={temp}", "--include-dashboard=true", "--disable-usage-stats"],
        env=env, check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    try:
        yield {"address": f"http://127.0.0.1:{dashboard}", "env": env, "token": token}
    finally:
        _kill_matching([temp, f":{gcs}"], wait_until)
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_job_submit_runs_the_sweep_with_token_auth(
    ray_head: dict[str, Any],
    server: str,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    spec = write_spec(tmp_path / "tiny.yaml", tiny_spec(budget={"max_trials": 2}))
    job_id = f"elastune-test-{secrets.token_hex(3)}"
    entry = ["python", "-m", "elastune.jobs.sweep", str(spec), "--tracking-uri", server]
    submit = [RAY, "job", "submit", "--address", ray_head["address"], "--submission-id", job_id, "--", *entry]
    env = {**ray_head["env"], "ELASTUNE_HOME": str(tmp_path / "home")}

    # Without the token the job API refuses the submission: nothing runs.
    no_token = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN"}
    no_token["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "missing-token")
    refused = _submit(submit, no_token, tmp_path)
    assert refused.returncode != 0
    said = (refused.stdout + refused.stderr).lower()
    assert "401" in said or "unauthenticated" in said or "token" in said, said[-2000:]

    done = _submit(submit, env, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "succeeded" in (done.stdout + done.stderr).lower()
    record = load_sweep(None, server)
    assert record.job_id == job_id and record.status == "finished"
    assert sum(1 for t in record.trials if t.trial_id != "reference") == 2
    assert all(t.status == "ok" for t in record.trials), [(t.trial_id, t.status, t.error) for t in record.trials]


def test_two_node_cluster_places_trials_on_both_nodes(tmp_path: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(nodes) == 2
        # One CPU per trial and two trials at once on two one-CPU nodes: they must spread.
        raw = tiny_spec(budget={"max_trials": 2, "max_concurrent": 2})
        record = run_sweep(
            SweepSpec.model_validate(raw),
            SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", home=tmp_path / "home"),
        )
        used = {t.node for t in record.trials if t.status == "ok"}
        assert used == nodes, (used, nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_fractional_gpus_share_one_logical_gpu(tmp_path: Path) -> None:
    import ray

    ray.init(
        address="local", num_cpus=2, num_gpus=1, _node_ip_address="127.0.0.1", include_dashboard=False,
        log_to_driver=False,
    )  # fmt: skip
    try:
        raw = tiny_spec(resources={"gpus_per_trial": 0.5, "cpus_per_trial": 1}, budget={"max_trials": 2})
        record = run_sweep(
            SweepSpec.model_validate(raw),
            SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", home=tmp_path / "home"),
        )
        runs = [t for t in record.trials if t.trial_id != "reference"]
        assert [t.status for t in runs] == ["ok", "ok"], [(t.status, t.error) for t in runs]
        # Ray's accounting: every GPU share was handed back, none leaked.
        assert _wait_for(lambda: ray.available_resources().get("GPU", 0) == 1.0, 30)
    finally:
        ray.shutdown()


def _submit(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`ray job submit`, retried while the fresh head's job agent is still starting (Ray answers
    500 "No available agent" then; it is not ready when `ray start` returns, and on a loaded 2-core
    machine it took over 90 s once)."""
    deadline = time.monotonic() + 240
    while True:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=420, cwd=cwd)
        if "No available agent" not in proc.stdout + proc.stderr or time.monotonic() > deadline:
            return proc
        time.sleep(1)


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _kill_matching(patterns: list[str], wait_until: Callable[..., None]) -> None:
    """Stop the processes of one `ray start` (its temp dir / GCS port are in their command lines),
    leaving any other Ray on the machine alone (`ray stop` would stop them all)."""
    import psutil

    def ours() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if any(p in cmdline for p in patterns) and proc.pid != os.getpid():
                found.append(proc)
        return found

    for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGKILL):
        for proc in ours():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(sig)
        if _wait_for(lambda: not ours(), 10):
            return
    wait_until(lambda: not ours(), 10, "the ray start processes to exit")
