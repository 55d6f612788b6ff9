"""Parity: is the winner you run the winner the sweep measured?

Runs a sweep (default search_spaces/dlrm_quick.yaml, its confirmation stage included) into a
throw-away MLflow store, then reruns its best config with `elastune train --from-sweep` (the
trial's threads, as the command does by default) and the reference config, interleaved, on an
otherwise idle machine. Two comparisons:

- absolute: the reruns' samples/s against the best trial's own timed windows (its 25th-75th
  percentile): a trial ran beside a neighbour (`max_concurrent`), a rerun alone, so this one may
  differ for a reason the record names;
- relative: the reruns' ratio best / reference against the confirmation stage's interval for the
  best (its lowest and highest round), measured the same way: one run at a time.

    python bench/parity.py                      # writes a record (bench/records/)
    python bench/parity.py --reruns 5 --spec search_spaces/lm_quick.yaml
    python bench/parity.py --max-concurrent 1   # the trials alone too: absolute figures comparable
    python bench/parity.py --gpus-per-trial 0.5  # on a GPU: two trials per GPU, sharing it under EDO

`--set`, `--max-trials` and `--gpus-per-trial` go to the sweep as they are (bench/gpu.sh's dry run
shrinks it with them). The record also lists every trial: its predicted peak (the screen) against
its measured one, so a GPU run shows the sweep screening on CUDA predictions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from record import ROOT, Figure, write_record

ELASTUNE = [sys.executable, "-m", "elastune.cli"]
COLUMNS = ["trial / rerun", "status", "params", "peak MiB predicted / measured", "samples/s", "probe", "error"]


def _run(args: list[str], env: dict[str, str], log: Path | None = None) -> str:
    """`elastune ARGS`'s standard output; its standard error goes to `log` as it is written (a run
    cut short by a time limit still shows how far it got), else is kept for the error."""
    with open(log, "a") if log else contextlib.nullcontext() as err:
        done = subprocess.run(
            [*ELASTUNE, *args], stdout=subprocess.PIPE, stderr=err or subprocess.PIPE, text=True, env=env, check=False
        )
    if done.returncode != 0:
        tail = done.stderr[-3000:] if done.stderr else f"(its standard error: {log})"
        raise RuntimeError(f"elastune {' '.join(args)}: exit {done.returncode}\n{tail}")
    return done.stdout


def _windows_median(result: dict[str, Any]) -> float:
    """`elastune train --format json`'s timed windows past warm-up, their median (the whole run's
    rate where it had no full window)."""
    steady = result["window_samples_per_s"][result["warmup_windows"] :]
    return statistics.median(steady) if steady else float(result["samples_per_s"])


def _sweep_options(args: argparse.Namespace) -> list[str]:
    options = [f"--set={kv}" for kv in args.set]
    for flag, value in [
        ("--max-concurrent", args.max_concurrent),
        ("--gpus-per-trial", args.gpus_per_trial),
        ("--max-trials", args.max_trials),
    ]:
        options += [flag, str(value)] if value is not None else []
    return options


def _mib(n: int | None) -> str:
    return f"{n / 2**20:.0f}" if n else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=str(ROOT / "search_spaces" / "dlrm_quick.yaml"))
    parser.add_argument("--reruns", type=int, default=3)
    parser.add_argument(
        "--max-concurrent", type=int, help="the sweep's trials at a time (1: each trial alone, as its rerun is)"
    )
    parser.add_argument("--gpus-per-trial", type=float, help="the sweep's GPUs per trial (below 1 shares a GPU)")
    parser.add_argument("--max-trials", type=int, help="the sweep's proposals")
    parser.add_argument("--set", action="append", default=[], help="a sweep override KEY=VALUE (repeatable)")
    parser.add_argument("--log", type=Path, help="append the sweep's and the reruns' standard error here, as written")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)

    from elastune.tracking.mlflow import load_sweep

    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        env = {**os.environ, "ELASTUNE_HOME": folder, "MLFLOW_TRACKING_URI": uri}
        out = _run(["sweep", args.spec, "--format", "json", *_sweep_options(args)], env, args.log)
        # the JSON summary is the last thing printed (Ray and Tune print lines of their own before it)
        sweep_id = json.loads(out[out.rindex("\n{") + 1 if "\n{" in out else out.index("{") :])["sweep_id"]
        record = load_sweep(sweep_id, uri)
        best = record.best()
        reference = next(t for t in record.trials if t.trial_id == "reference")
        assert best is not None and best.samples_per_s is not None
        ref_file = Path(folder) / "reference.yaml"
        ref_file.write_text(yaml.safe_dump(reference.config))
        best_rates, ratios = [], []
        for _ in range(args.reruns):
            ref = json.loads(_run(["train", str(ref_file), "--format", "json"], env, args.log))
            run = json.loads(_run(["train", "--from-sweep", sweep_id, "--format", "json"], env, args.log))
            # like for like: the trial's spread is its windows' quartiles, so a rerun counts its windows' median
            best_sps, ref_sps = _windows_median(run), _windows_median(ref)
            best_rates.append(best_sps)
            ratios.append(best_sps / ref_sps)
            print(f"rerun: best {best_sps:,.0f} samples/s, reference {ref_sps:,.0f}", flush=True)
    concurrent = args.max_concurrent or yaml.safe_load(Path(args.spec).read_text())["budget"]["max_concurrent"]
    alone = concurrent == 1
    low, mid, high = best.samples_per_s_quartiles or [best.samples_per_s] * 3
    rerun = statistics.median(best_rates)
    c_low, c_median, c_high = best.confirmed_speedup or [float("nan")] * 3
    ratio = statistics.median(ratios)
    figures = [
        Figure(
            "rerun vs its trial, samples/s: windows' medians (trial's windows p25-p75)",
            f"{rerun:,.0f} vs {mid:,.0f} ({low:,.0f}-{high:,.0f})",
            target="rerun inside the trial's p25-p75",
            met=low <= rerun <= high,
            note="the trial and the rerun each alone"
            if alone
            else f"the trial ran beside a neighbour (max_concurrent {concurrent}), the rerun alone",
        ),
        Figure(
            "rerun ratio best/reference vs the confirmation stage's",
            f"{ratio:.2f}x vs {c_median:.2f}x ({c_low:.2f}-{c_high:.2f})",
            target="rerun ratio inside the confirmed rounds' range",
            met=best.confirmed_speedup is not None and c_low <= ratio <= c_high,
            note="both one run at a time, the reference interleaved",
        ),
    ]
    device = "cuda" if args.gpus_per_trial else "cpu"
    spec = Path(args.spec).stem
    settings: dict[str, Any] = {
        "spec": os.path.relpath(args.spec, ROOT),
        "reruns": args.reruns,
        "sweep": sweep_id,
        "max_concurrent": concurrent,
        "gpus_per_trial": args.gpus_per_trial,
        "max_trials": args.max_trials,
        "set": args.set,
        "counts": record.counts(),
    }
    pairs = enumerate(zip(best_rates, ratios, strict=True))
    reruns = [[f"rerun {i + 1}", "", "", "", round(r), round(q, 3), ""] for i, (r, q) in pairs]
    trials = [
        [t.trial_id, t.status, json.dumps(t.params), f"{_mib(t.estimated_peak_bytes)} / {_mib(t.peak_memory_bytes)}",
         round(t.samples_per_s) if t.samples_per_s else "-", t.peak_memory_kind or "-", (t.error or "")[:300]]
        for t in record.trials
    ]  # fmt: skip
    write_record(
        f"parity-{device}" if spec == "dlrm_quick" else f"parity-{spec}-{device}",
        "Parity: the best config rerun with --from-sweep against its trial and its confirmation"
        + (f" ({spec})" if spec != "dlrm_quick" else ""),
        figures,
        settings=settings,
        device=device,
        table={
            "columns": COLUMNS,
            "rows": trials + reruns,
        },
        notes=[f"best trial {best.trial_id}: {best.params}; threads {best.config.get('threads')}"],
    )


if __name__ == "__main__":
    main()
