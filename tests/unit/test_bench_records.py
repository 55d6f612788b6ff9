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
        allow_dirty=True,
    )
    assert "## A test (`unit-test`)" in render.render(tmp_path)  # type: ignore[attr-defined]
    data = json.loads(path.read_text())
    data[missing] = [] if missing == "figures" else None
    data["digest"] = record.digest(data)  # type: ignore[attr-defined]  # as a script that left it out would
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"{path.name}: not a benchmark record, missing {missing}"):
        render.render(tmp_path)  # type: ignore[attr-defined]


def test_a_missed_target_is_said_in_bold_and_a_pipe_cannot_break_the_table(
    tmp_path: Path, bench_modules: tuple[object, object]
) -> None:
    record, render = bench_modules
    figures = [record.Figure("max |error|", 0.2, "", "<= 0.1", False)]  # type: ignore[attr-defined]
    record.write_record("unit-test", "A test", figures, folder=tmp_path, allow_dirty=True)  # type: ignore[attr-defined]
    text = render.render(tmp_path)  # type: ignore[attr-defined]
    assert "| max \\|error\\| | 0.2 | <= 0.1 | **missed** |" in text


def test_an_edited_record_is_refused_and_says_where_hand_notes_go(
    tmp_path: Path, bench_modules: tuple[object, object]
) -> None:
    record, render = bench_modules
    figures = [record.Figure("speed", 1.0, "x", ">= 1", True)]  # type: ignore[attr-defined]
    path = record.write_record("unit-test", "A test", figures, folder=tmp_path, allow_dirty=True)  # type: ignore[attr-defined]
    render.render(tmp_path)  # type: ignore[attr-defined]  # as written: accepted
    data = json.loads(path.read_text())
    data["notes"].append("annotated by hand after the run: it was a fluke")
    path.write_text(json.dumps(data, indent=1))
    with pytest.raises(ValueError, match=f"{path.name}: edited after its run .*{path.stem}.notes.md"):
        render.render(tmp_path)  # type: ignore[attr-defined]
    data["notes"].pop()
    path.write_text(json.dumps(data, indent=1))
    (tmp_path / f"{path.stem}.notes.md").write_text("- it was a fluke\n")
    assert f"[{path.stem}.notes.md](records/{path.stem}.notes.md)" in render.render(tmp_path)  # type: ignore[attr-defined]


# Records written before records carried their digest (2026-11-27); every later one must carry it
BEFORE_DIGESTS = {
    "estimator-zoo-cpu-20261127-020503-e031c53.json",
    "estimator-zoo-refit-20261127-020802-0dbcc04.json",
    "tuner-seeds-20261127-025214-b4b604c.json",
    "mutation-20261127-034044-5c6e004.json",
}


def test_every_new_record_carries_its_digest_and_no_hand_notes(bench_modules: tuple[object, object]) -> None:
    for path in sorted((BENCH / "records").glob("*.json")):
        data = json.loads(path.read_text())
        if data.get("digest") is None:
            assert data["date"] < "2026-11-27" or path.name in BEFORE_DIGESTS, f"{path.name}: no digest"
        assert not any("by hand" in note for note in data.get("notes", [])), f"{path.name}: hand notes inside"


def test_a_dirty_tree_is_refused_before_the_run_unless_allowed(tmp_path: Path) -> None:
    """A real git checkout with bench/record.py in it: clean, the record is written unmarked; with
    a tracked file changed, a script stops (exit 2, naming the fix) and writes nothing; with
    --allow-dirty it runs and the record says dirty."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "record.py").write_text((BENCH / "record.py").read_text())
    script = repo / "bench" / "demo.py"
    script.write_text(
        "import argparse\n"
        "from record import Figure, add_arguments, refuse_dirty, write_record\n"
        "parser = argparse.ArgumentParser()\n"
        "add_arguments(parser)\n"
        "args = parser.parse_args()\n"
        "refuse_dirty(args.allow_dirty)\n"
        "write_record('demo', 'Demo', [Figure('speed', 1.0)])\n"
    )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "demo"], check=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env)

    assert run().returncode == 0
    (clean,) = (repo / "bench" / "records").glob("*.json")
    assert json.loads(clean.read_text())["dirty"] is False
    clean.unlink()
    script.write_text(script.read_text() + "# changed\n")
    refused = run()
    assert refused.returncode == 2, refused.stderr
    assert "uncommitted changes" in refused.stderr and "--allow-dirty" in refused.stderr
    assert not list((repo / "bench" / "records").glob("*.json"))
    assert run("--allow-dirty").returncode == 0
    (dirty,) = (repo / "bench" / "records").glob("*.json")
    assert json.loads(dirty.read_text())["dirty"] is True


def test_every_cpu_benchmarks_current_record_is_a_clean_run(bench_modules: tuple[object, object]) -> None:
    """Only a GPU figure may stand on a transcribed record or one from a tree with uncommitted
    changes (a GPU machine is lent at times; this machine is always here to re-measure on)."""
    _, render = bench_modules
    unclean = []
    for name, history in render.histories().items():  # type: ignore[attr-defined]
        path, current = history[-1]
        if current.machine.get("gpu"):
            continue
        if current.source != "run":
            unclean.append(f"{name}: its current record {path.name} is {current.source}")
        elif current.dirty is not False:
            unclean.append(f"{name}: its current record {path.name} comes from a dirty tree")
    assert not unclean, "\n".join(unclean)
