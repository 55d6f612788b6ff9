"""Sweeps on real Ray clusters: `ray job submit` against a `ray start --head` with Ray's token
authentication on (recording to a real `mlflow server`), and a two-node cluster. Every process
binds 127.0.0.1 and is stopped by its fixture. (Fractional GPUs on a logical GPU: test_sweep.py.)"""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from elastune.tracking.mlflow import list_sweeps, load_sweep
from elastune.tuning.spec import SweepSpec
from elastune.tuning.sweep import SweepOptions, run_sweep

from tests.integration.conftest import RayHead
from tests.integration.sweep_specs import tiny_spec, write_spec

pytestmark = pytest.mark.integration
RAY = str(Path(sys.executable).with_name("ray"))


def test_ray_job_submit_runs_the_sweep_with_token_auth(
    ray_token_head: RayHead, mlflow_server: str, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "tiny.yaml", tiny_spec(budget={"max_trials": 2}))
    job_id = f"elastune-test-{secrets.token_hex(3)}"
    entry = ["python", "-m", "elastune.jobs.sweep", str(spec), "--tracking-uri", mlflow_server]
    submit = [RAY, "job", "submit", "--address", ray_token_head.address, "--submission-id", job_id, "--", *entry]
    env = {**ray_token_head.env, "ELASTUNE_HOME": str(tmp_path / "home")}

    # Without the token the job API refuses the submission: nothing runs.
    no_token = {**env, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing-token")}
    refused = _submit(submit, no_token, tmp_path)
    assert refused.returncode != 0
    said = (refused.stdout + refused.stderr).lower()
    assert "401" in said or "unauthenticated" in said or "token" in said, said[-2000:]

    done = _submit(submit, env, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "succeeded" in (done.stdout + done.stderr).lower()
    (sweep_id,) = [r.sweep_id for r in list_sweeps(mlflow_server) if r.job_id == job_id]
    record = load_sweep(sweep_id, mlflow_server)
    assert record.status == "finished"
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


def _submit(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=420, cwd=cwd)
