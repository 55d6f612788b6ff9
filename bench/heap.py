"""The two CPU heap regimes, side by side: the default CPU probe's (training/probe.py `pin_heap`:
blocks under 32 MiB from a heap that is never trimmed) and EDO's virtual device's (`VirtualProbe`:
every block of 256 KiB or more mapped on allocation and returned on free).

The pinned heap is the faster: a steady run reuses its blocks and pays no page faults. Its
resident peak is not reproducible, though: a big block finds a hole or extends the heap at a step
that differs run to run, and where block sizes vary (an LM with dynamic padding) the heap fragments
more the longer a run goes. The mapped regime's peak follows the live tensors, so identical runs
agree within a few MiB and the estimator can be held to it, but every fresh mapping pays its page
faults. This benchmark measures both, interleaved (pinned, mapped, pinned, mapped, ...), each run
a fresh process: samples/s (the median of the rounds) and the peak of every run, each as its probe
reports it: the pinned one the whole resident set (as `elastune train` does), the mapped one
anonymous memory only (the virtual device leaves out the pages of code a run faults in, 5-20 MiB
of a first run; records before 2026-11-26 09:00 counted them in both).

    python bench/heap.py                   # 2 rounds, 120 steps a run
    python bench/heap.py --rounds 3 --steps 200

Writes its record to bench/records/ (`heap-cpu`); `python bench/render.py` updates RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

from estimator import LM_SHAPE  # the LM benchmark shape, one definition for both benchmarks

_LM = ["workload=lm", LM_SHAPE, "model.embedding_dim=64", "eval.samples=1024"]
CONFIGS: list[tuple[str, list[str]]] = [
    ("dlrm default", []),
    ("two_tower default", ["workload=two_tower"]),
    ("lm static micro 32", [*_LM, "batch.micro=32"]),
    (
        "lm dynamic buckets micro 16",
        [*_LM, "batch.micro=16", "workload_options.padding=dynamic", "workload_options.bucket_by_length=true"],
    ),
]
REGIMES = ("pinned", "mapped")

# One run in a fresh process: the default CPU probe (pinned heap) or the virtual device (mapped blocks)
RUN = """
import json, sys
from elastune.training.loop import train
from elastune.training.probe import CpuProbe, VirtualProbe
from elastune.validate import load_run_config
regime, sets = sys.argv[1], sys.argv[2:]
probe = CpuProbe() if regime == "pinned" else VirtualProbe(CpuProbe().total_bytes())
result = train(load_run_config(None, sets), probe=probe)
print(json.dumps({"samples_per_s": result.samples_per_s, "peak_bytes": result.peak_memory_bytes}))
"""


def run(regime: str, sets: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", RUN, regime, *sets], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{regime} {sets}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (each: every config, both regimes)")
    parser.add_argument("--steps", type=int, default=120, help="training steps a run")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    common = [f"steps={args.steps}", "warmup_steps=10", "device=cpu"]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for label, sets in CONFIGS:
            for regime in REGIMES:
                r = run(regime, [*common, *sets])
                runs.setdefault((label, regime), []).append(r)
                print(
                    f"round {round_} {label:28} {regime:6} {r['samples_per_s']:10,.0f} samples/s  "
                    f"peak {r['peak_bytes'] / 2**20:7.1f} MiB",
                    file=sys.stderr,
                    flush=True,
                )
    rows, ratios = [], []
    for label, _ in CONFIGS:
        rate = {g: statistics.median(r["samples_per_s"] for r in runs[(label, g)]) for g in REGIMES}
        peaks = {g: [round(r["peak_bytes"] / 2**20, 1) for r in runs[(label, g)]] for g in REGIMES}
        ratio = rate["mapped"] / rate["pinned"]
        ratios.append((label, ratio))
        rows.append(
            [label, round(rate["pinned"]), round(rate["mapped"]), round(ratio, 2), peaks["pinned"], peaks["mapped"]]
        )
        print(
            f"{label:28} mapped/pinned samples/s {ratio:.2f}x  peaks pinned {peaks['pinned']} mapped {peaks['mapped']}"
        )
    _record(args, rows, ratios)


def _record(args: argparse.Namespace, rows: list[list[Any]], ratios: list[tuple[str, float]]) -> None:
    from record import Figure, write_record

    write_record(
        "heap-cpu",
        "CPU heap regimes: the default probe's pinned heap against the virtual device's mapped blocks",
        [
            Figure(f"{label}: mapped vs pinned samples/s", round(ratio, 2), "x", note="same run")
            for label, ratio in ratios
        ],
        settings={"rounds": args.rounds, "steps": args.steps, "order": "interleaved, a fresh process per run"},
        table={
            "columns": [
                "config",
                "pinned samples/s",
                "mapped samples/s",
                "mapped / pinned",
                "pinned peaks MiB",
                "mapped peaks MiB",
            ],
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
