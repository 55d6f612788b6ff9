"""One JSON record per benchmark run, in bench/records/: what ran (command, settings), where (the
machine, with the CPU flags that decide speed and the GPU), on which code (commit, dirty or not),
when, and the figures, each against its target where the benchmark has one.

`bench/render.py` turns the newest record of each benchmark into bench/RESULTS.md; the records are
the history. Every bench script ends with `write_record(...)`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
) -> Path:
    """Write this run's record and say where; returns its path."""
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
    path.write_text(json.dumps(record.to_dict(), indent=1, ensure_ascii=False) + "\n")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"record: {shown} (render bench/RESULTS.md: python bench/render.py)", file=sys.stderr)
    return path


def load_record(path: Path) -> Record:
    """A record file, checked: every required field present; says which file and field otherwise."""
    data = json.loads(path.read_text())
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
