"""The training loop's tax, measured against a bare loop (issue 36, point 5): `elastune train` beside
a plain PyTorch loop over the same model, optimizers and batches, per config of a small suite.

Both sides build everything through elastune's own workload (workloads/registry.py `build_workload`,
`Workload.build_model`, `data_source`, training/optim.py `Optimizers`, so the sparse row-wise
optimizers and the self-updating tables are the very ones a run steps), with the same seed, dtype
(fp32) and torch threads (the config's `threads`; none: torch's default on both), in the same malloc
regime (the CPU probe pins glibc's heap, training/probe.py `pin_heap`: the bare loop pins it too).
The bare loop is `for step: forward, loss, backward, step, zero_grad`, nothing else: no DataLoader,
no micro-batch split, no loss bookkeeping, no progress reports, no checkpoint. Its batches are, per
`--bare-data` (several: comma-separated, each a column of its own):

* `materialized` (default): every step's batch read before the clock starts, so the bare loop pays
  no data cost at all; this is the comparison the >= 0.97 target is for (its batches are read long
  before their step, out of the caches: on a fast config, a batch read just before its step can
  train faster than one of these);
* `read`: each step's batch read from the source in place, between steps, as training/loop.py
  reads it, and timed (elastune's loop leaves a synthetic source's reads out of samples/s on a
  CPU, training/throughput.py: this arm shows what they would cost);
* `read-ahead`: through data/source.py's ReadAhead, which the loop does not use yet: what reading
  ahead on a thread would save a bare loop.

Both sides are timed alike: from the first step after `warmup_steps`, in windows of 10 steps (the
CLI's progress interval), the leading windows still warming up left out (training/throughput.py
`warm_up_windows`); elastune's figure is the samples/s its JSON reports. Every run is a fresh
process; the sides alternate, and which goes first alternates from round to round (A B, B A, A B,
...: `order()`), so that a machine speeding up or slowing down over the run favours neither; the
configs are interleaved too. A config's figure is the median over rounds of each round's elastune /
bare ratio. One round's ratio ranged over 0.75-1.07x on a 2-core VM, hence 6 rounds by default.

    python bench/overhead.py                          # the suite, 6 rounds: writes a record
    python bench/overhead.py --only 2,3 --rounds 8    # some configs (indices below), more rounds
    python bench/overhead.py --bare-data materialized,read,read-ahead   # where the tax comes from
    python bench/overhead.py --quick                  # a smoke test in tiny shapes: no record

The suite (index: label): 0 dlrm default; 1 dlrm micro 4096; 2 dlrm half + rowwise_adagrad; 3 dlrm
full + rowwise_adagrad; 4 lm default at micro 32 (the LM's default micro-batch of 1024 sequences
takes seconds a step on a CPU; 32 is bench/lm.py's). On a 2-core machine the suite takes about 16
minutes (the LM's runs half of it, ~30 s each); each further `--bare-data` arm adds about a half.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SUITE: list[tuple[str, list[str]]] = [
    ("dlrm default", []),
    ("dlrm micro 4096", ["batch.micro=4096"]),
    ("dlrm half + rowwise_adagrad", ["embedding.strategy=half", "optimizer.sparse=rowwise_adagrad"]),
    ("dlrm full + rowwise_adagrad", ["embedding.strategy=full", "optimizer.sparse=rowwise_adagrad"]),
    ("lm default, micro 32", ["workload=lm", "batch.micro=32", "eval.samples=512"]),
]
# Evaluation is outside the timed stretch: a smaller held-out set only saves wall time.
BASE = ["eval.samples=4096"]
# --quick: shapes that train in a second or two (tests/conftest.py's), the configs' own keys on top;
# one torch thread, so a busy machine's preempted OpenMP threads do not stall every step
QUICK = [
    "data.rows_scale=0.0005",
    "model.embedding_dim=8",
    "batch.micro=64",
    "eval.samples=256",
    "warmup_steps=5",
    "threads=1",
]
QUICK_LM = ["workload_options={layers: 1, heads: 2, context: 32, vocab: 512, mean_length: 12}", "batch.micro=16"]
WINDOW = 10  # steps per timed window: `elastune train`'s progress interval (training/loop.py's default)
BARE_DATA = ("materialized", "read", "read-ahead")
TARGET = 0.97


def overrides(config: list[str], *, steps: int, device: str, quick: bool) -> list[str]:
    """The `--set` list both sides of one config run with."""
    lm = QUICK_LM if quick and "workload=lm" in config else []  # the LM's own quick shape, over its config
    return [*BASE, *(QUICK if quick else []), *config, *lm, f"steps={steps}", f"device={device}"]


def run_elastune(sets: list[str]) -> dict[str, Any]:
    """`elastune train` in a fresh process: its JSON result."""
    from record import TRAIN_JSON, run_json

    return run_json(TRAIN_JSON, sets)


def run_bare(sets: list[str], data: str) -> dict[str, Any]:
    """The bare loop (`bare()` below) in a fresh process."""
    from record import run_json

    return run_json([sys.executable, str(Path(__file__).resolve()), "--worker", data], sets)


def steady_rate(windows: list[tuple[int, float]], samples: int, seconds: float) -> tuple[float, int]:
    """samples/s as elastune's loop reports it (training/throughput.py `Throughput.finish`): the whole
    timed stretch, or where its leading windows were still warming up, the windows after them.
    `windows`: (samples, seconds) of each full window. Returns (samples/s, warm-up windows)."""
    from elastune.training.throughput import warm_up_windows

    warmup = warm_up_windows([n / s for n, s in windows])
    if warmup:
        steady = windows[warmup:]
        return sum(n for n, _ in steady) / sum(s for _, s in steady), warmup
    return samples / seconds, 0


def bare(sets: list[str], data: str) -> dict[str, Any]:
    """Train the config in a plain PyTorch loop; its samples/s, timed as the loop times its steps."""
    import torch
    from elastune.data.batch import to_device
    from elastune.data.source import ReadAhead
    from elastune.training.optim import Optimizers
    from elastune.training.precision import resolve_device
    from elastune.training.probe import pin_heap
    from elastune.validate import load_run_config
    from elastune.workloads import build_workload

    cfg = load_run_config(None, sets)
    if cfg.precision != "fp32" or cfg.batch.accum != 1:
        raise SystemExit(
            f"the bare loop runs fp32, one micro-batch a step: precision={cfg.precision}, "
            f"batch.accum={cfg.batch.accum} would need autocast or a micro-batch split"
        )
    if cfg.steps < cfg.warmup_steps + WINDOW:
        raise SystemExit(f"steps={cfg.steps}: at least warmup_steps + {WINDOW} ({cfg.warmup_steps + WINDOW}) to time")
    if cfg.threads is not None:  # as elastune's train() does; none: torch's default on both sides
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    if device.type == "cpu":
        pin_heap()  # elastune's CPU probe does: the same malloc regime on both sides
    torch.manual_seed(cfg.seed)
    workload = build_workload(cfg)
    source = workload.data_source()
    model = workload.build_model().to(device)
    opts = Optimizers(model, cfg.optimizer)  # the run's optimizers: dense, sparse, self-updating tables
    n = cfg.batch.micro
    reader = ReadAhead(source) if data == "read-ahead" else source

    def batch_at(step: int) -> Any:
        host = workload.arrange_step(reader.read(step * n, n))
        return host if device.type == "cpu" else to_device(host, device)

    def train_step(batch: Any) -> None:
        workload.loss(model, batch).backward()
        for table in opts.self_updating:  # half, int8, cached: the tables step their own rows
            assert opts.row_update is not None
            table.sparse_step(opts.row_update, 1.0)
        for opt in opts.all:
            opt.step()
        for opt in opts.all:
            opt.zero_grad(set_to_none=True)
        for table in opts.self_updating:
            table.zero_pending()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the window's kernels, not only their launches

    ready = [batch_at(step) for step in range(cfg.steps)] if data == "materialized" else None
    model.train()
    windows: list[tuple[int, float]] = []
    start = window = 0.0
    for step in range(cfg.steps):
        if step == cfg.warmup_steps:
            start = window = time.perf_counter()
        train_step(ready[step] if ready is not None else batch_at(step))
        if step >= cfg.warmup_steps and (step + 1 - cfg.warmup_steps) % WINDOW == 0:
            sync()
            windows.append((WINDOW * n, time.perf_counter() - window))
            window = time.perf_counter()
    sync()
    seconds = time.perf_counter() - start
    if isinstance(reader, ReadAhead):
        reader.close()
    rate, warmup = steady_rate(windows, (cfg.steps - cfg.warmup_steps) * n, seconds)
    rates = [samples / s for samples, s in windows]
    threads = torch.get_num_threads()
    return {"samples_per_s": rate, "warmup_windows": warmup, "window_samples_per_s": rates, "threads": threads}


def order(sides: list[str], round_: int) -> list[str]:
    """The order the sides of a config run in, in round `round_` (from 0): as given in even rounds,
    reversed in odd ones, so that each side runs first as often as the other over an even count of
    rounds and a drift of the machine's speed cancels out of the median ratio."""
    return list(sides) if round_ % 2 == 0 else list(reversed(sides))


