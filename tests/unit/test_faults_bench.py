"""bench/faults.py's checks can fail: each count moves when its kind of damage is made, on a real
SQLite store written as a sweep's driver writes it (one per module: migrations cost seconds) and
on consoles written by elastune's own line formats; and a clean episode counts nothing."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from elastune.tracking.mlflow import SweepTracker
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.progress import trial_line
from mlflow import MlflowClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import faults

SWEEP = "faults-20260101-000000-abcd"


def trial(number: int, status: str = "ok", rate: float = 1234.5) -> TrialRecord:
    trial_id = "reference" if number < 0 else f"t{number}"
    figures = {"samples_per_s": rate, "peak_memory_bytes": 4_000_000} if status == "ok" else {"error": "boom"}
    params = {"batch.micro": 64 + number}
    return TrialRecord(trial_id, number, status, params, {}, quality_ok=True, **figures)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, SweepRecord]:
    """A finished sweep as its driver leaves it: the reference and the 4 proposals, all ok."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    record = SweepRecord(
        SWEEP, {"name": "faults"}, "running", started_at=1_700_000_000.0, reference_samples_per_s=999.6
    )
    record.trials = [trial(-1, rate=999.6), *(trial(n, rate=1000.0 * (n + 1) + 0.4) for n in range(faults.MAX_TRIALS))]
    tracker = SweepTracker(uri)
    tracker.start_sweep(record)
    for each in record.trials:
        tracker.log_trial(record, each)
        tracker.update_sweep(record)
    record.status, record.ended_at = "finished", 1_700_000_100.0
    tracker.finish_sweep(record)
    return uri, record


def console(record: SweepRecord) -> str:
    """The driver's lines as elastune writes them (the reference's line is sweep._run_reference's)."""
    lines = [f"sweep {record.sweep_id}: 4 proposals, 2 at a time, ceiling none"]
    lines.append(f"reference: {record.reference_samples_per_s:,.0f} samples/s, eval logloss 0.6138 (lower is better)")
    lines += [trial_line(t) for t in record.trials if t.trial_id != "reference"]
    return "\n".join(lines) + f"\nsweep {record.sweep_id} finished in 30 s\n"


def evidence(uri: str, record: SweepRecord) -> faults.Evidence:
    ev = faults.Evidence("driver-kill", confirm=False, consoles=[console(record)])
    faults.read_store(ev, SWEEP, uri)
    ev.executions = {faults.label(t.trial_id, t.number): [1_700_000_010.0] for t in record.trials}
    ev.exits = [("driver", 0, frozenset({0}))]
    return ev


def counts(found: faults.Findings) -> tuple[int, int, int, int]:
    return len(found.lost), len(found.twice), len(found.wrong), len(found.tracebacks)


def test_a_clean_episode_counts_nothing(stored: tuple[str, SweepRecord]) -> None:
    found = faults.check(evidence(*stored))
    assert counts(found) == (0, 0, 0, 0), found


def test_the_consoles_are_read_as_elastune_writes_them(stored: tuple[str, SweepRecord]) -> None:
    _, record = stored
    said = faults.announced([console(record), trial_line(trial(5, "failed")), "reference did not finish (failed: x)"])
    assert [(name, status) for _, name, status, _ in said] == [
        ("ref", "ok"),
        *((str(n), "ok") for n in range(faults.MAX_TRIALS)),
        ("5", "failed"),
        ("ref", "failed"),
    ]
    assert faults.stage_of(console(record)) == "end"
    assert faults.stage_of("sweep x: 4 proposals\nreference: full · fp32 · batch 128×1 · 6 steps") == "reference"


def test_a_deleted_trial_run_is_one_record_lost(stored: tuple[str, SweepRecord]) -> None:
    uri, record = stored
    client = MlflowClient(uri)
    run_id = next(t.mlflow_run_id for t in record.trials if t.number == 2)
    client.delete_run(run_id)
    try:
        found = faults.check(evidence(uri, record))
    finally:
        client.restore_run(run_id)
    assert counts(found) == (1, 0, 0, 0), found
    assert found.lost[0].startswith("trial 2: announced ok, not in the store")


def test_a_second_run_for_one_trial_is_one_trial_run_twice(stored: tuple[str, SweepRecord]) -> None:
    uri, record = stored
    client = MlflowClient(uri)
    first = client.get_run(next(t.mlflow_run_id for t in record.trials if t.number == 1) or "")
    second = client.create_run(first.info.experiment_id, tags=first.data.tags)
    client.log_metric(second.info.run_id, "samples_per_s", 2000.4)
    client.set_terminated(second.info.run_id, "FINISHED")
    try:
        found = faults.check(evidence(uri, record))
    finally:
        client.delete_run(second.info.run_id)
    assert counts(found) == (0, 1, 0, 0), found
    assert found.twice == ["trial 1: 2 runs in the store (trial ids t1, t1)"]


