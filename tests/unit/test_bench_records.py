"""bench/RESULTS.md is rendered from the records in bench/records/, so the two cannot drift, and a
record without what makes a figure worth quoting (machine, commit, date, command) is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench_modules(monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    monkeypatch.syspath_prepend(str(BENCH))
    import record
    import render

    return record, render


def test_results_md_is_what_the_records_render_to() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "render.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = (BENCH / "RESULTS.md").read_text().splitlines()
    benchmarks = sum(line.startswith("## ") for line in lines)
    assert len(lines) < 20 + 16 * benchmarks  # short: a header, then one table per benchmark


def test_every_record_names_its_machine_commit_date_and_command(bench_modules: tuple[object, object]) -> None:
    record, _ = bench_modules
    for path in sorted((BENCH / "records").glob("*.json")):
        r = record.load_record(path)  # type: ignore[attr-defined]
        assert r.machine and r.date and r.command and r.figures, path.name
        assert r.commit or r.source != "run", f"{path.name}: a run's record must name its commit"


@pytest.mark.parametrize("missing", ["machine", "commit", "date", "command", "figures"])
def test_a_record_missing_a_required_field_is_refused_by_name(
    missing: str, tmp_path: Path, bench_modules: tuple[object, object]
) -> None:
    record, render = bench_modules
    path = record.write_record(  # type: ignore[attr-defined]
        "unit-test",
        "A test",
        [record.Figure("speed", 1.0, "x", ">= 1", True)],
        folder=tmp_path,  # type: ignore[attr-defined]
    )
    assert "## A test (`unit-test`)" in render.render(tmp_path)  # type: ignore[attr-defined]
    data = json.loads(path.read_text())
    data[missing] = [] if missing == "figures" else None
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"{path.name}: not a benchmark record, missing {missing}"):
        render.render(tmp_path)  # type: ignore[attr-defined]


def test_a_missed_target_is_said_in_bold_and_a_pipe_cannot_break_the_table(
    tmp_path: Path, bench_modules: tuple[object, object]
) -> None:
    record, render = bench_modules
    figures = [record.Figure("max |error|", 0.2, "", "<= 0.1", False)]  # type: ignore[attr-defined]
    record.write_record("unit-test", "A test", figures, folder=tmp_path)  # type: ignore[attr-defined]
    text = render.render(tmp_path)  # type: ignore[attr-defined]
    assert "| max \\|error\\| | 0.2 | <= 0.1 | **missed** |" in text