def summarize(runs: dict[str, list[dict[str, Any]]], arms: list[str]) -> dict[str, Any]:
    """One config's figures from its rounds: each side's median samples/s and, per bare arm, the
    median over rounds of each round's elastune / bare ratio."""
    ours = [r["samples_per_s"] for r in runs["elastune"]]
    out: dict[str, Any] = {"elastune": statistics.median(ours), "rounds": len(ours)}
    for arm in arms:
        theirs = [r["samples_per_s"] for r in runs[arm]]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        out[arm] = {"samples_per_s": statistics.median(theirs), "ratio": statistics.median(ratios), "ratios": ratios}
    return out


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=None, help="fresh-process pairs per config (default 6; quick 1)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 200; quick 30)")
    parser.add_argument("--only", help="comma-separated suite indices (see above)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, one round: a smoke test, no record")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N")
    parser.add_argument("--bare-data", default="materialized", help=f"comma-separated, of {', '.join(BARE_DATA)}")
    parser.add_argument("--json", help="also write the raw figures here")
    parser.add_argument("--worker", choices=BARE_DATA, help=argparse.SUPPRESS)  # a bare-loop process
    parser.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)  # its config
    from record import add_arguments

    add_arguments(parser)
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 6)
    args.steps = args.steps or (30 if args.quick else 200)
    args.arms = [a.strip() for a in args.bare_data.split(",") if a.strip()]
    bad = [a for a in args.arms if a not in BARE_DATA]
    if bad or not args.arms:
        parser.error(f"--bare-data {args.bare_data!r}: each of {', '.join(BARE_DATA)}")
    return args


