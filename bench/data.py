"""How fast samples arrive: the synthetic stream's generation and the Criteo TSV reader's parsing,
in rows per second (single process, median of `--repeat` timed passes after one warm-up).

    python bench/data.py                   # both, writes a record (bench/records/)
    python bench/data.py --rows 200000     # a larger TSV file

The TSV file is generated (Criteo-shaped: label, 13 counts with some missing, 26 hex categoricals
with some missing) in a temporary folder; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from elastune.data.clicks import NUM_DENSE, NUM_SPARSE, table_sizes
from elastune.data.criteo import CriteoTSV, _parse_tsv_line, _rows_to_batch
from elastune.data.synthetic import SyntheticCriteo
from record import Figure, write_record

BATCH = 4096


def synthetic_rows_per_s(rows: int, repeat: int) -> float:
    source = SyntheticCriteo(table_sizes(0.01))
    source.read(0, BATCH)  # warm-up: the teacher's calibration, the first chunk
    times = []
    for r in range(repeat):
        start = (r + 1) * 10 * rows
        began = time.perf_counter()
        for offset in range(0, rows, BATCH):
            source.read(start + offset, min(BATCH, rows - offset))
        times.append(time.perf_counter() - began)
    return rows / statistics.median(times)


def write_tsv(path: Path, rows: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w") as f:
        for _ in range(rows):
            label = "1" if rng.random() < 0.25 else "0"
            ints = ["" if rng.random() < 0.1 else str(int(rng.expovariate(0.05))) for _ in range(NUM_DENSE)]
            cats = ["" if rng.random() < 0.05 else f"{rng.getrandbits(32):08x}" for _ in range(NUM_SPARSE)]
            f.write("\t".join([label, *ints, *cats]) + "\n")


def line_parser_rows_per_s(path: Path, rows: int, repeat: int) -> float:
    """The former reader's method, for the ratio: `_parse_tsv_line` on each line, blocks of 8192."""
    sizes = table_sizes(0.01)
    times = []
    for _ in range(repeat + 1):
        began = time.perf_counter()
        labels, ints, ids = [], [], []
        with path.open() as f:
            for line in f:
                label, row_ints, row_ids = _parse_tsv_line(line, sizes)
                labels.append(label)
                ints.append(row_ints)
                ids.append(row_ids)
                if len(labels) == 8192:
                    _rows_to_batch(labels, ints, np.array(ids))
                    labels, ints, ids = [], [], []
        if labels:
            _rows_to_batch(labels, ints, np.array(ids))
        times.append(time.perf_counter() - began)
    return rows / statistics.median(times[1:])


def tsv_rows_per_s(path: Path, rows: int, repeat: int) -> float:
    times = []
    for _ in range(repeat + 1):  # the first pass warms the page cache
        source = CriteoTSV(path, table_sizes(0.01), eval_samples=0)
        began = time.perf_counter()
        for offset in range(0, rows, BATCH):
            source.read(offset, min(BATCH, rows - offset))
        times.append(time.perf_counter() - began)
    return rows / statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per timed pass")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes (the median counts)")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    synthetic = synthetic_rows_per_s(args.rows, args.repeat)
    print(f"synthetic: {synthetic:,.0f} rows/s")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.tsv"
        write_tsv(path, args.rows)
        tsv = tsv_rows_per_s(path, args.rows, args.repeat)
        lines = line_parser_rows_per_s(path, args.rows, args.repeat)
    print(f"criteo tsv: {tsv:,.0f} rows/s (line by line: {lines:,.0f})")
    write_record(
        "data",
        "Data: rows per second into the training loop",
        [
            Figure("synthetic stream: generation", round(synthetic), "rows/s"),
            Figure(
                "Criteo TSV reader: parsing", round(tsv), "rows/s", note="pyarrow's CSV reader, whole-column checks"
            ),
            Figure("the same file line by line (the former parser)", round(lines), "rows/s"),
            Figure("TSV reader vs line by line", round(tsv / lines, 2), "x", note="same run, same file"),
        ],
        settings={"rows": args.rows, "repeat": args.repeat, "batch": BATCH, "rows_scale": 0.01},
    )


if __name__ == "__main__":
    main()
