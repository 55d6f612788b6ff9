"""The MLflow record of a sweep, against a real SQLite store (one per module: migrations cost seconds)."""

from __future__ import annotations

import csv
import io
import re
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
import yaml
from elastune.errors import InputError
from elastune.tracking.encoding import record_tags
from elastune.tracking.mlflow import (
    Heartbeat,
    SweepTracker,
    artifact_path,
    heartbeat_interval,
    list_sweeps,
    load_sweep,
    mark_interrupted,
    mlflow_run_url,
    resolve_tracking_uri,
)
from elastune.tracking.records import RecordError, SweepRecord, TrialRecord
from elastune.validate import load_run_config
from mlflow import MlflowClient

from tests.conftest import TINY

STATUSES = ("ok", "infeasible", "oom", "pruned", "failed", "running", "interrupted")


def make_sweep(sweep_id: str, started_at: float = 1_700_000_000.125, n_ok: int = 3) -> SweepRecord:
    """A sweep with every trial status, awkward values included (None, 0.1+0.2, a long unicode error)."""
    base = load_run_config(None, TINY).to_dict()
    spec = {
        "name": f"spec of {sweep_id}",
        "base": {"steps": 6, "device": "cpu"},
        "search": {"batch.micro": {"choices": [32, 64, 128]}, "embedding.strategy": {"choices": ["full", "hashed"]}},
        "constraints": {"memory_ceiling": "1GiB", "quality_tolerance": 0.02},
    }
    trials: list[TrialRecord] = []
    for number in range(n_ok):
        micro = 32 * (number + 1)
        config = load_run_config(None, [*TINY, f"batch.micro={micro}"]).to_dict()
        trials.append(
            TrialRecord(
                trial_id=f"{sweep_id}_{number:05d}",
                number=number,
                status="ok",
                params={"batch.micro": micro, "embedding.strategy": "full"},
                config=config,
                estimated_peak_bytes=100_000_000 + number,
                samples_per_s=1000.0 / (number + 1) + 0.1 + 0.2,  # not a round number: exactness
                peak_memory_bytes=90_000_000 - number * 7_000_000,
                peak_memory_kind="cpu_rss_hwm",
                quality=0.5 + number / 3,
                metrics={"logloss": 0.5 + number / 3, "auc": 0.7, "baseline_logloss": 0.69},
                steps=6,
                quality_ok=number != 2,
                node="127.0.0.1",
                samples_per_s_quartiles=[900.0 - number, 1000.0 - number, 1100.0 - number],
                windows=5,
            )
        )
    rest = [
        ("infeasible", {"estimated_peak_bytes": 3 * 1024**3}),
        ("oom", {"estimated_peak_bytes": 900_000_000, "oom_retries": 4, "error": "CUDA out of memory"}),
        ("pruned", {"samples_per_s": 12.5, "peak_memory_bytes": 50_000_000, "steps": 3, "node": "10.0.0.2"}),
        ("failed", {"error": "Traceback (most recent call last):\n  ≠ ünïcode\n" + "x" * 12_000}),
        ("running", {}),
        ("interrupted", {"error": "stopped with the sweep's driver; a resume runs it again"}),
    ]
    for offset, (status, figures) in enumerate(rest):
        trials.append(
            TrialRecord(
                trial_id=f"{sweep_id}_{n_ok + offset:05d}" if status != "infeasible" else f"screened-{offset}",
                number=n_ok + offset,
                status=status,  # type: ignore[arg-type]
                params={"batch.micro": 4096, "embedding.strategy": "hashed"},
                config=base,
                **figures,  # type: ignore[arg-type]
            )
        )
    return SweepRecord(
        sweep_id=sweep_id,
        spec=spec,
        status="finished",
        memory_ceiling_bytes=1024**3,
        quality_tolerance=0.02,
        reference_quality=0.61,
        reference_samples_per_s=400.0,
        started_at=started_at,
        ended_at=started_at + 123.456,
        job_id="raysubmit_abc",
        trials=trials,
    )