def main() -> None:
    args = _arguments()
    if args.worker:  # one bare-loop run, in its own process: its figures on stdout
        print(json.dumps(bare(args.set, args.worker)))
        return
    from record import refuse_dirty

    refuse_dirty(args.allow_dirty)
    picked = SUITE
    if args.only:
        try:
            picked = [SUITE[int(i)] for i in args.only.split(",")]
        except (ValueError, IndexError):
            sys.exit(f"error: --only {args.only!r}: comma-separated indices of the suite, 0-{len(SUITE) - 1}")
    sets = {
        label: overrides(config, steps=args.steps, device=args.device, quick=args.quick) for label, config in picked
    }
    sides = ["elastune", *args.arms]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {label: {side: [] for side in sides} for label, _ in picked}
    began = time.perf_counter()
    for round_ in range(args.rounds):
        for label, _ in picked:
            for side in order(sides, round_):
                run = run_elastune(sets[label]) if side == "elastune" else run_bare(sets[label], side)
                runs[label][side].append(run)
            line = "  ".join(f"{side} {runs[label][side][-1]['samples_per_s']:,.0f}" for side in sides)
            print(f"round {round_ + 1}/{args.rounds}  {label:30} samples/s: {line}", flush=True)
    results = {label: summarize(runs[label], args.arms) for label, _ in picked}
    _report(args, picked, sets, runs, results, time.perf_counter() - began)


