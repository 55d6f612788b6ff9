"""A sweep on a real Ray cluster: `ray job submit` against a two-node cluster (`ray start` head and
a second node) with Ray's token authentication on, recording to a real `mlflow server`. Every
process binds 127.0.0.1 and is stopped by its fixture (served/conftest.py). (Fractional GPUs on a
logical GPU: local_ray/test_sweep.py.)"""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from elastune.tracking.mlflow import list_sweeps, load_sweep

from tests.integration.served.conftest import RayHead
from tests.integration.sweep_specs import tiny_spec, write_spec

pytestmark = pytest.mark.integration
RAY = str(Path(sys.executable).with_name("ray"))


def test_ray_job_submit_runs_the_sweep_over_both_nodes_with_token_auth(
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
    # One CPU per trial, two trials at once, one CPU per node: they must have spread.
    ran_on = {t.node for t in record.trials if t.trial_id != "reference"}
    assert ran_on == set(ray_token_head.alive_nodes()), ran_on


def _submit(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=420, cwd=cwd)
