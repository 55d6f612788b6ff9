"""A sweep on a real Ray cluster: `ray job submit` against a two-node cluster (`ray start` head and
a second node) with Ray's token authentication on, recording to a real `mlflow server`. Every
process binds 127.0.0.1 and is stopped by its fixture (served/conftest.py). (Fractional GPUs on a
logical GPU: local_ray/test_sweep.py.)"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from elastune.tracking.mlflow import list_sweeps, load_sweep
from mlflow import MlflowClient

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


def test_ray_job_stop_interrupts_the_sweep_and_resume_returns_to_its_cluster(
    ray_token_head: RayHead, mlflow_server: str, tmp_path: Path, wait_until: Callable[..., None]
) -> None:
    """`ray job stop` (SIGTERM, then SIGKILL 3 s later) records the sweep as interrupted; `--resume
    --address` on the cluster the sweep ran on runs the rest, and never runs or logs a finished
    trial again. The address is the user's to give: the one the store records is only a hint."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    spec = write_spec(
        tmp_path / "stopped.yaml",
        tiny_spec(name="stopped", budget={"max_trials": 3, "max_concurrent": 1, "trial_samples": 12800}),
    )
    jobs = JobSubmissionClient(ray_token_head.address, headers=ray_token_head.headers())
    job_id = jobs.submit_job(entrypoint=f"python -m elastune.jobs.sweep {spec} --tracking-uri {mlflow_server}")

    def finished() -> dict[str, str | None]:
        mine = [r.sweep_id for r in list_sweeps(mlflow_server) if r.job_id == job_id]
        trials = load_sweep(mine[0], mlflow_server).trials if mine else []
        return {t.trial_id: t.mlflow_run_id for t in trials if t.status == "ok" and t.trial_id != "reference"}

    def ended() -> bool:
        return jobs.get_job_status(job_id) in {JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED}

    wait_until(lambda: ended() or finished(), 300, "a finished trial", 1.0)
    assert not ended(), jobs.get_job_logs(job_id)[-3000:]
    before = finished()
    jobs.stop_job(job_id)
    wait_until(ended, 60, "the job to stop", 0.5)
    assert jobs.get_job_status(job_id) == JobStatus.STOPPED
    (sweep_id,) = [r.sweep_id for r in list_sweeps(mlflow_server) if r.job_id == job_id]
    record = load_sweep(sweep_id, mlflow_server)
    assert record.status == "interrupted", jobs.get_job_logs(job_id)[-3000:]
    parent = MlflowClient(mlflow_server).get_run(record.mlflow_run_id or "")
    assert parent.info.status == "KILLED" and parent.data.tags["elastune.sweep_status"] == "interrupted"
    assert record.ray_address and record.ray_address.startswith("127.0.0.1:")
    logs = jobs.get_job_logs(job_id)
    # Said as the signal arrives (and last, when the driver ends before Ray's SIGKILL 3 s later).
    assert f"resume it with: elastune sweep --resume {sweep_id}" in logs, logs[-3000:]

    # The resume runs here, as a driver of that cluster, which it is told (never RAY_ADDRESS here).
    env = {k: v for k, v in ray_token_head.env.items() if k != "RAY_ADDRESS"}
    command = [sys.executable, "-m", "elastune.cli", "sweep", "--resume", sweep_id, "--tracking-uri", mlflow_server]
    resumed = subprocess.run(
        [*command, "--address", record.ray_address], env=env, capture_output=True, text=True, timeout=400, cwd=tmp_path
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "never dials" not in resumed.stderr  # the address was given: no hint to print
    record = load_sweep(sweep_id, mlflow_server)
    assert record.status == "finished"
    trials = [t for t in record.trials if t.trial_id != "reference"]
    assert len(trials) == 3 and {t.status for t in trials} == {"ok"}, [(t.trial_id, t.status) for t in trials]
    client = MlflowClient(mlflow_server)
    for trial_id, run_id in before.items():
        (same,) = [t for t in trials if t.trial_id == trial_id]
        assert same.mlflow_run_id == run_id
        assert len(client.get_metric_history(run_id, "samples_per_s")) == 1  # never run or logged again
