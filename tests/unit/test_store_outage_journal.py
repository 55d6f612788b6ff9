"""A sweep's journal (tracking/journal.py): the file, the switch between store and journal, and
its replay into a real SQLite store. The integration test (tests/integration/test_store_outage.py)
stops a real `mlflow server` under a real sweep."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from elastune.errors import InputError
from elastune.tracking import journal as journal_module
from elastune.tracking.journal import Entry, Journal, JournalError, journaling
from elastune.tracking.mlflow import SweepTracker, load_sweep, write_journal
from elastune.tracking.records import SweepRecord, TrialRecord
from mlflow import MlflowClient

from tests.unit.test_tracking_mlflow import child_runs, make_sweep

SWEEP = "outage-1"


def header(sweep_id: str = SWEEP, status: str = "running") -> SweepRecord:
    return SweepRecord(sweep_id=sweep_id, spec={"name": "outage"}, status=status)  # type: ignore[arg-type]


def trial(number: int, status: str = "ok", **figures: Any) -> TrialRecord:
    return TrialRecord(f"t{number}", number, status, {"batch.micro": 64}, {"steps": 6}, **figures)  # type: ignore[arg-type]


# -- the file ---------------------------------------------------------------------------------


def test_each_entry_is_one_json_line_on_disk_before_append_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    journal = Journal(tmp_path)
    entries = [Entry("trial", header(), trial(0, "running")), Entry("trial", header(), trial(0, samples_per_s=5.0))]
    entries.append(Entry("sweep", replace(header(), trials=[trial(0)])))
    for count, entry in enumerate(entries, 1):
        journal.append(entry)
        assert len(journal.path.read_bytes().splitlines()) == count
    # one fsync per line, and the folder's once, when the file was made
    assert len(synced) == len(entries) + 1
    assert stat.S_IMODE(journal.path.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in journal.path.read_text().splitlines()]  # JSON, not pickle
    assert [line["kind"] for line in lines] == ["trial", "trial", "sweep"]
    assert lines[2]["sweep"]["trials"] == []  # a trial is an entry of its own, never repeated in the sweep's


def test_entries_come_back_validated_in_order(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    written = [
        Entry("trial", header(), trial(1, "running")),
        Entry("trial", header(), trial(1, samples_per_s=0.1 + 0.2, metrics={"auc": 0.7})),
        Entry("confirmation", header(), trial(1, confirmed_speedup=[1.0, 1.1, 1.2])),
        Entry("sweep", header()),
        Entry("end", header(status="finished")),
    ]
    for entry in written:
        journal.append(entry)
    assert journal.entries(SWEEP) == written


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"not json\n", "not JSON"),
        (b"[1, 2]\n", "not a journal entry"),
        (b'{"kind": "trial", "sweep": {}, "trial": {}, "extra": 1}\n', "not a journal entry"),
        (b'{"kind": "drop_table", "sweep": {}}\n', "kind='drop_table'"),
        (b'{"kind": ["trial"], "sweep": {}}\n', "kind=\\['trial'\\]"),
        (b'{"kind": "trial", "sweep": SWEEP}\n', "needs trial"),
        (b'{"kind": "sweep", "sweep": SWEEP, "trial": TRIAL}\n', "holds no trial"),
        (b'{"kind": "trial", "sweep": SWEEP, "trial": "t0"}\n', "not a journal entry"),
        (b'{"kind": "trial", "sweep": SWEEP, "trial": BAD_TRIAL}\n', "samples_per_s"),
        (b'{"kind": "sweep", "sweep": FOREIGN}\n', "unexpected_key"),
        (b'{"kind": "sweep", "sweep": WITH_TRIALS}\n', "no trials list"),
        (b'{"kind": "sweep", "sweep": OTHER_SWEEP}\n', "not of 'outage-1'"),
        (b'{"kind": "sweep", "sweep": SWEEP}', "cut short"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_malformed_line_is_refused_naming_it(tmp_path: Path, line: bytes, says: str) -> None:
    journal = Journal(tmp_path)
    journal.append(Entry("trial", header(), trial(0)))  # a good first line: the second is named
    good_trial = trial(0).to_dict()
    values = {
        b"BAD_TRIAL": {**good_trial, "samples_per_s": "fast"},
        b"WITH_TRIALS": {**replace(header(), trials=[trial(0)]).to_dict()},
        b"FOREIGN": {**header().to_dict(), "unexpected_key": "x"},
        b"OTHER_SWEEP": header("another").to_dict(),
        b"TRIAL": good_trial,
        b"SWEEP": header().to_dict(),
    }
    for name, value in values.items():
        line = line.replace(name, json.dumps(value).encode())
    with journal.path.open("ab") as out:
        out.write(line)
    with pytest.raises(JournalError, match=says) as refused:
        journal.entries(SWEEP)
    assert f"{journal.path} line 2:" in str(refused.value)
    assert refused.value.exit_code == 2


@pytest.mark.parametrize("planted", ["writable by others", "a symlink"])
def test_a_journal_someone_else_could_have_written_is_not_read(tmp_path: Path, planted: str) -> None:
    journal = Journal(tmp_path)
    if planted == "a symlink":
        Journal(tmp_path / "elsewhere").path.parent.mkdir()
        Journal(tmp_path / "elsewhere").append(Entry("sweep", header()))
        journal.path.symlink_to(tmp_path / "elsewhere" / "journal.jsonl")
    else:
        journal.append(Entry("sweep", header()))
        journal.path.chmod(0o666)
    with pytest.raises(JournalError, match="symlink is refused" if planted == "a symlink" else "mode 666"):
        journal.entries(SWEEP)


# -- store or journal -------------------------------------------------------------------------


class FakeStore:
    """A Writer whose store can be taken down: what it was written, in order."""

    def __init__(self, tracking_uri: str = "sqlite:////nowhere/mlflow.db") -> None:
        self.tracking_uri = tracking_uri
        self.up = True
        self.refuse = False  # answers, but refuses every write (a record it will not take)
        self.written: list[tuple[str, str | None, str | None]] = []
        self.tries = 0

    def apply(self, entry: Entry) -> None:
        self.tries += 1
        if not self.up:
            raise ConnectionError("connection refused")
        if self.refuse:
            raise ValueError("INVALID_PARAMETER_VALUE")
        self.written.append(
            (entry.kind, entry.trial.trial_id if entry.trial else None, entry.trial.status if entry.trial else None)
        )

    def replay(self, entries: Any) -> None:
        for entry in entries:
            self.apply(entry)

    def answers(self) -> bool:
        return self.up


@pytest.fixture
def store_and_journal(tmp_path: Path) -> Any:
    store, said = FakeStore(), []
    with journaling(SWEEP, tmp_path, store, said.append) as journal:
        yield store, journal, said


def test_while_the_store_answers_nothing_is_journaled(store_and_journal: Any) -> None:
    store, journal, said = store_and_journal
    journal.write(Entry("trial", header(), trial(0)))
    assert store.written == [("trial", "t0", "ok")] and not journal.journal.pending and said == []


def test_an_outage_is_said_once_journaled_in_order_and_written_when_the_store_answers(
    store_and_journal: Any,
) -> None:
    store, journal, said = store_and_journal
    store.up = False
    for entry in [
        Entry("trial", header(), trial(0, "running")),
        Entry("trial", header(), trial(0)),
        Entry("sweep", header()),
    ]:
        journal.write(entry)
    assert len(said) == 1 and "does not answer" in said[0] and str(journal.path) in said[0]
    assert [e.kind for e in journal.journal.entries()] == ["trial", "trial", "sweep"]
    store.up = True
    assert journal.catch_up(now=True)
    journal.write(Entry("trial", header(), trial(1)))
    # the journal first, in order, then what came after it
    assert store.written == [
        ("trial", "t0", "running"),
        ("trial", "t0", "ok"),
        ("sweep", None, None),
        ("trial", "t1", "ok"),
    ]
    assert not journal.journal.pending and not journal.pending
    assert len(said) == 2 and "answers again: 3 journaled record(s) written" in said[1]


def test_while_down_the_store_is_tried_at_most_every_retry_interval(
    store_and_journal: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, journal, _ = store_and_journal
    clock = [1000.0]
    monkeypatch.setattr(journal_module.time, "monotonic", lambda: clock[0])
    store.up = False
    journal.write(Entry("trial", header(), trial(0)))
    tries = store.tries
    store.up = True  # back, but not tried again before the interval is up
    journal.write(Entry("trial", header(), trial(1)))
    assert store.tries == tries and journal.pending
    clock[0] += journal_module.RETRY_EVERY_S
    journal.write(Entry("trial", header(), trial(2)))
    assert [w[1] for w in store.written] == ["t0", "t1", "t2"] and not journal.pending


def test_a_write_the_store_refuses_while_it_answers_is_an_error(store_and_journal: Any) -> None:
    store, journal, _ = store_and_journal
    store.refuse = True
    with pytest.raises(ValueError, match="INVALID_PARAMETER_VALUE"):
        journal.write(Entry("trial", header(), trial(0)))
    assert not journal.journal.pending


def test_the_driver_reads_its_own_view_while_the_store_lacks_part_of_it(store_and_journal: Any) -> None:
    store, journal, _ = store_and_journal
    first = replace(header(), trials=[trial(-1)])  # the reference, written before the outage
    journal.write(Entry("sweep", first))
    store.up = False
    journal.write(Entry("trial", first, trial(0, "running")))
    later = replace(header(), trials=[trial(0, samples_per_s=3.0)])  # another caller's copy of the record
    journal.write(Entry("trial", later, trial(1, "running")))
    view = load_sweep(SWEEP, store.tracking_uri)  # the store (a file that does not exist) is not read
    assert [(t.trial_id, t.status) for t in view.trials] == [("t-1", "ok"), ("t0", "ok"), ("t1", "running")]
    view.trials.clear()  # a copy: the driver's view is its own
    assert len(load_sweep(SWEEP, store.tracking_uri).trials) == 3


def test_the_driver_reads_its_own_view_when_the_store_went_down_since_its_last_write(store_and_journal: Any) -> None:
    """Down between two writes, nothing journaled yet: a read (the sweep callback's first, when
    the search starts) gets the driver's own view, not an error that would end the sweep; once the
    store answers, its word stands."""
    store, journal, _ = store_and_journal
    journal.write(Entry("trial", replace(header(), trials=[trial(-1)]), trial(0, "running")))
    assert not journal.pending
    store.up = False
    view = load_sweep(SWEEP, store.tracking_uri)
    assert [(t.trial_id, t.status) for t in view.trials] == [("t-1", "ok"), ("t0", "running")]
    store.up = True
    with pytest.raises(InputError, match="no sweeps recorded"):
        load_sweep(SWEEP, store.tracking_uri)


# -- replaying into a real store --------------------------------------------------------------


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def journaled_sweep(uri: str, sweep_id: str, folder: Path) -> tuple[SweepRecord, Journal]:
    """A sweep started in the store whose every later write is in its journal, as a driver whose store
    went down right after the start leaves it."""
    record = make_sweep(sweep_id, n_ok=2)
    trials, record.trials, record.status = record.trials, [], "running"
    SweepTracker(uri).start_sweep(record)
    journal = Journal(folder)
    for t in trials:
        journal.append(Entry("trial", record, TrialRecord(t.trial_id, t.number, "running", t.params, t.config)))
        journal.append(Entry("trial", record, t))
        record.trials.append(t)
        journal.append(Entry("sweep", record))
    journal.append(Entry("end", replace(record, status="finished")))
    return record, journal


def test_a_journal_written_twice_leaves_the_store_as_written_once(uri: str, tmp_path: Path) -> None:
    record, journal = journaled_sweep(uri, "replay-1", tmp_path)
    entries = journal.entries("replay-1")
    SweepTracker(uri).replay(entries)
    once = load_sweep("replay-1", uri)
    SweepTracker(uri).replay(entries)  # a driver that died mid-way, or a second `elastune sync`
    twice = load_sweep("replay-1", uri)
    assert twice == once and twice.status == "finished"
    assert [t.status for t in twice.trials] == [t.status for t in record.trials]  # running ones included: as logged
    assert len(child_runs(uri, once.mlflow_run_id or "")) == len(record.trials)
    ok = next(t for t in twice.trials if t.status == "ok")
    client = MlflowClient(tracking_uri=uri)
    assert len(client.get_metric_history(ok.mlflow_run_id or "", "samples_per_s")) == 1
    parent = client.get_run(once.mlflow_run_id or "")
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials_total"] == len(record.trials)
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"trials.csv", "pareto.png"}


def test_write_journal_validates_every_line_before_writing_any(uri: str, tmp_path: Path) -> None:
    _, journal = journaled_sweep(uri, "tampered-1", tmp_path)
    lines = journal.path.read_bytes().splitlines(keepends=True)
    assert b'"status":"ok"' in lines[1]  # trial 0's end, after its start on line 1
    lines[1] = lines[1].replace(b'"status":"ok"', b'"status":"fine"')
    journal.path.write_bytes(b"".join(lines))
    with pytest.raises(JournalError, match=r"line 2: .*status"):
        write_journal(tmp_path, "tampered-1", uri)
    assert load_sweep("tampered-1", uri).trials == [] and journal.pending


def test_write_journal_into_a_store_without_the_sweep_says_so(uri: str, tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.append(Entry("sweep", header("never-started")))
    with pytest.raises(InputError, match="holds no sweep 'never-started'"):
        write_journal(tmp_path, "never-started", uri)
    assert journal.pending


def test_write_journal_without_a_journal_writes_nothing(uri: str, tmp_path: Path) -> None:
    assert write_journal(tmp_path, SWEEP, uri) == 0


def test_http_retries_are_bounded_so_an_outage_is_noticed_in_seconds() -> None:
    """MLflow's defaults (7 retries, backoff factor 2, 120 s timeout) stay silent for ~4 minutes;
    elastune's: at most 2 attempts of 10 s, 1 s backoff, then a 5 s /health probe: < 30 s."""
    retries = int(os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])
    backoff = int(os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"])
    timeout = int(os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"])
    worst = (retries + 1) * timeout + sum(backoff * 2**i for i in range(retries)) + 5
    assert worst < 30, (retries, backoff, timeout)


@pytest.mark.parametrize(("interrupted", "status"), [(False, "failed"), (True, "interrupted")])
def test_no_trial_of_an_ended_sweep_stays_running(uri: str, tmp_path: Path, interrupted: bool, status: str) -> None:
    """A trial whose end never reached the record (a callback that failed on it) ends with its sweep."""
    from elastune.tuning.sweep import _end_record

    sweep_id = f"ended-{status}"
    record = replace(header(sweep_id), trials=[trial(0), trial(1, "running")])
    tracker = SweepTracker(uri)
    tracker.start_sweep(record)
    for t in record.trials:
        tracker.log_trial(record, t)
    with journaling(sweep_id, tmp_path, tracker, print) as journal:
        ended = _end_record(sweep_id, uri, tracker, journal, interrupted=interrupted, join=lambda: None)
    stored = load_sweep(sweep_id, uri)
    assert stored == ended and stored.status == ("interrupted" if interrupted else "finished")
    lost = stored.trials[1]
    assert lost.status == status and lost.error and ("finished without" in lost.error or "resume" in lost.error)
    run = MlflowClient(tracking_uri=uri).get_run(lost.mlflow_run_id or "")
    assert run.info.status == ("KILLED" if interrupted else "FAILED")


def test_a_resume_writes_the_journal_first(tmp_path: Path) -> None:
    """The journal a driver left when it ended with its store down reaches the store before a resume
    does anything else (Ray not started); a journal that ended the sweep leaves nothing to resume."""
    from elastune.tuning.spec import validate_sweep_spec
    from elastune.tuning.state import create_state
    from elastune.tuning.sweep import SweepOptions, run_sweep

    from tests.integration.sweep_specs import tiny_spec

    sweep_id, uri, home = "tiny-20261126-120000-cd34", f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "sweeps"
    spec = validate_sweep_spec(tiny_spec())
    state = create_state(home, sweep_id, spec)
    record = SweepRecord(sweep_id=sweep_id, spec=spec.model_dump(mode="json"), status="running")
    SweepTracker(uri).start_sweep(record)
    journal = Journal(state)
    journal.append(Entry("trial", record, trial(0, samples_per_s=9.0)))
    journal.append(Entry("end", replace(record, status="finished")))
    lines: list[str] = []
    with pytest.raises(InputError, match=r"the sweep finished \(its journal, now written, says so\)"):
        run_sweep(None, SweepOptions(tracking_uri=uri, home=home, echo=lines.append), resume=sweep_id)
    assert lines == [f"resume: 2 journaled record(s) written to {uri}"] and not journal.pending
    stored = load_sweep(sweep_id, uri)
    assert stored.status == "finished" and [(t.trial_id, t.samples_per_s) for t in stored.trials] == [("t0", 9.0)]
