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
from elastune.tuning.confirm import confirm_best
from elastune.tuning.display import KEEP, LiveDisplay, PlainDisplay, StageClock, eta_s, eta_text, wrap
from elastune.tuning.progress import searched, status_text, trial_line
from elastune.tuning.spec import Confirm
from rich.console import Console

from tests.unit.test_tracking_mlflow import make_sweep, record_sweep

# the quick LM sweep's keys: the longest names and values a shipped spec searches
LM_PARAMS = {
    "workload_options.padding": "dynamic",
    "workload_options.bucket_by_length": True,
    "workload_options.activation_checkpointing": "every_block",
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
            trial.units, trial.units_per_s = "tokens", 1_234_567.8  # an LM counts its real tokens
    reference = TrialRecord(
        trial_id="reference", number=-1, status="ok", params={"batch.micro": 32}, config={}, samples_per_s=400.0
    )
    record.trials.append(reference)
    return record


# a trial of the quick DLRM sweep as its line reported it: the line that ran to 122 columns
DLRM_PARAMS = {
    "embedding.strategy": "int8",
    "optimizer.sparse": "rowwise_adagrad",
    "precision": "fp32",
    "batch.micro": 1024,
}


def dlrm_trial(params: dict[str, object] | None = None, **figures: object) -> TrialRecord:
    trial = TrialRecord(
        trial_id="66f6869b",
        number=3,
        status="ok",
        params=dict(params or DLRM_PARAMS),
        config={},
        samples_per_s=73_487.4,
        peak_memory_bytes=int(51.08 * 2**20),
        quality_ok=True,
    )
    for key, value in figures.items():
        setattr(trial, key, value)
    return trial


def terminal() -> Console:
    return Console(width=100, record=True, file=io.StringIO(), force_terminal=True, color_system=None)


def live_row(display: LiveDisplay) -> str:
    """The live row as it is drawn now."""
    drawn = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    drawn.print(display._progress.get_renderable())
    (row,) = [line for line in drawn.export_text().splitlines() if line.strip()]
    return row


def shown_on_a_terminal(*lines: str) -> list[str]:
    """The lines as a 100-column terminal shows them (through the live display)."""
    console = terminal()
    display = LiveDisplay(console)
    for line in lines:
        display.line(line)
    display.close()
    return console.export_text().splitlines()


def assert_fits_and_keeps_words(lines: list[str], *words: str) -> None:
    """No line over 100 columns, and each of `words` (spaces in it included) whole on one line."""
    too_long = [line for line in lines if len(line) > 100]
    assert not too_long, "\n".join(too_long)
    for word in words:
        assert any(word in line for line in lines), (word, lines)


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
    assert "1,235k" in text and "tokens/s" in text  # the LM's own throughput
    # the measured and the confirmed figures side by side, in columns named so: the search's
    # samples/s over the reference's (1,000.3 / 400), and the confirmation's median over its range
    header = next(line for line in lines if "measured" in line)  # the columns' (the legend's follow)
    assert header.index("measured") < header.index("confirmed")
    assert "ranked by confirmed ×ref" in text  # the legend under the table says which figure ranks
    assert "2.50× ref" in text
    median = next(i for i, line in enumerate(lines) if "2.35×" in line)
    assert "1.23-3.46" in lines[median + 1]
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
    now = [0.0]
    display = LiveDisplay(console, clock=lambda: now[0])
    display.stage("search", 8, concurrency=2)
    for trial in ("a", "b"):
        display.started(trial)
    now[0] = 10.0
    for trial in ("a", "b"):
        display.ended(trial)
    display.line("trial 1 ok: 1,000 samples/s")
    display.status(3, "running 2 · best 1,000/s (trial 1)")
    row = live_row(display)
    display.close()
    assert "trial 1 ok: 1,000 samples/s" in console.export_text()  # the line went above the live row
    assert "search" in row and "3/8" in row and "eta 0:00:30" in row and "running 2 · best 1,000/s (trial 1)" in row
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
    assert "ranked by " in shown  # the legend: which figure ranks the rows above it


def test_sweeps_on_an_empty_store_says_how_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweeps", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert not (tmp_path / "none.db").exists()  # reading creates no store


def test_a_finished_trials_line_fits_100_columns_and_no_word_is_cut() -> None:
    line = trial_line(dlrm_trial())
    # the results table's names and sizes: one spelling on the whole console
    assert "sparse opt=rowwise_adagrad".replace(" ", KEEP) in line and "peak 51.1 MiB" in line
    shown = shown_on_a_terminal(line)
    assert_fits_and_keeps_words(
        shown, "73,487 samples/s", "strategy=int8", "sparse opt=rowwise_adagrad", "precision=fp32", "micro=1024"
    )
    # a spec with many parameters: wrapped at a parameter's edge, the rest indented under it
    many = shown_on_a_terminal(trial_line(dlrm_trial(LM_PARAMS, status="pruned", peak_memory_bytes=None)))
    assert len(many) >= 2 and all(line.startswith("    ") for line in many[1:])
    assert_fits_and_keeps_words(
        many,
        *(
            f"{short}={value}"
            for short, value in [
                ("padding", "dynamic"),
                ("buckets", "True"),
                ("checkpointing", "every_block"),
                ("strategy", "half"),
                ("sparse opt", "rowwise_adagrad"),
                ("precision", "bf16"),
                ("micro", "16"),
                ("accum", "2"),
            ]
        ),
    )


def test_an_infeasible_or_failed_trials_line_fits_too() -> None:
    not_run = dlrm_trial(status="infeasible", samples_per_s=None, estimated_peak_bytes=300 * 2**20)
    failed = dlrm_trial(status="failed", samples_per_s=None, error="RuntimeError: " + "a long reason " * 12)
    shown = shown_on_a_terminal(trial_line(not_run), trial_line(failed))
    assert_fits_and_keeps_words(
        shown, "trial 3 not run: predicted 300 MiB, over the ceiling", "sparse opt=rowwise_adagrad"
    )


def test_a_log_gets_one_plain_line_per_trial_however_long() -> None:
    lines: list[str] = []
    PlainDisplay(lines.append).line(trial_line(dlrm_trial(LM_PARAMS)))
    (line,) = lines
    assert KEEP not in line and "sparse opt=rowwise_adagrad" in line and len(line) > 100


def test_the_confirmation_lines_fit_100_columns() -> None:
    trials = [dlrm_trial(trial_id=f"id{n}", number=n, samples_per_s=1000.0 + n) for n in range(5)]
    reference = dlrm_trial(trial_id="reference", number=-1, params={"batch.micro": 2048}, samples_per_s=900.0)
    record = SweepRecord(sweep_id="s", spec={}, status="running", trials=[*trials, reference])
    console = terminal()
    display = LiveDisplay(console)
    # trial 4 is 1.31x the reference in both rounds, the others no faster than it
    measure = lambda params, name: 1620.0 if name.endswith("-id4") else 1234.5  # noqa: E731
    confirm_best(record, Confirm(top=5, rounds=2), {}, measure, echo=display.line)
    display.close()
    shown = console.export_text().splitlines()
    assert shown[0] == "confirmation: 2 rounds of the reference then the 5 fastest configs, one run at a time"
    assert_fits_and_keeps_words(
        shown, "round 1: reference 1,234 samples/s;", "trial 4 1.31x", "confirmed best: trial 4"
    )
    assert not any("id4" in line for line in shown)  # trials named as the table names them, not by Tune's id


def test_the_summary_footer_fits_spells_sizes_once_and_colours_no_id(monkeypatch: pytest.MonkeyPatch) -> None:
    record = lm_sweep(2)
    record.sweep_id = "dlrm_quick-20261126-041004-6a57"
    record.memory_ceiling_bytes = 256 * 2**20
    console = Console(width=100, record=True, file=io.StringIO(), force_terminal=True, color_system="standard")
    monkeypatch.setattr(sweep_cli, "out", console)
    sweep_cli._print_summary(record)
    lines = console.export_text(clear=False).splitlines()
    assert_fits_and_keeps_words(lines, "ceiling 256 MiB · reference", "elastune train --from-sweep " + record.sweep_id)
    styled = console.export_text(styles=True).splitlines()
    footer = [line for line in styled if "ceiling" in line or "--from-sweep" in line]
    assert len(footer) == 2 and not any("\x1b[" in line for line in footer), footer  # no number colours
    wide = Console(width=160, record=True, file=io.StringIO(), color_system=None)  # a pipe: one line
    monkeypatch.setattr(sweep_cli, "out", wide)
    sweep_cli._print_summary(record)
    assert f"best_config.yaml): elastune train --from-sweep {record.sweep_id}" in wide.export_text()


def test_eta_needs_a_finished_unit_then_counts_the_running_the_waiting_and_the_slots() -> None:
    assert eta_s([], running=[5.0, 5.0], waiting=6, concurrency=2) is None  # nothing finished: no guess
    # 2 of 8 done (10 s each) at 2 at a time, the next 2 running for 3 s: 7 s, then 4 more in pairs
    assert eta_s([10.0, 10.0], running=[3.0, 3.0], waiting=4, concurrency=2) == pytest.approx(27.0)
    assert eta_s([10.0, 10.0], running=[3.0], waiting=4, concurrency=1) == pytest.approx(47.0)  # one slot
    # one running past the mean ends any moment, not minus-something
    assert eta_s([10.0], running=[14.0], waiting=0, concurrency=2) == pytest.approx(1.0)
    assert eta_s([10.0, 20.0], running=[], waiting=0, concurrency=2) == 0.0  # nothing left
    assert eta_text(None) == "" and eta_text(27.4) == "eta 0:00:27" and eta_text(3725) == "eta 1:02:05"


def test_the_stage_clock_counts_down_between_trials() -> None:
    now = [0.0]
    units = StageClock(concurrency=2, clock=lambda: now[0])
    units.started("a"), units.started("b")
    now[0] = 10.0
    assert units.eta(8, 0) is None
    units.ended("a"), units.ended("b"), units.started("c"), units.started("d")
    now[0] = 13.0
    assert units.eta(8, 2) == pytest.approx(27.0)
    now[0] = 15.0  # no trial ended: the estimate still moves
    assert units.eta(8, 2) == pytest.approx(25.0)
    assert units.eta(None, 0) is None  # a stage of unknown length
    assert units.eta(8, 8) is None  # nor one that is through
    units.started("c")  # seen pending first, then Tune's start: the first time counts
    units.ended("c"), units.started("c")  # and one that ended does not start again
    # c took 5 s (from its first start), so the mean is 25/3 s: d has 10/3 s left, the 4 waiting go in pairs
    assert units.eta(8, 3) == pytest.approx(20.0)


def test_the_live_rows_show_no_eta_until_there_is_one_and_it_counts_down() -> None:
    now = [0.0]
    display = LiveDisplay(terminal(), clock=lambda: now[0])
    display.stage("reference", None)
    now[0] = 3.0
    reference = live_row(display)
    assert "reference" in reference and "eta" not in reference and "?" not in reference and "-:--" not in reference
    display.stage("confirmation", 6)
    display.started("confirm-1-reference")
    display.status(0, "round 1: the reference")
    assert "eta" not in live_row(display) and "-:--" not in live_row(display)
    now[0] = 8.0
    display.ended("confirm-1-reference")
    display.started("confirm-1-abc")
    display.status(1, "round 1: trial 7")
    now[0] = 9.0
    assert "eta 0:00:24" in live_row(display)  # 4 s of this run, then 4 more of 5 s, one at a time
    now[0] = 11.0
    assert "eta 0:00:22" in live_row(display)  # redrawn, no status call between
    display.close()


def test_a_plain_status_line_carries_the_eta_once_there_is_one() -> None:
    lines: list[str] = []
    now = [0.0]
    display = PlainDisplay(lines.append, every_s=10, clock=lambda: now[0])
    display.stage("search", 4, concurrency=2)
    display.started("a"), display.started("b")
    display.status(0, "running 2", force=True)
    now[0] = 6.0
    display.ended("a")
    display.status(1, "running 1", force=True)
    display.status(1, "", force=True)  # nothing to say beside the count: no empty part
    assert lines == ["  search 0/4 · running 2", "  search 1/4 · running 1 · eta 0:00:07", "  search 1/4 · eta 0:00:07"]


def test_wrap_breaks_at_spaces_only_and_indents_the_rest() -> None:
    text = "confirmed best: trial 7, 2.16x the reference (rounds 2.04x-2.29x) " + f"long{KEEP}name=value " * 8
    lines = wrap(text, 60)
    assert all(len(line) <= 60 for line in lines) and all(line.startswith("    ") for line in lines[1:])
    assert "2.04x-2.29x" in "".join(lines) and all("long name=value" in line for line in lines[1:])
    assert wrap("short", 100) == ["short"] and wrap("a\nb", 100) == ["a", "b"]
