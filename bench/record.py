"""One JSON record per benchmark run, in bench/records/: what ran (command, settings), where (the
machine, with the CPU flags that decide speed and the GPU), on which code (commit, dirty or not),
when, and the figures, each against its target where the benchmark has one.

`bench/render.py` turns the newest record of each benchmark into bench/RESULTS.md; the records are
the history. Every bench script ends with `write_record(...)`.

A record is what its script wrote, nothing else: it carries the sha256 of its own content
(`digest`), so an edit after the run is refused when it is read. What a person learns afterwards
goes in a notes file beside it (`NAME.notes.md`), which bench/RESULTS.md links. A run from a tree
with uncommitted changes cannot say which code it measured: every script refuses to start in one
(exit 2) unless given `--allow-dirty`, and such a record says `"dirty": true`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# bench/gpu.sh --dry-run points this elsewhere: a dry run's figures are not results
RECORDS = Path(os.environ.get("ELASTUNE_BENCH_RECORDS") or Path(__file__).resolve().parent / "records")
ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("benchmark", "title", "command", "date", "commit", "machine", "figures")


@dataclass
class Figure:
    """One headline figure: `value` in `unit`, against `target` (text such as ">= 0.90"; None: no
    target), `met` True/False/None (no target)."""

    name: str
    value: float | int | str | None
    unit: str = ""
    target: str | None = None
    met: bool | None = None
    note: str = ""


@dataclass
class Record:
    benchmark: str  # one key per benchmark and device, e.g. "estimator-cpu"
    title: str
    command: str
    date: str  # ISO date (UTC)
    commit: str | None
    machine: dict[str, Any]
    figures: list[Figure]
    settings: dict[str, Any] = field(default_factory=dict)
    dirty: bool | None = None  # uncommitted changes in the tree the benchmark ran from
    source: str = "run"  # "run", or where a figure was transcribed from
    notes: list[str] = field(default_factory=list)
    table: dict[str, Any] | None = None  # {"columns": [...], "rows": [[...]]}: the per-config detail
    digest: str | None = None  # sha256 of the rest of the record as written (records before 2026-11-27 have none)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class DirtyTree(RuntimeError):
    """The checkout has uncommitted changes to tracked files and `--allow-dirty` was not given."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every bench script that writes a record takes."""
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run and write the record although tracked files have uncommitted changes (the record says so)",
    )


_allow_dirty = False  # what the script's --allow-dirty said (refuse_dirty), for write_record


def refuse_dirty(allow_dirty: bool) -> None:
    """Stop before a benchmark runs (exit 2) when its record would not name the code it measured;
    `write_record` then follows the same choice."""
    global _allow_dirty
    _allow_dirty = allow_dirty
    try:
        check_clean(allow_dirty)
    except DirtyTree as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def check_clean(allow_dirty: bool) -> None:
    # ELASTUNE_BENCH_ALLOW_DIRTY=1: --allow-dirty for every script a driver runs (bench/gpu.sh's dry run)
    if allow_dirty or os.environ.get("ELASTUNE_BENCH_ALLOW_DIRTY") == "1":
        return
    _, dirty = commit()
    if dirty:
        raise DirtyTree(
            "tracked files have uncommitted changes, so the record could not say which code ran: commit "
            "them, run from a clean worktree (git worktree add --detach /tmp/benchtree HEAD), or pass "
            "--allow-dirty (the record is then marked dirty)"
        )


def digest(data: dict[str, Any]) -> str:
    """The sha256 of a record's content without its digest field (canonical JSON)."""
    content = {key: value for key, value in data.items() if key != "digest"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def notes_path(path: Path) -> Path:
    """Where notes written by hand about the record at `path` go."""
    return path.with_name(path.stem + ".notes.md")


def machine(device: str | None = None) -> dict[str, Any]:
    """This machine as a benchmark sees it."""
    cpu = _cpuinfo()
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "cpu": cpu.get("model name"),
        "cpu_flags": None,  # precision.SPEED_FLAGS present (those that decide bf16/fp16 speed), read below
        "python": platform.python_version(),
        "gpu": None,
    }
    try:
        import torch
        from elastune.training.precision import cpu_speed_flags

        flags = cpu_speed_flags()
        info["cpu_flags"] = list(flags) if flags is not None else None
        info["torch"] = torch.__version__
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if (device or "").startswith("cuda") and torch.cuda.is_available():
            index = torch.device(device or "cuda").index or 0
            info["gpu"] = f"{torch.cuda.get_device_name(index)} (CUDA {torch.version.cuda})"
    except ImportError:
        pass
    for package in ("ray", "optuna", "mlflow", "pyarrow"):
        with contextlib.suppress(ImportError):
            info[package] = __import__(package).__version__
    return info


