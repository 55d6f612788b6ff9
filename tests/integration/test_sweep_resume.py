"""A sweep's life on a local Ray, driven through the real CLI in a subprocess.

- Ctrl-C (SIGINT) to the driver: exit 130, the MLflow parent KILLED with
  `elastune.sweep_status=interrupted`, unfinished trials recorded as interrupted, and the last line
  is the command that resumes it.
- SIGKILL (a crash): the parent stays "running" until the driver's heartbeat is missed, then reads
  back as stale; a resume while the driver still beats is refused; the resume runs the rest, never
  re-runs or re-logs a finished trial (one `samples_per_s` value per run), and leaves MLflow with
  exactly one child run per trial.
"""

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
from mlflow.tracking import MlflowClient

from tests.integration.sweep_specs import tiny_spec, write_spec

pytestmark = pytest.mark.integration

COMMAND = [sys.executable, "-m", "elastune.cli", "sweep"]


def _driver(tmp_path: Path, args: list[str], log_name: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / log_name
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*COMMAND, *args], cwd=tmp_path, env=_env(tmp_path), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    return proc, log


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "ELASTUNE_HOME": str(tmp_path / "home"), "ELASTUNE_HEARTBEAT_S": "1"}
    env.pop("RAY_ADDRESS", None)
    return env


