"""How long the CLI takes to answer where nothing is trained: `elastune --help` and `elastune config
show` (the resolved defaults, every field checked), each in a fresh process, as a user types them.
Target: under 0.7 s each (median) on this machine. `config show --check` (the components' checks:
torch and the workload's code) is timed beside them, for reference: no target.

    python bench/cli.py                 # 7 runs of each: writes a record
    python bench/cli.py --repeats 15
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.7
COMMANDS: list[tuple[str, list[str], bool]] = [  # (label, arguments, has the target)
    ("elastune --help", ["--help"], True),
    ("elastune config show", ["config", "show"], True),
    ("elastune config show --check", ["config", "show", "--check"], False),
]


def elastune() -> str:
    """The `elastune` of this interpreter's environment (the venv's)."""
    beside = Path(sys.executable).with_name("elastune")
    found = str(beside) if beside.exists() else shutil.which("elastune")
    if found is None:
        raise SystemExit("no `elastune` command beside this Python or on PATH: run `make install` first")
    return found


def time_once(argv: list[str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command (fresh processes)")
    from record import Figure, add_arguments, refuse_dirty, write_record

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    command = elastune()
    time_once([command, "--help"])  # the first run reads the files from disk: not what a user meets twice
    times: dict[str, list[float]] = {label: [] for label, _, _ in COMMANDS}
    for _ in range(args.repeats):  # interleaved, so a busy moment hits every command alike
        for label, argv, _ in COMMANDS:
            times[label].append(time_once([command, *argv]))
    figures = []
    for label, _, has_target in COMMANDS:
        median = statistics.median(times[label])
        spread = f"{min(times[label]):.2f}-{max(times[label]):.2f} s over {args.repeats} runs"
        target = f"< {TARGET_S}" if has_target else None
        met = median < TARGET_S if has_target else None
        figures.append(Figure(f"{label}: median", round(median, 3), "s", target, met, spread))
        print(f"{label:32} median {median:.2f} s ({spread})")
    write_record(
        "cli-latency",
        "The CLI's answer where nothing is trained: --help and config show, fresh processes",
        figures,
        settings={"repeats": args.repeats},
        notes=["wall clock of each command in a fresh process, from spawn to exit; the three commands interleaved"],
    )


if __name__ == "__main__":
    main()
