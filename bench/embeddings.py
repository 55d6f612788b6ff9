"""Embedding strategies side by side (issue 3), in two tables.

1. Strategies: the default workload trained to the same number of samples once per strategy (and
   per backend), each in a fresh `elastune train --format json` process so peaks do not mix. Every
   row uses the same row-wise optimizer (optimizer.sparse=rowwise_adagrad: the self-updating
   strategies need one), and the reference `full` row too; `full (adam)` is the default config.
   Columns: table bytes (the rows as stored, no optimizer state), table + optimizer state bytes
   (counted on the built model after one step), measured and predicted peak, samples/s, eval log
   loss and AUC, and each relative to `full`.
2. Update path: one embedding table of 2M rows x 64 alone, Zipf ids, 4096 x 26 lookups per step
   (forward, backward and optimizer step), for dense Adam, torch sparse SGD / Adagrad, elastune's
   row-wise optimizers on `full`'s lookup (embeddings/sparse_optim.py: `pooled_sum` +
   `SparseRowOptimizer`, what a run with optimizer.sparse=<kind> uses) and FBGEMM's fused CPU
   kernels; the median time per step over several steps after warm-up.

    python bench/embeddings.py                      # both tables, Markdown to stdout
    python bench/embeddings.py --only update        # one of them: strategies | update
    python bench/embeddings.py --steps 300 --json out.json
    python bench/embeddings.py --device cuda         # both tables on the GPU

Each run writes its record to bench/records/; `python bench/render.py` updates bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import date
from typing import Any

import torch
from elastune.embeddings import spec_for
from elastune.embeddings.fbgemm import fbgemm_import_error
from elastune.embeddings.sparse_optim import SparseRowOptimizer
from elastune.training.optim import Optimizers
from elastune.training.precision import autocast_for
from elastune.training.step import forward_backward
from elastune.validate import load_run_config
from elastune.workloads import build_workload

ROW = ["optimizer.sparse=rowwise_adagrad"]
FBGEMM = [*ROW, "embedding.backend=fbgemm"]
# (label, overrides); the first is the reference every ratio is taken against.
STRATEGIES: list[tuple[str, list[str]]] = [
    ("full", ROW),
    ("full (adam, the default)", []),
    ("half (fp16)", [*ROW, "embedding.strategy=half"]),
    ("int8", [*ROW, "embedding.strategy=int8"]),
    ("hashed (4x)", [*ROW, "embedding.strategy=hashed", "embedding.compression=4"]),
    ("qr (4x)", [*ROW, "embedding.strategy=qr", "embedding.compression=4"]),
    ("mixed_dim", [*ROW, "embedding.strategy=mixed_dim"]),
    ("shared", [*ROW, "embedding.strategy=shared"]),
    ("cached (10% of rows)", [*ROW, "embedding.strategy=cached", "embedding.cache_ratio=0.1"]),
    ("full / fbgemm", FBGEMM),
    ("half (fp16) / fbgemm", [*FBGEMM, "embedding.strategy=half"]),
]

MiB = 2**20


# ---------------------------------------------------------------------------------------------
# Table 1: strategies on the default workload


def held_bytes(overrides: list[str]) -> tuple[int, int]:
    """(table bytes by the strategy's formula without optimizer state, table + optimizer state bytes
    counted on the built model after one real step)."""
    cfg = load_run_config(None, overrides)
    workload = build_workload(cfg)
    spec = spec_for(cfg.embedding)
    table = spec.state_bytes(workload.table_sizes, cfg.model.embedding_dim, cfg.embedding, "sgd")  # sgd: no state
    torch.manual_seed(0)
    model = workload.build_model()
    opts = Optimizers(model, cfg.optimizer)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    batch = workload.data_source().read(0, 256)
    forward_backward(model, workload, batch, 256, autocast_for("fp32", torch.device("cpu")), scaler)
    opts.step(scaler)
    emb = model.embeddings
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in emb.state_dict().values()}
    for t in [*emb.parameters(), *emb.buffers()]:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    if opts.sparse is not None:
        for state in opts.sparse.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    storages[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
    return table, sum(storages.values())


def train(overrides: list[str], steps: int, device: str) -> dict[str, Any]:
    from record import TRAIN_JSON, run_json

    return run_json(TRAIN_JSON, [f"steps={steps}", "warmup_steps=20", f"device={device}", *overrides])


def strategies_table(steps: int, device: str) -> tuple[list[dict[str, Any]], str]:
    rows = []
    for label, overrides in STRATEGIES:
        if "embedding.backend=fbgemm" in overrides and fbgemm_import_error() is not None:
            print(f"skipped {label}: fbgemm_gpu {fbgemm_import_error()}", file=sys.stderr)
            continue
        started = time.perf_counter()
        table, with_state = held_bytes(overrides)
        run = train(overrides, steps, device)
        rows.append({"label": label, "overrides": overrides, "table_bytes": table, "state_bytes": with_state, **run})
        print(f"{label}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    ref = rows[0]
    lines = [
        "| strategy | table MiB | x full | table+state MiB | x full | peak MiB (measured) | predicted | error "
        "| samples/s | x full | eval log loss | Δ | eval AUC | Δ |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pred, peak = r["estimated_peak_bytes"], r["peak_memory_bytes"]
        lines.append(
            f"| {r['label']} | {r['table_bytes'] / MiB:.1f} | {r['table_bytes'] / ref['table_bytes']:.2f} "
            f"| {r['state_bytes'] / MiB:.1f} | {r['state_bytes'] / ref['state_bytes']:.2f} "
            f"| {peak / MiB:.1f} | {pred / MiB:.1f} | {(pred - peak) / peak:+.1%} "
            f"| {r['samples_per_s']:.0f} | {r['samples_per_s'] / ref['samples_per_s']:.2f} "
            f"| {r['val_logloss']:.4f} | {r['val_logloss'] - ref['val_logloss']:+.4f} "
            f"| {r['val_auc']:.4f} | {r['val_auc'] - ref['val_auc']:+.4f} |"
        )
    samples = ref["samples"]
    head = f"Each run: {samples} samples ({steps} steps x {ref['effective_batch']}), eval on 65536 held-out samples."
    return rows, "\n".join([head, "", *lines])


# ---------------------------------------------------------------------------------------------
# Table 2: the update path alone on a 2M-row table

UPDATE_ROWS, UPDATE_DIM, LOOKUPS, ZIPF_ALPHA = 2_000_000, 64, 4096 * 26, 1.15


def zipf_ids(n: int, rows: int, alpha: float, gen: torch.Generator) -> torch.Tensor:
    """n ids over `rows`, rank k drawn with probability ~ k^-alpha (inverse CDF of the continuous
    power law), hot ranks scattered over the table by a fixed permutation (as in real id spaces)."""
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    one_minus = 1.0 - alpha
    ranks = (1.0 + u * (rows**one_minus - 1.0)) ** (1.0 / one_minus)
    ranks = ranks.floor().long().clamp_(1, rows) - 1
    scatter = torch.randperm(rows, generator=torch.Generator().manual_seed(7))
    return scatter[ranks]


def _torch_path(
    device: torch.device, sparse: bool, make_opt: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
) -> Any:
    bag = torch.nn.EmbeddingBag(UPDATE_ROWS, UPDATE_DIM, mode="sum", sparse=sparse).to(device)
    opt = make_opt(list(bag.parameters()))

    def step(ids: torch.Tensor, upstream: torch.Tensor) -> None:
        out = bag(ids.view(-1, 1))
        out.backward(upstream)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _elastune_path(device: torch.device, kind: str) -> Any:
    """`full` as a run with optimizer.sparse=<kind> builds it: FullEmbedding's lookup (whose backward
    sums each distinct row's lookups, sparse_optim.pooled_sum) and SparseRowOptimizer."""
    from elastune.embeddings.full import FullEmbedding

    emb = FullEmbedding([UPDATE_ROWS], UPDATE_DIM, sparse_grad=True).to(device)
    opt = SparseRowOptimizer(emb.sparse_parameters(), kind, lr=0.01)

    def step(ids: torch.Tensor, upstream: torch.Tensor) -> None:
        out = emb(ids.view(-1, 1, 1))  # one feature, LOOKUPS bags of one id
        out.view(-1, UPDATE_DIM).backward(upstream)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _fbgemm_path(device: torch.device, kind: str) -> Any:
    from elastune.embeddings.fbgemm import FbgemmEmbedding
    from elastune.embeddings.sparse_optim import RowUpdate

    emb = FbgemmEmbedding([UPDATE_ROWS], UPDATE_DIM, kind).to(device)
    emb.set_row_update(RowUpdate(kind, 0.01))

    def step(ids: torch.Tensor, upstream: torch.Tensor) -> None:
        out = emb(ids.view(-1, 1, 1))  # one feature, LOOKUPS bags of one id
        out.view(-1, UPDATE_DIM).backward(upstream)  # the kernel updates the rows here

    return step


