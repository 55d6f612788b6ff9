"""Data-loader workers, measured: `data.loader_workers` 0 (each step's batch read in the training
process) against N worker processes reading ahead, with `data.pin_memory` on a GPU, for a workload
whose data is cheap to make (the LM's synthetic text) and one whose data is dear (DLRM's synthetic
click log: Zipf ids, a teacher network's labels).

Workers overlap reading with the step, but they are processes of their own: on a machine whose
cores the step already uses they take cores from it. Every config trains in fresh `elastune train`
processes, `--repeat` times, interleaved; ratios are of medians measured in the same run.

    python bench/loader.py                      # CPU, writes a record (bench/records/)
    python bench/loader.py --device cuda        # on a GPU: pinned memory too
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from embeddings import train
from record import Figure, write_record

WORKLOADS: dict[str, list[str]] = {
    "lm": [
        "workload=lm",
        "workload_options={layers: 2, heads: 4, context: 128, vocab: 4096, mean_length: 40}",
        "batch.micro=32",
        "eval.samples=512",
    ],
    "dlrm": ["batch.micro=4096", "eval.samples=4096"],
}
LOADERS: list[tuple[str, list[str]]] = [
    ("0 workers", ["data.loader_workers=0"]),
    ("1 worker", ["data.loader_workers=1", "data.prefetch=2"]),
    ("2 workers", ["data.loader_workers=2", "data.prefetch=2"]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda adds data.pin_memory=true runs)")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    loaders = list(LOADERS)
    if args.device.startswith("cuda"):
        loaders += [(f"{label}, pinned", [*sets, "data.pin_memory=true"]) for label, sets in LOADERS]

    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(w, label): [] for w in WORKLOADS for label, _ in loaders}
    for _ in range(args.repeat):
        for workload, base in WORKLOADS.items():
            for label, sets in loaders:
                runs[(workload, label)].append(train([*base, *sets], args.steps, args.device))
    rate = {key: statistics.median(r["samples_per_s"] for r in rs) for key, rs in runs.items()}
    rows = []
    for (workload, label), value in rate.items():
        ratio = value / rate[(workload, "0 workers")]
        rows.append([workload, label, round(value, 1), round(ratio, 2)])
        print(f"{workload:5} {label:20} {value:10,.1f} samples/s  {ratio:.2f}x", flush=True)
    figures = [
        Figure(
            f"{workload}: best loader vs 0 workers, samples/s",
            f"{max(rate[(workload, label)] for label, _ in loaders) / rate[(workload, '0 workers')]:.2f}x "
            f"({max((rate[(workload, label)], label) for label, _ in loaders)[1]})",
            note="median samples/s, same run",
        )
        for workload in WORKLOADS
    ]
    write_record(
        f"loader-{args.device.split(':')[0]}",
        "Data-loader workers (and pinned memory on a GPU) against reading in the training process",
        figures,
        device=args.device,
        settings={"workloads": WORKLOADS, "steps": args.steps, "repeat": args.repeat, "measured": "median samples/s"},
        table={"columns": ["workload", "loader", "samples/s", "x 0 workers"], "rows": rows},
    )


if __name__ == "__main__":
    main()
