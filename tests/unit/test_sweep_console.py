"""What a person reads of a sweep: the progress display, the results table at 100 columns, and
`elastune sweeps` / `elastune results` against a real SQLite MLflow store."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.cli import sweep as sweep_cli
from elastune.tracking.mlflow import SweepTracker
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.display import LiveDisplay, PlainDisplay
from elastune.tuning.progress import searched, status_text
from rich.console import Console

from tests.unit.test_tracking_mlflow import make_sweep, record_sweep

# the quick LM sweep's keys: the longest names and values a shipped spec searches
LM_PARAMS = {
    "data.padding": "dynamic",
    "data.bucket_by_length": True,
    "model.activation_checkpointing": "every_block",
    "embedding.strategy": "half",
    "optimizer.sparse": "rowwise_adagrad",
    "precision": "bf16",
    "batch.micro": 16,
    "batch.accum": 2,
}


def lm_sweep(n: int) -> SweepRecord:
    """`n` searched trials with every figure the table shows, the reference, and a pruned trial."""
    record = make_sweep("lm_quick-20261125-120000-ab12", n_ok=n)
    for trial in record.trials:
        trial.params = dict(LM_PARAMS)
        if trial.status == "ok":
            trial.samples_per_s_quartiles = [123_456.7, 234_567.8, 345_678.9]
            trial.confirmed_speedup = [1.234, 2.345, 3.456]
    reference = TrialRecord(
        trial_id="reference", number=-1, status="ok", params={"batch.micro": 32}, config={}, samples_per_s=400.0
    )
    record.trials.append(reference)
    return record


def rendered(monkeypatch: pytest.MonkeyPatch, record: SweepRecord, width: int = 100, **kwargs: object) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(sweep_cli, "out", console)
    sweep_cli._print_summary(record, **kwargs)  # type: ignore[arg-type]
    return console.export_text()


def test_the_results_table_fits_100_columns_and_shows_every_parameter_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(monkeypatch, lm_sweep(3))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, "\n".join(line for line in lines if len(line) > 100)
    assert "…" not in text  # nothing truncated
    for name, value in [
        ("padding", "dynamic"),
        ("buckets", "True"),
        ("checkpointing", "every_block"),
        ("sparse opt", "rowwise_adagrad"),
        ("micro", "16"),
        ("accum", "2"),
    ]:
        assert f"{name}={value}" in text
    assert "123k-346k" in text  # the windows' middle half
    assert "conf. 2.35×" in text and "(1.23-3.46)" in text  # the confirmation's median and range
    assert "pred. " in text  # the estimator's prediction under the measured peak


def test_every_trial_is_shown_or_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    record = lm_sweep(12)  # 12 ok + 6 others + the reference: more than the default 10 rows
    text = rendered(monkeypatch, record)
    assert f"the best 10 of {len(record.trials)} trials; --all shows every one" in text
    everything = rendered(monkeypatch, record, top=None)
    assert "--all" not in everything
    for status in ("pruned", "oom", "failed", "infeasible", "interrupted", "running"):
        assert status in everything  # a trial that lost says why, in the rank column


def test_the_wide_table_keeps_each_figure_in_its_column(monkeypatch: pytest.MonkeyPatch) -> None:
    text = rendered(monkeypatch, lm_sweep(2), width=400, wide=True)
    assert "samples/s (windows p25-p75)" in text
    assert "activation_checkpointing=every_block, strategy=half" in text  # one line per trial


def test_plain_display_prints_lines_and_a_status_at_most_every_interval() -> None:
    lines: list[str] = []
    now = [0.0]
    display = PlainDisplay(lines.append, every_s=10, clock=lambda: now[0])
    display.stage("search", 8)
    display.status(3, "running 2")
    assert lines == []  # within the interval: nothing
    display.line("trial 3 ok")
    display.status(4, "running 1 · best 9/s (trial 3)", force=True)  # a trial ended: always
    assert lines == ["trial 3 ok", "  search 4/8 · running 1 · best 9/s (trial 3)"]
    now[0] = 15.0
    display.status(4, "running 1 · best 9/s (trial 3)")  # nothing new: not repeated
    display.status(4, "running 2 · best 9/s (trial 3)")  # new, and the interval passed
    assert lines[2:] == ["  search 4/8 · running 2 · best 9/s (trial 3)"]
    now[0] = 35.0
    display.status(4, "running 2 · best 9/s (trial 3)")  # unchanged, within four intervals: quiet
    now[0] = 56.0
    display.status(4, "running 2 · best 9/s (trial 3)")  # unchanged for four intervals: a sign of life
    assert lines[3:] == ["  search 4/8 · running 2 · best 9/s (trial 3)"]


def test_live_display_shows_done_of_total_an_eta_and_the_status_under_the_lines() -> None:
    console = Console(width=100, record=True, file=io.StringIO(), force_terminal=True, color_system=None)
    display = LiveDisplay(console)
    display.stage("search", 8)
    display.line("trial 1 ok: 1,000 samples/s")
    display.status(3, "running 2 · best 1,000/s (trial 1)")
    drawn = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    drawn.print(display._progress.get_renderable())  # the live row as it is drawn now
    display.close()
    assert "trial 1 ok: 1,000 samples/s" in console.export_text()  # the line went above the live row
    (row,) = [line for line in drawn.export_text().splitlines() if line.strip()]
    assert "search" in row and "3/8" in row and "eta" in row and "running 2 · best 1,000/s (trial 1)" in row
    assert len(row.rstrip()) <= 100


def test_status_counts_the_search_alone_and_names_the_best() -> None:
    record = make_sweep("s", n_ok=3)
    record.trials.append(
        TrialRecord(trial_id="reference", number=-1, status="ok", params={}, config={}, samples_per_s=1e9)
    )
    ended = sum(t.status in {"ok", "infeasible", "oom", "pruned", "failed"} for t in record.trials) - 1
    assert searched(record) == ended  # the reference is not one of the search's proposals
    text = status_text(record)
    assert text.startswith("running 1")
    assert "oom 1" in text and "failed 1" in text and "pruned 1" in text
    best = record.best()
    assert best is not None and f"best {best.samples_per_s:,.0f}/s" in text


def test_sweeps_lists_every_sweep_and_results_defaults_to_the_newest_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri)
    record_sweep(tracker, make_sweep("older-finished", started_at=1_700_000_000.0))
    running = make_sweep("newer-running", started_at=1_700_000_500.0)
    running.status = "running"
    tracker.start_sweep(running)  # started, no trial yet: its driver is still at it

    assert main(["sweeps", "--tracking-uri", uri, "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["sweep_id"] for s in listed] == ["newer-running", "older-finished"]
    finished = listed[1]
    assert finished["status"] == "finished" and finished["trials"] == 9
    assert finished["best_samples_per_s"] == pytest.approx(max(t.samples_per_s or 0 for t in make_sweep("x").trials))

    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(sweep_cli, "out", console)
    monkeypatch.setattr(sweep_cli, "err", console)
    assert main(["sweeps", "--tracking-uri", uri]) == 0
    table = console.export_text()
    assert "newer-running" in table and "older-finished" in table and "running" in table

    assert main(["results", "--tracking-uri", uri]) == 0
    shown = console.export_text()
    assert "the newest finished sweep: older-finished" in shown
    assert "sweep older-finished (finished)" in shown


def test_sweeps_on_an_empty_store_says_how_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweeps", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert not (tmp_path / "none.db").exists()  # reading creates no store
