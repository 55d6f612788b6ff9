"""Per-table strategies (`embedding.overrides`) against one strategy for every table, on a skewed
set of tables (one large table, a few mid-sized ones, many small ones), at memory ceilings.

Each plan trains in fresh `elastune train` processes (rowwise_adagrad, the same steps, seed and
data), `--repeat` times, interleaved: its median samples/s and its highest measured peak count.
At each ceiling the fastest plan whose peak fits and whose eval log loss is within the tolerance
of `full`'s wins. The ceilings are shares of `full`'s measured peak (0.8 and 0.5 by default), so
`full` itself does not fit and a plan must save memory.

    python bench/overrides.py                  # all plans, writes a record (bench/records/)
    python bench/overrides.py --ceiling-share 0.7 0.45 --steps 300
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from embeddings import train
from record import Figure, write_record

TABLES = [2_000_000, 300_000, 40_000, 40_000, 5_000, 5_000, 800, 800, 100, 100, 50, 50]
BASE = [
    f"data.table_rows=[{', '.join(str(r) for r in TABLES)}]",
    "model.embedding_dim=32",
    "optimizer.sparse=rowwise_adagrad",
    "eval.samples=16384",
]
BIG = 100_000  # rows from which a table counts as large


def _override(strategy: str, *extra: str) -> str:
    fields = ", ".join([f"strategy: {strategy}", *extra])
    return f"embedding.overrides=[{{match: {{min_rows: {BIG}}}, {fields}}}]"


PLANS: list[tuple[str, str, list[str]]] = [  # (label, kind, overrides)
    ("full", "single", []),
    ("half (fp16)", "single", ["embedding.strategy=half"]),
    ("int8", "single", ["embedding.strategy=int8"]),
    ("hashed (4x)", "single", ["embedding.strategy=hashed", "embedding.compression=4"]),
    ("large int8, rest full", "per-table", [_override("int8")]),
    ("large half, rest full", "per-table", [_override("half")]),
    ("large hashed (4x), rest full", "per-table", [_override("hashed", "compression: 4")]),
    ("large int8, rest half", "per-table", ["embedding.strategy=half", _override("int8")]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument(
        "--ceiling-share",
        type=float,
        nargs="+",
        default=[0.8, 0.5],
        help="ceilings, each this x full's measured peak (the plans train once; each ceiling picks its winners)",
    )
    parser.add_argument("--tolerance", type=float, default=0.02, help="eval log loss allowed over full's")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=3, help="runs per plan, interleaved: median samples/s, max peak")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    # Rounds of every plan in turn, so a busy moment of the machine falls on all plans alike.
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in PLANS}
    for _ in range(args.repeat):
        for label, _, overrides in PLANS:
            results[label].append(train([*BASE, *overrides], args.steps, args.device))
    runs = []
    for label, kind, _ in PLANS:
        done = results[label]
        run = {
            **done[0],
            "label": label,
            "kind": kind,
            "samples_per_s": statistics.median(r["samples_per_s"] for r in done),
            "peak_memory_bytes": max(r["peak_memory_bytes"] for r in done),
            "spread": (min(r["samples_per_s"] for r in done), max(r["samples_per_s"] for r in done)),
        }
        runs.append(run)
        print(
            f"{label:32} {run['samples_per_s']:>9,.0f} samples/s ({run['spread'][0]:,.0f}-{run['spread'][1]:,.0f})  "
            f"peak {run['peak_memory_bytes'] / 2**20:7.1f} MiB  log loss {run['val_logloss']:.4f}",
            flush=True,
        )
    full = runs[0]
    allowed = full["val_logloss"] * (1 + args.tolerance)
    figures = []
    ceilings = {share: share * full["peak_memory_bytes"] for share in args.ceiling_share}
    for share, ceiling in ceilings.items():
        fits = [r for r in runs if r["peak_memory_bytes"] <= ceiling and r["val_logloss"] <= allowed]
        best = {
            kind: max((r for r in fits if r["kind"] == kind), key=lambda r: r["samples_per_s"], default=None)
            for kind in ("single", "per-table")
        }
        at = f"ceiling {share:g} x full's peak ({ceiling / 2**20:.0f} MiB)"
        for kind, run in best.items():
            note = (
                "none fits"
                if run is None
                else f"{run['label']}: peak {run['peak_memory_bytes'] / 2**20:.1f} MiB, "
                f"log loss {run['val_logloss']:.4f}"
            )
            value = round(run["samples_per_s"]) if run else None
            figures.append(Figure(f"{at}: best {kind} plan", value, "samples/s", note=note))
        single, per_table = best["single"], best["per-table"]
        if single and per_table:
            ratio = per_table["samples_per_s"] / single["samples_per_s"]
            figures.append(Figure(f"{at}: per-table vs single", round(ratio, 2), "x", note="same run"))
    print("\n".join(f"{f.name}: {f.value} ({f.note})" for f in figures))
    write_record(
        "overrides-cpu" if args.device == "cpu" else "overrides-cuda",
        "Per-table strategies vs one strategy for all tables, at one ceiling",
        figures,
        settings={
            "tables": TABLES,
            "steps": args.steps,
            "repeat": args.repeat,
            "ceilings_bytes": {str(k): round(v) for k, v in ceilings.items()},
            "tolerance": args.tolerance,
        },
        device=args.device,
        table={
            "columns": [
                "plan",
                "kind",
                "samples/s (median)",
                "min-max",
                "peak MiB (max)",
                "eval log loss",
                "ok",
                "AUC",
            ],
            "rows": [
                [
                    r["label"],
                    r["kind"],
                    round(r["samples_per_s"]),
                    f"{r['spread'][0]:.0f}-{r['spread'][1]:.0f}",
                    round(r["peak_memory_bytes"] / 2**20, 1),
                    round(r["val_logloss"], 4),
                    r["val_logloss"] <= allowed,
                    round(r["val_auc"], 4),
                ]
                for r in runs
            ],
        },
    )


if __name__ == "__main__":
    main()
