"""`elastune sweep --resume`: the driver is killed (SIGKILL, with the local Ray it started) after a
trial has finished; resuming runs the rest, never re-runs the finished trial, and leaves MLflow with
exactly one child run per trial."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from elastune.tracking.mlflow import list_sweeps, load_sweep

from tests.integration.sweep_specs import tiny_spec, write_spec

pytestmark = pytest.mark.integration


def test_resume_after_the_driver_is_killed(tmp_path: Path, wait_until: Callable[..., None]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = write_spec(
        tmp_path / "tiny.yaml", tiny_spec(budget={"max_trials": 2, "max_concurrent": 1, "trial_samples": 12800})
    )
    env = {**os.environ, "ELASTUNE_HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "elastune.cli", "sweep", "--tracking-uri", uri]
    log = (tmp_path / "first.log").open("wb")
    driver = subprocess.Popen(
        [*command, str(spec)], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )

    def finished_trials() -> dict[str, str | None]:
        sweeps = list_sweeps(uri)
        if not sweeps:
            return {}
        record = load_sweep(sweeps[0].sweep_id, uri)
        return {t.trial_id: t.mlflow_run_id for t in record.trials if t.status == "ok" and t.trial_id != "reference"}

    def saved_as_finished() -> bool:
        # Tune's own experiment state must know the trial finished too, or a resume would rightly re-run it.
        states = list((tmp_path / "home").glob("sweeps/*/experiment_state-*.json"))
        return any('\\"status\\": \\"TERMINATED\\"' in p.read_text() for p in states if "reference" not in str(p))

    def store_ready() -> bool:
        # The driver creates (migrates) the SQLite store first; reading it before then would race that.
        return "reference:" in (tmp_path / "first.log").read_text(errors="replace")

    try:
        # Polled once a second: a read of the store costs ~50 ms of CPU the driver and trials need.
        wait_until(lambda: driver.poll() is not None or store_ready(), 300, "the driver to open the MLflow store", 1.0)
        wait_until(lambda: driver.poll() is not None or (finished_trials() and saved_as_finished()), 300,
                   "a finished trial", 1.0)  # fmt: skip
        assert driver.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        before = finished_trials()
        _kill_tree(driver)
    finally:
        log.close()
        if driver.poll() is None:
            _kill_tree(driver)

    sweep_id = list_sweeps(uri)[0].sweep_id
    assert load_sweep(sweep_id, uri).status == "running"  # the driver never got to finish it
    resumed = subprocess.run(
        [*command, "--resume", sweep_id], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    record = load_sweep(sweep_id, uri)
    assert record.status == "finished"
    trials = [t for t in record.trials if t.trial_id != "reference"]
    # The restored searcher knows it handed out both proposals: the resumed run adds none.
    assert len(trials) == 2 and len({t.trial_id for t in trials}) == 2
    assert sum(1 for t in record.trials if t.trial_id == "reference") == 1
    for trial_id, run_id in before.items():
        (same,) = [t for t in trials if t.trial_id == trial_id]
        assert same.status == "ok" and same.mlflow_run_id == run_id  # not re-run, not re-logged as new
    assert "reference:" not in resumed.stderr  # the reference is measured once per sweep
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name("elastune").experiment_id],
        filter_string=f"tags.`elastune.sweep_id` = '{sweep_id}' and tags.`elastune.kind` = 'trial'",
    )
    assert len(runs) == 3  # 2 proposals + the reference, no duplicates


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver and everything it started (its local Ray included), as a crash would."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.send_signal(signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    psutil.wait_procs(family, timeout=30)