UPDATE_PATHS: list[tuple[str, Callable[[torch.device], Any]]] = [
    ("dense Adam (torch, fused)", lambda d: _torch_path(d, False, lambda p: torch.optim.Adam(p, lr=0.01, fused=True))),
    ("torch sparse SGD", lambda d: _torch_path(d, True, lambda p: torch.optim.SGD(p, lr=0.01))),
    ("torch sparse Adagrad", lambda d: _torch_path(d, True, lambda p: torch.optim.Adagrad(p, lr=0.01))),
    ("elastune sgd", lambda d: _elastune_path(d, "sgd")),
    ("elastune adagrad", lambda d: _elastune_path(d, "adagrad")),
    ("elastune rowwise_adagrad", lambda d: _elastune_path(d, "rowwise_adagrad")),
    ("fbgemm sgd (EXACT_SGD)", lambda d: _fbgemm_path(d, "sgd")),
    ("fbgemm adagrad (EXACT_ADAGRAD)", lambda d: _fbgemm_path(d, "adagrad")),
    ("fbgemm rowwise_adagrad (EXACT_ROWWISE_ADAGRAD)", lambda d: _fbgemm_path(d, "rowwise_adagrad")),
]


def update_table(warmup: int, timed: int, device: torch.device) -> tuple[list[dict[str, Any]], str]:
    gen = torch.Generator().manual_seed(0)
    batches = [zipf_ids(LOOKUPS, UPDATE_ROWS, ZIPF_ALPHA, gen).to(device) for _ in range(4)]
    upstream = torch.randn(LOOKUPS, UPDATE_DIM, generator=gen).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    distinct = statistics.mean(b.unique().numel() for b in batches)
    # All paths are built first and stepped in turn, round after round: the machine is shared, and
    # interleaving spreads other processes' load over every path alike (ratios stay fair).
    skip_fbgemm = fbgemm_import_error() is not None
    paths = [(label, make(device)) for label, make in UPDATE_PATHS if not (label.startswith("fbgemm") and skip_fbgemm)]
    times: dict[str, list[float]] = {label: [] for label, _ in paths}
    for i in range(warmup + timed):
        for label, step in paths:
            sync()
            started = time.perf_counter()
            step(batches[i % len(batches)], upstream)
            sync()
            times[label].append(time.perf_counter() - started)
    rows = [
        {"label": label, "median_ms": statistics.median(t[warmup:]) * 1e3, "all_ms": t} for label, t in times.items()
    ]
    for r in rows:
        print(f"{r['label']}: {r['median_ms']:.1f} ms", file=sys.stderr)
    adam = rows[0]["median_ms"]
    lines = ["| update path | ms / step (median) | x faster than dense Adam |", "|---|---:|---:|"]
    lines += [f"| {r['label']} | {r['median_ms']:.1f} | {adam / r['median_ms']:.1f} |" for r in rows]
    head = (
        f"Table {UPDATE_ROWS:,} x {UPDATE_DIM} fp32; {LOOKUPS:,} lookups per step (4096 x 26), Zipf alpha "
        f"{ZIPF_ALPHA}, {distinct:,.0f} distinct rows per step on average; median of {timed} steps after "
        f"{warmup} warm-up, the paths interleaved; a step = lookup + backward + update."
    )
    return rows, "\n".join([head, "", *lines])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["strategies", "update"])
    parser.add_argument("--steps", type=int, default=300, help="training steps per strategy run")
    parser.add_argument("--update-steps", type=int, default=10, help="timed steps per update path")
    parser.add_argument("--json", help="also write the raw figures here")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (both tables run there)")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    torch.set_num_threads(torch.get_num_threads())
    print(
        f"machine: {platform.machine()}, {torch.get_num_threads()} threads, {platform.platform()}, "
        f"torch {torch.__version__}; date {date.today().isoformat()}"
    )
    if args.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name(torch.device(args.device))}, CUDA {torch.version.cuda}")
    print()
    raw: dict[str, Any] = {}
    if args.only in (None, "strategies"):
        raw["strategies"], text = strategies_table(args.steps, args.device)
        print(text + "\n")
    if args.only in (None, "update"):
        raw["update"], text = update_table(warmup=3, timed=args.update_steps, device=torch.device(args.device))
        print(text + "\n")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(raw, fh, indent=1, default=str)
    _record(args, raw)