def record_sweep(tracker: SweepTracker, record: SweepRecord) -> str:
    """What the driver does: start, a trial at a time with an update after each, finish."""
    run_id = tracker.start_sweep(record)
    for trial in record.trials:
        tracker.log_trial(record, trial)
        tracker.update_sweep(record)
    tracker.finish_sweep(record)
    return run_id


def child_runs(uri: str, parent_run_id: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_run(parent_run_id).info.experiment_id
    return list(client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{parent_run_id}'"))


def check_round_trip(uri: str, tracker: SweepTracker, sweep_id: str) -> SweepRecord:
    """Write a sweep with every status, read it back, compare field by field (shared with the server test)."""
    record = make_sweep(sweep_id)
    run_id = record_sweep(tracker, record)
    assert record.mlflow_run_id == run_id
    assert all(t.mlflow_run_id for t in record.trials)
    loaded = load_sweep(sweep_id, uri)
    for original, back in zip(record.trials, loaded.trials, strict=True):
        assert back == original, original.trial_id
    assert loaded == record
    assert {t.status for t in loaded.trials} == set(STATUSES)
    # `mlflow ui` nests the trials under the sweep.
    children = child_runs(uri, run_id)
    assert sorted(c.data.tags["elastune.trial_id"] for c in children) == sorted(t.trial_id for t in record.trials)
    return record


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


@pytest.fixture(scope="module")
def tracker(uri: str) -> SweepTracker:
    return SweepTracker(uri)


def test_round_trip_every_status(uri: str, tracker: SweepTracker) -> None:
    record = check_round_trip(uri, tracker, "rt-1")
    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(record.mlflow_run_id or "")
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["elastune.kind"] == "sweep" and parent.data.tags["elastune.job_id"] == "raysubmit_abc"
    assert parent.data.params["memory_ceiling_bytes"] == str(1024**3)
    assert parent.data.params["search.batch.micro.choices"] == "[32, 64, 128]"
    best = record.best()
    assert best is not None and best.number == 0  # #2 is faster per memory but failed the quality guard
    assert parent.data.metrics["best_samples_per_s"] == best.samples_per_s
    assert parent.data.metrics["speedup_over_reference"] == pytest.approx(best.samples_per_s / 400.0)  # type: ignore[operator]
    assert parent.data.metrics["trials_ok"] == 3 and parent.data.metrics["trials_infeasible"] == 1
    by_trial = {c.data.tags["elastune.trial_id"]: c for c in child_runs(uri, parent.info.run_id)}
    ok = by_trial[record.trials[0].trial_id]
    assert ok.info.status == "FINISHED" and ok.data.tags["elastune.status"] == "ok"
    assert ok.data.params["batch.micro"] == "32" and ok.data.params["search.batch.micro"] == "32"
    assert ok.data.metrics["samples_per_s_median"] == 1000.0  # the spread of its timed windows too
    assert set(ok.data.metrics) == {"samples_per_s", "peak_memory_bytes", "estimated_peak_bytes"} | {
        "samples_per_s_p25",
        "samples_per_s_median",
        "samples_per_s_p75",
        "val_logloss",
        "val_auc",
        "val_baseline_logloss",
        "quality",
        "oom_retries",
    }
    infeasible = by_trial["screened-0"]
    assert set(infeasible.data.metrics) == {"estimated_peak_bytes", "oom_retries"}  # no None logged
    failed = next(c for c in by_trial.values() if c.data.tags["elastune.status"] == "failed")
    assert failed.info.status == "FAILED" and failed.data.tags["elastune.error"].endswith("xxx")


def test_list_sweeps_newest_first_without_trials(uri: str, tracker: SweepTracker) -> None:
    older, newer = make_sweep("ls-old", started_at=1_800_000_000.0), make_sweep("ls-new", started_at=1_800_000_500.5)
    record_sweep(tracker, newer)
    record_sweep(tracker, older)  # written second, started first
    listed = list_sweeps(uri)
    ids = [r.sweep_id for r in listed]
    assert ids.index("ls-new") < ids.index("ls-old")
    first = listed[ids.index("ls-new")]
    assert (first.status, first.memory_ceiling_bytes, first.started_at, first.ended_at) == (
        "finished",
        1024**3,
        1_800_000_500.5,
        newer.ended_at,
    )
    assert first.trials == []
    newest = max(listed, key=lambda r: r.started_at or 0.0)
    assert load_sweep(None, uri).sweep_id == newest.sweep_id


def test_relogging_a_trial_updates_its_run(uri: str, tracker: SweepTracker) -> None:
    record = make_sweep("relog", n_ok=1)
    record.status = "running"
    parent = tracker.start_sweep(record)
    for trial in record.trials:
        tracker.log_trial(record, trial)
    running = next(t for t in record.trials if t.status == "running")
    running.status, running.samples_per_s, running.peak_memory_bytes = "ok", 321.5, 40_000_000
    tracker.log_trial(record, running)  # the running trial finishes
    interrupted = next(t for t in record.trials if t.status == "interrupted")
    interrupted.status, interrupted.error, interrupted.samples_per_s = "ok", None, 10.0  # run again after a resume
    SweepTracker(uri).log_trial(record, interrupted)  # a fresh tracker (no cache) finds the run too
    assert len(child_runs(uri, parent)) == len(record.trials)
    loaded = load_sweep("relog", uri)
    assert loaded.trials == record.trials
    by_id = {c.data.tags["elastune.trial_id"]: c for c in child_runs(uri, parent)}
    assert by_id[running.trial_id].info.status == "FINISHED"
    assert by_id[running.trial_id].data.metrics["samples_per_s"] == 321.5
    assert "elastune.error" not in by_id[interrupted.trial_id].data.tags


def test_a_finished_trial_is_never_logged_again(uri: str, tracker: SweepTracker) -> None:
    """Whatever replays it (a resumed driver, Tune's older saved state), a trial's first final word stands."""
    record = make_sweep("final", n_ok=1)
    record.status = "running"
    tracker.start_sweep(record)
    for trial in record.trials:
        tracker.log_trial(record, trial)
    ok = next(t for t in record.trials if t.status == "ok")
    failed = next(t for t in record.trials if t.status == "failed")
    client = MlflowClient(tracking_uri=uri)
    for writer in (tracker, SweepTracker(uri)):  # the same tracker, and a fresh one (a resumed driver)
        again = TrialRecord.from_dict({**ok.to_dict(), "samples_per_s": 1.0})
        writer.log_trial(record, again)
        writer.log_trial(record, TrialRecord.from_dict({**failed.to_dict(), "status": "ok", "error": None}))
    assert [m.value for m in client.get_metric_history(ok.mlflow_run_id or "", "samples_per_s")] == [ok.samples_per_s]
    loaded = {t.trial_id: t for t in load_sweep("final", uri).trials}
    assert loaded[ok.trial_id] == ok and loaded[failed.trial_id] == failed


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [("samples_per_s", "fast", "samples_per_s = 'fast'"), ("status", "done", "status = 'done'"), ("speed", 1, "speed")],
)
def test_a_damaged_trial_record_is_refused_naming_the_run_and_the_field(
    uri: str, tracker: SweepTracker, field: str, value: object, named: str
) -> None:
    """A record read back is checked field by field; an unknown key is an error, not dropped."""
    record = make_sweep(f"damaged-{field}", n_ok=1)
    record_sweep(tracker, record)
    trial = record.trials[0]
    client = MlflowClient(tracking_uri=uri)
    for key, text in record_tags({**trial.to_dict(), field: value, "mlflow_run_id": None}).items():
        client.set_tag(trial.mlflow_run_id or "", key, text)
    with pytest.raises(RecordError, match=f"MLflow run {trial.mlflow_run_id}: .*{re.escape(named)}"):
        load_sweep(record.sweep_id, uri)


def test_a_sweep_whose_driver_stopped_beating_reads_back_as_stale(uri: str, tracker: SweepTracker) -> None:
    record = make_sweep("beats", n_ok=1)
    record.status = "running"
    run_id = tracker.start_sweep(record)
    with Heartbeat(uri, run_id, every_s=0.2):
        assert load_sweep("beats", uri).status == "running"  # the first beat comes before anything else
        beat = load_sweep("beats", uri).heartbeat_at
        assert beat is not None and time.time() - beat < 5
    deadline = time.monotonic() + 10
    while load_sweep("beats", uri).status != "stale":  # 4 missed beats of 0.2 s
        assert time.monotonic() < deadline, "never stale"
        time.sleep(0.1)
    assert [r.status for r in list_sweeps(uri) if r.sweep_id == "beats"] == ["stale"]
    MlflowClient(tracking_uri=uri).set_tag(run_id, "elastune.heartbeat", "nan")  # a hostile tag: ignored
    assert load_sweep("beats", uri).status == "running"


def test_an_interrupted_driver_marks_its_sweep_at_once(uri: str, tracker: SweepTracker) -> None:
    record = make_sweep("marked", n_ok=1)
    record.status = "running"
    run_id = tracker.start_sweep(record)
    mark_interrupted(uri, run_id)
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags["elastune.sweep_status"] == "interrupted"
    assert load_sweep("marked", uri).status == "interrupted"  # before the full record is rewritten


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "soon", "1e9"])
def test_heartbeat_interval_is_checked(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELASTUNE_HEARTBEAT_S", bad)
    with pytest.raises(InputError, match="ELASTUNE_HEARTBEAT_S"):
        heartbeat_interval()


def test_resume_reopens_the_parent(uri: str, tracker: SweepTracker) -> None:
    record = make_sweep("resume", n_ok=0)
    record.trials = [t for t in record.trials if t.status == "infeasible"]
    record.status = "interrupted"
    first = record_sweep(tracker, record)
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(first).info.status == "KILLED"
    with pytest.raises(InputError, match=r"best_config\.yaml"):  # nothing feasible, nothing to run
        artifact_path("resume", "best_config.yaml", uri)
    again = make_sweep("resume", n_ok=1)
    again.status = "running"
    resumed = SweepTracker(uri)
    assert resumed.start_sweep(again) == first
    assert client.get_run(first).info.status == "RUNNING"
    resumed.log_trial(again, again.trials[0])
    experiment_id = client.get_run(first).info.experiment_id
    sweep_filter = "tags.`elastune.sweep_id` = 'resume' and tags.`elastune.kind` = 'sweep'"
    parents = client.search_runs([experiment_id], sweep_filter)
    assert [p.info.run_id for p in parents] == [first]
    assert {t.trial_id for t in load_sweep("resume", uri).trials} == {"screened-0", again.trials[0].trial_id}


def test_artifacts(uri: str, tracker: SweepTracker) -> None:
    record = make_sweep("art")
    record_sweep(tracker, record)
    best = record.best()
    assert best is not None
    config_file = artifact_path("art", "best_config.yaml", uri)
    assert load_run_config(config_file).to_dict() == best.config
    rows = list(csv.DictReader(io.StringIO(artifact_path("art", "trials.csv", uri).read_text())))
    assert [r["trial_id"] for r in rows] == [t.trial_id for t in record.trials]
    assert rows[0]["param.batch.micro"] == "32" and float(rows[0]["samples_per_s"]) == record.trials[0].samples_per_s
    assert rows[len(record.trials) - 1]["samples_per_s"] == ""  # the running trial has no figure yet
    png = artifact_path("art", "pareto.png", uri).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 300 and height > 200
    assert yaml.safe_load(artifact_path("art", "spec.yaml", uri).read_text()) == record.spec


def test_reading_a_sweep_back_takes_as_many_queries_for_fifty_trials_as_for_five(
    uri: str, tracker: SweepTracker
) -> None:
    # The record is read in a fixed number of store queries, never one (or more) per trial: the
    # SQL statements the store runs are counted, which no machine's speed changes.
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def statements_to_load(sweep_id: str, n: int) -> int:
        record = make_sweep(sweep_id, n_ok=n - 6)  # 6: one trial of each other status
        assert len(record.trials) == n
        tracker.start_sweep(record)
        for trial in record.trials:
            tracker.log_trial(record, trial)
        count = 0

        def counted(*_: object) -> None:
            nonlocal count
            count += 1

        event.listen(Engine, "before_cursor_execute", counted)
        try:
            loaded = load_sweep(sweep_id, uri)
        finally:
            event.remove(Engine, "before_cursor_execute", counted)
        assert loaded.trials == record.trials
        return count

    five, fifty = statements_to_load("six", 6), statements_to_load("fifty", 50)
    assert 0 < fifty == five, (five, fifty)


def test_unknown_sweep_and_artifact_names(uri: str, tracker: SweepTracker) -> None:
    record_sweep(tracker, make_sweep("known-1", started_at=1_900_000_000.0, n_ok=1))  # newest: listed first
    with pytest.raises(InputError) as caught:
        load_sweep("no-such-sweep", uri)
    message = str(caught.value)
    assert "no-such-sweep" in message and "known-1" in message
    with pytest.raises(InputError, match=r"pareto\.svg"):
        artifact_path("known-1", "pareto.svg", uri)
    with pytest.raises(InputError, match="no-such-sweep"):
        artifact_path("no-such-sweep", "trials.csv", uri)


def test_an_empty_store_is_not_created_by_reading(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}"
    assert list_sweeps(uri) == []
    with pytest.raises(InputError, match="no sweeps recorded"):
        load_sweep(None, uri)
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    "bad",
    ["mlflow.db", "sqlite://mlflow.db", "sqlite:///:memory:", "http://", "http://localhost:port", "ftp://host/x"],
)
def test_bad_tracking_uri_names_the_flag_value_and_fix(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(InputError) as caught:
        resolve_tracking_uri(bad)
    message = str(caught.value)
    assert "--tracking-uri" in message and repr(bad) in message and "sqlite:///" in message


def test_tracking_uri_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert resolve_tracking_uri("sqlite:///rel/x.db") == f"sqlite:///{tmp_path.resolve() / 'rel' / 'x.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000/")
    assert resolve_tracking_uri() == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("sqlite:////abs/m.db") == "sqlite:////abs/m.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nonsense")
    with pytest.raises(InputError, match="MLFLOW_TRACKING_URI"):
        resolve_tracking_uri()