def _resume(tmp_path: Path, sweep_id: str, uri: str) -> subprocess.CompletedProcess[str]:
    resumed = subprocess.run(
        [*COMMAND, "--resume", sweep_id, "--tracking-uri", uri], cwd=tmp_path, env=_env(tmp_path),
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return resumed


def _store_ready(log: Path) -> bool:
    # The driver creates (migrates) the SQLite store first; reading it before then would race that.
    return "reference:" in log.read_text(errors="replace")


def _trial_runs(uri: str, sweep_id: str) -> list[object]:
    client = MlflowClient(uri)
    return client.search_runs(
        [client.get_experiment_by_name("elastune").experiment_id],
        filter_string=f"tags.`elastune.sweep_id` = '{sweep_id}' and tags.`elastune.kind` = 'trial'",
    )


@pytest.mark.parametrize(
    ("signum", "when"),
    [(signal.SIGINT, "a trial runs"), (signal.SIGTERM, "the reference runs")],
    ids=["sigint-in-the-search", "sigterm-in-the-reference"],
)
def test_a_stopped_driver_records_the_sweep_as_interrupted(
    signum: signal.Signals, when: str, tmp_path: Path, wait_until: Callable[..., None]
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = write_spec(
        tmp_path / "tiny.yaml", tiny_spec(budget={"max_trials": 2, "max_concurrent": 1, "trial_samples": 64000})
    )
    driver, log = _driver(tmp_path, [str(spec), "--tracking-uri", uri], "driver.log")

    def a_trial_runs() -> bool:
        sweeps = list_sweeps(uri)
        return bool(sweeps) and any(t.status == "running" for t in load_sweep(sweeps[0].sweep_id, uri).trials)

    try:
        wait_until(lambda: driver.poll() is not None or _store_ready(log), 300, "the reference", 1.0)
        if when == "a trial runs":
            wait_until(lambda: driver.poll() is not None or a_trial_runs(), 300, "a running trial", 1.0)
        assert driver.poll() is None, log.read_text()[-3000:]
        driver.send_signal(signum)  # the driver alone, as `kill`; a terminal's Ctrl-C reaches Ray too
        assert driver.wait(timeout=120) == 128 + signum, log.read_text()[-3000:]
    finally:
        _kill_tree(driver)

    sweep_id = list_sweeps(uri)[0].sweep_id
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert lines[-1].strip() == f"elastune sweep --resume {sweep_id} --tracking-uri {uri}", lines[-5:]
    assert "finished" not in lines[-2], lines[-5:]
    parent = MlflowClient(uri).get_run(load_sweep(sweep_id, uri).mlflow_run_id)
    assert parent.info.status == "KILLED"
    assert parent.data.tags["elastune.sweep_status"] == "interrupted"
    record = load_sweep(sweep_id, uri)
    assert record.status == "interrupted" and record.ended_at is not None
    assert not [t for t in record.trials if t.status == "running"]
    stopped = [t for t in record.trials if t.status == "interrupted"]
    if when == "the reference runs":  # a reference stopped half-way is not recorded: the resume measures it
        assert record.trials == []
        _resume(tmp_path, sweep_id, uri)
        record = load_sweep(sweep_id, uri)
        assert record.status == "finished" and [t.trial_id for t in record.trials].count("reference") == 1
        assert {t.status for t in record.trials} == {"ok"} and len(record.trials) == 3
    else:
        assert stopped and {t.status for t in record.trials} <= {"ok", "interrupted"}
    for run in _trial_runs(uri, sweep_id):
        if run.data.tags["elastune.trial_id"] in {t.trial_id for t in stopped}:
            assert run.info.status == "KILLED"


def test_resume_after_the_driver_is_killed(tmp_path: Path, wait_until: Callable[..., None]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Three proposals, one at a time: the driver is killed after the first ends, and two trials'
    # worth of work keeps it from finishing the sweep while a busy machine polls the store.
    spec = write_spec(
        tmp_path / "tiny.yaml", tiny_spec(budget={"max_trials": 3, "max_concurrent": 1, "trial_samples": 12800})
    )
    driver, log = _driver(tmp_path, [str(spec), "--tracking-uri", uri], "first.log")

    def finished_trials() -> dict[str, str | None]:
        sweeps = list_sweeps(uri)
        if not sweeps:
            return {}
        record = load_sweep(sweeps[0].sweep_id, uri)
        return {t.trial_id: t.mlflow_run_id for t in record.trials if t.status == "ok" and t.trial_id != "reference"}

    try:
        # Polled once a second: a read of the store costs ~50 ms of CPU the driver and trials need.
        wait_until(lambda: driver.poll() is not None or _store_ready(log), 300, "the driver to open the store", 1.0)
        sweep_id = list_sweeps(uri)[0].sweep_id
        # Two drivers of one sweep would run every trial twice: a resume is refused while this one beats.
        live = subprocess.run(
            [*COMMAND, "--resume", sweep_id, "--tracking-uri", uri], cwd=tmp_path, env=_env(tmp_path),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert live.returncode == 2 and "still running" in live.stderr, live.stderr[-2000:]
        wait_until(lambda: driver.poll() is not None or finished_trials(), 300, "a finished trial", 1.0)
        assert driver.poll() is None, log.read_text()[-3000:]
        before = finished_trials()
        _kill_tree(driver)  # a crash: Tune's saved state may be older than the last finished trial
    finally:
        if driver.poll() is None:
            _kill_tree(driver)

    # The driver never got to say it stopped: the record says running until its beats are missed.
    assert list_sweeps(uri)[0].status in {"running", "stale"}, "the sweep ended before its driver was killed"
    wait_until(lambda: list_sweeps(uri)[0].status == "stale", 30, "the sweep to read back as stale", 0.5)
    resumed = _resume(tmp_path, sweep_id, uri)

    record = load_sweep(sweep_id, uri)
    assert record.status == "finished"
    trials = [t for t in record.trials if t.trial_id != "reference"]
    # The restored searcher knows which proposals it handed out: the resumed run adds none.
    assert len(trials) == 3 and len({t.trial_id for t in trials}) == 3
    assert sum(1 for t in record.trials if t.trial_id == "reference") == 1
    client = MlflowClient(uri)
    for trial_id, run_id in before.items():
        (same,) = [t for t in trials if t.trial_id == trial_id]
        assert same.status == "ok" and same.mlflow_run_id == run_id  # not re-run, not re-logged as new
        assert len(client.get_metric_history(run_id, "samples_per_s")) == 1  # logged once, whatever Tune replayed
    assert "reference:" not in resumed.stderr  # the reference is measured once per sweep
    assert len(_trial_runs(uri, sweep_id)) == 4  # 3 proposals + the reference, no duplicates
    # The console (not a terminal here: plain lines) holds the sweep's own lines alone, and the
    # search's progress counts its proposals against their total.
    for console in (log.read_text(errors="replace"), resumed.stdout + resumed.stderr):
        assert_no_library_noise(console)
    assert "search 3/3 · running 0" in resumed.stderr, resumed.stderr[-2000:]


# What Ray, Tune and Optuna print when left to themselves (`elastune sweep -v` lets them).
LIBRARY_NOISE = (
    "Configuration for experiment",  # Tune's boxed table
    "Number of trials",
    "TensorBoard",
    "View detailed results here",
    "max_concurrent_trials",
    "Wrote the latest version of all result files",
    "A new study created",  # Optuna
    "Token authentication is enabled",  # Ray's init
    "Started a local Ray instance",
)


def assert_no_library_noise(console: str) -> None:
    found = [noise for noise in LIBRARY_NOISE if noise.lower() in console.lower()]
    assert not found, (found, console[-3000:])


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
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    psutil.wait_procs(family, timeout=30)