def _report(
    args: argparse.Namespace,
    picked: list[tuple[str, list[str]]],
    sets: dict[str, list[str]],
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    results: dict[str, dict[str, Any]],
    seconds: float,
) -> None:
    first = args.arms[0]
    print(f"\n{'config':30} {'elastune':>10} " + " ".join(f"{a:>12} {'ratio':>6}" for a in args.arms))
    for label, r in results.items():
        cells = " ".join(f"{r[a]['samples_per_s']:12,.0f} {r[a]['ratio']:6.3f}" for a in args.arms)
        print(f"{label:30} {r['elastune']:10,.0f} {cells}")
    print(
        f"({len(picked)} configs x {args.rounds} rounds in {seconds:.0f} s; ratio: elastune / bare, median of rounds)"
    )
    threads = {run["threads"] for by in runs.values() for arm in args.arms for run in by[arm]}
    raw = {"settings": _settings(args, sets, threads), "results": results, "runs": runs}
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1, default=str) + "\n")
    if args.quick and not os.environ.get("ELASTUNE_BENCH_RECORDS"):
        print("--quick: no record written (tiny shapes, one round: not a result)", file=sys.stderr)
        return
    from record import write_record

    figures = [_figure(label, r, first) for label, r in results.items()]
    columns = ["config", "elastune samples/s"]
    for arm in args.arms:
        columns += [f"bare {arm} samples/s", f"x bare {arm}"]
    rows = []
    for label, r in results.items():
        rows.append([label, round(r["elastune"])])
        for arm in args.arms:
            rows[-1] += [round(r[arm]["samples_per_s"]), round(r[arm]["ratio"], 3)]
    where = args.device.split(":")[0]
    write_record(
        f"overhead-{where}",
        "The training loop's tax: elastune train against a bare PyTorch loop over the same model and batches",
        figures,
        device=args.device,
        settings=_settings(args, sets, threads),
        notes=[
            "bare loop: forward, loss, backward, the run's own optimizers' step, zero_grad; fp32; the same "
            "seed, torch threads and malloc regime (pin_heap) as elastune train",
            "timed as training/throughput.py times a run: steps after warmup_steps, windows of 10, warm-up "
            "windows left out; every run a fresh process, elastune and bare alternating, which goes first "
            "alternating from round to round",
            "on a CPU elastune leaves a synthetic source's reads out of samples/s (synthetic_read_s), as the "
            "materialized arm reads before its clock; the read arm times each read",
            *(["--quick: tiny shapes, one round: a smoke test, not a result"] if args.quick else []),
        ],
        table={"columns": columns, "rows": rows},
    )


def _figure(label: str, result: dict[str, Any], arm: str) -> Any:
    """A config's headline: elastune / bare against the target where the bare loop read nothing."""
    from record import Figure

    ratio, rounds = result[arm]["ratio"], ", ".join(f"{x:.3f}" for x in result[arm]["ratios"])
    name = f"{label}: elastune train / bare loop ({arm} batches), samples/s"
    note = f"median of {result['rounds']} rounds' ratios ({rounds})"
    if arm != "materialized":  # the target is the loop's whole tax, its data's included
        return Figure(name, round(ratio, 3), "x", note=note)
    return Figure(name, round(ratio, 3), "x", f">= {TARGET}", ratio >= TARGET, note)


def _settings(args: argparse.Namespace, sets: dict[str, list[str]], threads: set[int]) -> dict[str, Any]:
    return {
        "configs": sets,
        "steps": args.steps,
        "rounds": args.rounds,
        "bare_data": args.arms,
        "torch_threads": sorted(threads),
        "window_steps": WINDOW,
        "quick": args.quick,
        "measured": "samples/s after warm-up; ratio = median over rounds of elastune / bare",
    }


if __name__ == "__main__":
    main()