def test_run_urls_only_for_servers() -> None:
    assert mlflow_run_url("http://127.0.0.1:5000", "abc123") == "http://127.0.0.1:5000/#/runs/abc123"
    assert mlflow_run_url("sqlite:////tmp/mlflow.db", "abc123") is None
    assert mlflow_run_url("not a uri", "abc123") is None  # a link is a convenience, never an error


def test_run_url_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example:8443/")
    assert mlflow_run_url(None, "r1") == "https://mlflow.example:8443/#/runs/r1"


def test_an_unreachable_server_fails_with_the_fix() -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(InputError, match="no MLflow server answers there"):
            SweepTracker(url)


def test_a_server_that_does_not_answer_is_asked_once_not_retried() -> None:
    """Fail fast: one probe of /health, not MLflow's retries with backoff (minutes)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.5)
        asked: list[bytes] = []
        done = threading.Event()

        def hang_up() -> None:  # accept each connection, read the request, close without a reply
            while not done.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with conn:
                    asked.append(conn.recv(4096).split(b"\r\n")[0])

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        with pytest.raises(InputError, match="no MLflow server answers there"):
            SweepTracker(f"http://127.0.0.1:{server.getsockname()[1]}")
        done.set()
        thread.join(timeout=5)
    assert asked == [b"GET /health HTTP/1.1"]