def test_a_proposal_run_again_under_a_new_trial_id_is_run_twice_not_lost(stored: tuple[str, SweepRecord]) -> None:
    """As after a resume from a Tune state older than the store: the proposal handed out again, its
    new run announced and stored beside the first."""
    uri, record = stored
    client = MlflowClient(uri)
    first = client.get_run(next(t.mlflow_run_id for t in record.trials if t.number == 0) or "")
    again = client.create_run(first.info.experiment_id, tags={**first.data.tags, "elastune.trial_id": "t0-again"})
    client.log_metric(again.info.run_id, "samples_per_s", 5000.0)
    client.set_terminated(again.info.run_id, "FINISHED")
    ev = evidence(uri, record)
    ev.consoles.append(trial_line(trial(0, rate=5000.0)))
    try:
        found = faults.check(ev)
    finally:
        client.delete_run(again.info.run_id)
    assert counts(found) == (0, 1, 0, 0), found
    assert found.twice[0].startswith("trial 0: 2 runs in the store")


def test_each_kind_of_damage_moves_its_own_count(stored: tuple[str, SweepRecord]) -> None:
    clean = evidence(*stored)

    def damaged(change: str) -> faults.Evidence:
        ev = copy.deepcopy(clean)
        child = next(c for c in ev.children if c.number == 3)
        if change == "a different figure":
            child.samples_per_s = 1.0
        elif change == "left running":
            child.status, child.run_status = "running", "RUNNING"
        elif change == "failed though nothing was killed":
            child.status, child.run_status, child.error = "failed", "FAILED", "boom"
        elif change == "trained again after its end":
            ev.finals_at = [(1_700_000_000.0, frozenset({"3"}), 1)]
        elif change == "announced again by the resume":
            ev.consoles.append(trial_line(trial(3, rate=4000.4)))
            ev.finals_at = [(1_800_000_000.0, frozenset({"3"}), 1)]
        elif change == "a traceback":
            ev.consoles.append("Traceback (most recent call last):\n  File x\nRuntimeError: boom\n")
        elif change == "no final artifacts":
            ev.artifacts = []
        elif change == "a journal left":
            ev.journal_lines = 3
        elif change == "the wrong exit code":
            ev.exits = [("resume-1", 1, frozenset({0}))]
        return ev

    expected = {
        "a different figure": (1, 0, 0, 0),
        "left running": (1, 0, 1, 0),  # announced ok, stored running: its end was lost, and it never ended
        "failed though nothing was killed": (1, 0, 1, 0),
        "trained again after its end": (0, 1, 0, 0),
        "announced again by the resume": (0, 1, 0, 0),
        "a traceback": (0, 0, 0, 1),
        "no final artifacts": (1, 0, 0, 0),
        "a journal left": (1, 0, 0, 0),
        "the wrong exit code": (0, 0, 1, 0),
    }
    assert {change: counts(faults.check(damaged(change))) for change in expected} == expected


def test_a_failed_trial_is_expected_only_where_the_fault_killed_one(stored: tuple[str, SweepRecord]) -> None:
    ev = evidence(*stored)
    ev.consoles = [ev.consoles[0].replace("trial 3 ok:", "trial 3 failed:")]
    child = next(c for c in ev.children if c.number == 3)
    child.status, child.run_status, child.error = "failed", "FAILED", "The actor died unexpectedly"
    assert counts(faults.check(ev))[2] == 1
    ev.killed = True
    found = faults.check(ev)
    assert counts(found) == (0, 0, 0, 0), found
    assert found.notes and "not the one-line reason" in found.notes[0]  # Ray's text, said aside


def test_the_plan_is_repeatable_and_gives_each_fault_its_share() -> None:
    plans = faults.plan(14, list(faults.FAULTS), seed=3)
    assert plans == faults.plan(14, list(faults.FAULTS), seed=3)
    assert sorted(p.fault for p in plans) == sorted(faults.FAULTS * 2)
    assert all(0 <= p.moment_s < faults.WINDOW_S for p in plans)
    outages = [p for p in plans if p.fault == "store-outage"]
    assert all(10 <= p.hold_s <= 120 and p.how in {"SIGKILL", "SIGTERM"} for p in outages)