TRAIN_JSON = [sys.executable, "-m", "elastune.cli", "train", "--format", "json"]


def run_json(command: list[str], sets: Sequence[str] = ()) -> dict[str, Any]:
    """`command` (with `--set ITEM` for each of `sets`) in a fresh process, whose standard output is
    one JSON object: that object. Where it fails, the error names the command, the exit status and
    the tail of its standard error."""
    args = [*command, *(arg for item in sets for arg in ("--set", item))]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(args[1:])}: exit {done.returncode}\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def commit() -> tuple[str | None, bool | None]:
    """The checkout's commit and whether its tracked files have uncommitted changes. Where the
    checkout's git folder is not the tree's (a copy sent to a GPU machine once reported an older
    commit), ELASTUNE_BENCH_COMMIT names it: the sender's `git rev-parse HEAD` of a clean tree."""
    if os.environ.get("ELASTUNE_BENCH_COMMIT"):
        return os.environ["ELASTUNE_BENCH_COMMIT"], False
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return sha.stdout.strip(), bool(status.stdout.strip())


def write_record(
    benchmark: str,
    title: str,
    figures: list[Figure],
    *,
    settings: dict[str, Any] | None = None,
    device: str | None = None,
    notes: list[str] | None = None,
    table: dict[str, Any] | None = None,
    folder: Path = RECORDS,
    allow_dirty: bool | None = None,
) -> Path:
    """Write this run's record and say where; returns its path. Raises DirtyTree where the tree has
    uncommitted changes and dirt is not allowed (`allow_dirty`; None: what the script's
    `refuse_dirty` was told at its start)."""
    check_clean(_allow_dirty if allow_dirty is None else allow_dirty)
    sha, dirty = commit()
    now = datetime.now(UTC)
    record = Record(
        benchmark=benchmark,
        title=title,
        command="python " + shlex.join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
        date=now.date().isoformat(),
        commit=sha,
        dirty=dirty,
        machine=machine(device),
        figures=figures,
        settings=settings or {},
        notes=notes or [],
        table=table,
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{benchmark}-{now:%Y%m%d-%H%M%S}-{(sha or 'nocommit')[:7]}.json"
    data = record.to_dict()
    data["digest"] = digest(data)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"record: {shown} (render bench/RESULTS.md: python bench/render.py)", file=sys.stderr)
    return path


def load_record(path: Path) -> Record:
    """A record file, checked: every required field present, and its content what the script wrote
    where it carries a digest; says which file and field otherwise."""
    data = json.loads(path.read_text())
    if data.get("digest") is not None and data["digest"] != digest(data):
        raise ValueError(
            f"{path.name}: edited after its run (its digest no longer matches): put what was added by hand "
            f"in {notes_path(path).name} beside it, and restore the record from git"
        )
    missing = [key for key in REQUIRED if data.get(key) in (None, "", [])]
    if missing and not (missing == ["commit"] and data.get("source", "run") != "run"):
        raise ValueError(f"{path.name}: not a benchmark record, missing {', '.join(missing)}")
    figures = []
    for i, raw in enumerate(data.pop("figures")):
        if "name" not in raw or "value" not in raw:
            raise ValueError(f"{path.name}: figures[{i}] needs a name and a value")
        figures.append(Figure(**raw))
    return Record(**data, figures=figures)


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n", 1)[0]
    return {m.group(1).strip(): m.group(2).strip() for m in re.finditer(r"^([^:\n]+):(.*)$", first, re.MULTILINE)}
