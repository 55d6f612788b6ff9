"""A sweep whose `mlflow server` goes down under it: a real server on 127.0.0.1, stopped (SIGKILL,
as a crash or a lost node) and started again on the same port and database by the test, and a real
sweep on a local Ray started here.

- Down mid-search, back before the end: the sweep says so once, journals what it cannot write,
  says when it caught up, and ends finished with every trial in the store, final, with its figures.
- Down from the reference on, still down at the end: the sweep ends with `StoreUnreachable` (exit
  1) naming its journal and `elastune sync`; a tampered journal line is refused (exit 2, the line
  named); once the server is back, `elastune sync` writes the whole sweep and removes the journal.

The sweep's console is a `PlainDisplay` whose lines also stop and start the server, so each outage
begins at the same point of the sweep however busy the machine is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from elastune.cli import main
from elastune.errors import StoreUnreachable
from elastune.tracking.mlflow import load_sweep
from elastune.tracking.records import SweepRecord
from elastune.tuning.display import PlainDisplay
from elastune.tuning.spec import validate_sweep_spec
from elastune.tuning.sweep import SweepOptions, run_sweep
from mlflow import MlflowClient

from tests.integration.sweep_specs import tiny_spec

pytestmark = pytest.mark.integration


class Server:
    """An `mlflow server` (SQLite store, proxied artifacts) that can be stopped and started again
    with the same port and database."""

    def __init__(self, root: Path, port: int, wait_until: Callable[..., None]) -> None:
        self.root, self.url, self.wait_until = root, f"http://127.0.0.1:{port}", wait_until
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination"]
        self.command = [*command, str(root / "art"), "--workers", "1"]
        self.env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        self.env |= {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.root / "server.log").open("ab") as log:  # a session of its own: stop() ends it and its workers
            self.proc = subprocess.Popen(
                self.command, cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.wait_until(self._up, 120, f"mlflow server at {self.url}/health", interval_s=0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def _up(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
        try:
            urllib.request.urlopen(f"{self.url}/health", timeout=2).close()
        except (urllib.error.URLError, OSError):
            return False
        return True


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int], wait_until: Callable[..., None]
) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("mlflow-server"), free_port(), wait_until)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local Ray for both sweeps (run_sweep uses the one it finds)."""
    import ray

    ray.init(address="local", num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


class Console(PlainDisplay):
    """The sweep's lines, kept; `when[text]()` runs once, at the first line that holds `text`."""

    def __init__(self, when: dict[str, Callable[[], None]]) -> None:
        self.lines: list[str] = []
        self.when = dict(when)
        super().__init__(self.lines.append)

    def line(self, text: str) -> None:
        super().line(text)
        for said in [said for said in self.when if said in text]:
            self.when.pop(said)()

    def said(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]


def spec(name: str, trials: int) -> Any:
    return validate_sweep_spec(tiny_spec(name=name, budget={"max_trials": trials, "max_concurrent": 1}))


def check_whole(record: SweepRecord, uri: str, trials: int) -> None:
    """The store holds the finished sweep: the reference and every trial, each with its final status
    and figures, one run each, none running."""
    assert record.status == "finished"
    assert [t.trial_id == "reference" for t in record.trials] == [True] + [False] * trials
    for trial in record.trials:
        assert trial.status == "ok" and trial.samples_per_s and trial.peak_memory_bytes, trial
    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(record.mlflow_run_id or "")
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials_total"] == trials + 1
    assert "trials.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.data.tags["elastune.trial_id"] for c in children) == sorted(t.trial_id for t in record.trials)
    assert {c.info.status for c in children} == {"FINISHED"}


def test_a_sweep_outlives_its_store_going_down_and_coming_back(server: Server, local_ray: None, tmp_path: Path) -> None:
    # Down once the first trial is recorded; started again (10 s or so) when the driver says it noticed.
    at: dict[str, float] = {}

    def stop() -> None:
        at["stopped"] = time.monotonic()
        server.stop()

    def start() -> None:
        at["noticed"] = time.monotonic()
        server.start()

    console = Console({"trial 0 ok": stop, "does not answer": start})
    options = SweepOptions(tracking_uri=server.url, home=tmp_path / "sweeps", display=console)
    record = run_sweep(spec("outage-back", trials=2), options)
    # The next write (trial 1's start) finds the server gone: retries bounded, not MLflow's 4 minutes.
    assert at["noticed"] - at["stopped"] < 30

    journal = tmp_path / "sweeps" / record.sweep_id / "journal.jsonl"
    (down,) = console.said("does not answer")
    assert down.startswith(f"MLflow store {server.url} does not answer") and str(journal) in down
    (back,) = console.said("answers again")
    assert "journaled record(s) written" in back and console.lines.index(back) > console.lines.index(down)
    assert not journal.exists() and console.lines[-1].startswith(f"sweep {record.sweep_id} finished")
    stored = load_sweep(record.sweep_id, server.url)
    assert stored == record
    check_whole(stored, server.url, trials=2)


def test_a_store_still_down_at_the_end_leaves_a_journal_for_elastune_sync(
    server: Server,
    local_ray: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))  # where `elastune sync` looks
    # Down once the reference is measured, before it is recorded: the search starts with the store down.
    console = Console({"samples/s, eval": server.stop})
    options = SweepOptions(tracking_uri=server.url, home=tmp_path / "home" / "sweeps", display=console)
    with pytest.raises(StoreUnreachable) as ended:
        run_sweep(spec("outage-end", trials=1), options)

    record = ended.value.record
    sweep_id, journal = record.sweep_id, tmp_path / "home" / "sweeps" / record.sweep_id / "journal.jsonl"
    assert ended.value.exit_code == 1 and journal.is_file()
    message = str(ended.value).splitlines()
    assert str(journal) in message[0] and message[-1] == f"  elastune sync {sweep_id} --tracking-uri {server.url}"
    assert len(console.said("does not answer")) == 1
    assert record.status == "finished" and [t.status for t in record.trials] == ["ok", "ok"]  # the driver's own view

    # A tampered line is refused, naming it, before the store is asked anything (it is still down).
    kept = journal.read_bytes()
    lines = kept.splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"status":"', b'"status":"x', 1)
    journal.write_bytes(b"".join(lines))
    capsys.readouterr()
    assert main(["sync", sweep_id, "--tracking-uri", server.url]) == 2
    assert f"{journal} line 2:" in " ".join(capsys.readouterr().err.split())
    journal.write_bytes(kept)

    server.start()
    assert load_sweep(sweep_id, server.url).trials == []  # the store has the start alone
    assert main(["sync", sweep_id, "--tracking-uri", server.url]) == 0
    assert "journaled record(s) written" in capsys.readouterr().out and not journal.exists()
    check_whole(load_sweep(sweep_id, server.url), server.url, trials=1)