def _record(args: argparse.Namespace, raw: dict[str, Any]) -> None:
    """A record per table that ran (bench/record.py)."""
    from record import Figure, write_record

    where = "cuda" if args.device.startswith("cuda") else "cpu"
    if "strategies" in raw:
        rows = {r["label"]: r for r in raw["strategies"]}
        full = raw["strategies"][0]
        figures = [
            Figure(
                f"{label}: table bytes vs full",
                round(r["table_bytes"] / full["table_bytes"], 3),
                "x",
                note=f"AUC {r['val_auc'] - full['val_auc']:+.4f}, "
                f"samples/s x{r['samples_per_s'] / full['samples_per_s']:.2f}",
            )
            for label, r in rows.items()
            if r is not full
        ]
        for label, bound in (("half (fp16)", 0.5), ("int8", 0.3)):
            r = rows.get(label)
            if r is not None:
                share = r["table_bytes"] / full["table_bytes"]
                figures.append(Figure(f"{label}: table bytes vs full, target", round(share, 3), "x", f"<= {bound}",
                                      share <= bound + 1e-9))  # fmt: skip
        write_record(
            f"embeddings-{where}",
            "Embedding strategies: bytes, speed and quality against full",
            figures,
            settings={"steps": args.steps, "device": args.device},
            device=args.device,
            notes=[
                "samples/s are single runs (they move 10-15% between runs); quality is the eval set's AUC.",
                "predicted: the estimator's peak for DLRM, a workload in its fit half (bench/estimator.py ZOO_FIT): "
                "a fit, not a held-out result",
            ],
        )
    if "update" in raw:
        rows = raw["update"]
        adam = rows[0]["median_ms"]
        by = {r["label"]: r["median_ms"] for r in rows}
        ratio = adam / by["elastune rowwise_adagrad"]
        write_record(
            f"embeddings-update-{where}",
            "Embedding update path: ms per step on a 2M x 64 table",
            [
                Figure("rowwise_adagrad vs dense Adam, per step", round(ratio, 1), "x faster", ">= 10", ratio >= 10),
                *(Figure(label, round(ms, 2), "ms / step") for label, ms in by.items()),
            ],
            settings={"update_steps": args.update_steps, "device": args.device},
            device=args.device,
        )


if __name__ == "__main__":
    main()
