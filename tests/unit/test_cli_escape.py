"""Nothing read back from the MLflow store reaches the terminal raw: a sweep planted in a real
SQLite store with an id, parameters and errors full of rich markup and terminal escape sequences
is listed (`elastune sweeps`), shown (`elastune results`) and quoted in an error with neither an
escape byte nor a markup error, its text shown literally; `--format json` stays strict JSON with
the values intact; a resumed sweep's console replays stored trials without them too."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.tracking.mlflow import SweepTracker
from elastune.tracking.records import TrialRecord
from elastune.tuning.display import LiveDisplay, PlainDisplay
from elastune.tuning.progress import trial_line
from rich.console import Console

from tests.unit.test_tracking_mlflow import make_sweep, record_sweep

# An OSC sequence that retitles the terminal, a colour, and a closing tag rich would choke on.
HOSTILE_ID = "x[/bold]\x1b]0;pwned\x07\x1b[31m"
SHOWN_ID = "x[/bold]]0;pwned[31m"  # what a reader sees: the text, without ESC and BEL
HOSTILE_VALUE = "full\x1b[2J[bold]\x9b31m"  # an erase, markup, an 8-bit CSI
HOSTILE_ERROR = "boom\x1b]0;pwned\x07\nFake line\x1b[0m"
CONTROLS = ("\x1b", "\x07", "\x9b")
# The writer draws the planted ids into the sweep's pareto.png, whose font has no glyph for a control.
pytestmark = pytest.mark.filterwarnings("ignore:Glyph .* missing from font:UserWarning")


def planted(tmp_path: Path) -> str:
    """A store whose only sweep was written by someone hostile (through elastune's own writer,
    which takes any id: the store is where ids come from, not a command line)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = make_sweep(HOSTILE_ID)
    for trial in record.trials:
        trial.params = {"embedding.strategy": HOSTILE_VALUE, "batch.micro\x1b[8m": 64}
        if trial.error is not None:
            trial.error = HOSTILE_ERROR
    record_sweep(SweepTracker(uri), record)
    return uri


def assert_clean(text: str) -> None:
    for control in CONTROLS:
        assert control not in text, repr(text)


def test_sweeps_and_results_show_stored_text_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = planted(tmp_path)

    assert main(["sweeps", "--tracking-uri", uri]) == 0
    listed = capsys.readouterr()
    assert_clean(listed.out + listed.err)
    assert SHOWN_ID in listed.out

    assert main(["results", "--tracking-uri", uri]) == 0
    said = capsys.readouterr()
    assert_clean(said.out + said.err)
    assert f"the newest finished sweep: {SHOWN_ID}" in said.err
    assert f"sweep {SHOWN_ID} (finished)" in said.out  # the title
    assert "strategy=full[2J[bold]31m" in said.out  # a stored parameter, as text
    assert "micro[8m=64" in said.out  # and its stored name
    assert "failed 1" in said.out  # the footer's counts
    # the command to paste, quoted for a shell
    assert f"elastune train --from-sweep '{SHOWN_ID}'" in " ".join(said.out.split())

    assert main(["results", "--tracking-uri", uri, "--wide", "--all"]) == 0  # every trial, its id in a column
    said = capsys.readouterr()
    assert_clean(said.out + said.err)
    assert f"sweep {SHOWN_ID} (finished)" in said.out and "│ x[/bold]]0;pwned[31m_" in said.out  # a trial id


def test_json_output_keeps_the_stored_values_and_stays_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = planted(tmp_path)

    def strict(text: str) -> object:
        def refuse(constant: str) -> None:
            raise ValueError(f"not JSON: {constant}")

        return json.loads(text, parse_constant=refuse)  # NaN or Infinity would be refused

    assert main(["sweeps", "--tracking-uri", uri, "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert_clean(out)  # json.dumps writes \u001b: the bytes never reach the terminal
    assert [s["sweep_id"] for s in strict(out)] == [HOSTILE_ID]  # type: ignore[union-attr, index]
    assert main(["results", "--tracking-uri", uri, "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    report = strict(out)
    assert report["sweep_id"] == HOSTILE_ID  # type: ignore[index, call-overload]
    assert {t["params"]["embedding.strategy"] for t in report["trials"]} == {HOSTILE_VALUE}  # type: ignore[index, call-overload]


def test_an_error_quoting_stored_ids_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = planted(tmp_path)
    assert main(["results", "no-such-sweep", "--tracking-uri", uri]) == 2
    said = capsys.readouterr().err
    assert_clean(said)
    assert f"known sweeps, newest first: {SHOWN_ID}" in said


def stored_trial() -> TrialRecord:
    return TrialRecord(
        trial_id=HOSTILE_ID,
        number=4,
        status="failed",
        params={"embedding.strategy": HOSTILE_VALUE},
        config={},
        error=HOSTILE_ERROR,
    )


def test_a_resumed_sweeps_console_replays_stored_trials_clean() -> None:
    line = trial_line(stored_trial())  # what a resume prints for a trial it reads back
    console = Console(width=100, record=True, file=io.StringIO(), force_terminal=True, color_system=None)
    live = LiveDisplay(console)
    live.line(line)
    live.stage("search", 8)
    live.status(1, f"best 9/s (trial {HOSTILE_ID})")
    live.close()
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x07" not in shown and "\x9b" not in shown and "]0;pwned" in shown
    assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\x1b[31m" not in shown  # rich's own codes aside
    assert "trial 4 failed: boom]0;pwned Fake line[0m" in console.export_text()  # one line: no planted break

    lines: list[str] = []
    plain = PlainDisplay(lines.append)
    plain.line(line)
    plain.stage("search", 8)
    plain.status(1, f"best 9/s (trial {HOSTILE_ID})", force=True)
    assert len(lines) == 2 and all("\n" not in text for text in lines)
    for text in lines:
        assert_clean(text)
    assert lines[0].startswith("trial 4 failed: boom]0;pwned Fake line[0m · strategy=full[2J[bold]31m")
