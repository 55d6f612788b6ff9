"""`elastune train`, `elastune estimate` and `elastune config`: one run of the engine, its predicted
peak, and the resolved config."""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from elastune.cli.common import ConfigArg, FormatOpt, SetOpt, TrackingOpt, err, out
from elastune.config import RunConfig
from elastune.errors import InputError
from elastune.jsonout import Format, dumps
from elastune.units import human_bytes
from elastune.validate import load_run_config

__all__ = ["config_schema", "config_show", "estimate", "train"]


def train(
    config: ConfigArg = None,
    set_: SetOpt = None,
    format: FormatOpt = Format.table,
    from_sweep: Annotated[
        str | None, typer.Option("--from-sweep", help="Start from this sweep's best config (read from MLflow).")
    ] = None,
    tracking_uri: TrackingOpt = None,
    untrusted: Annotated[
        bool,
        typer.Option(
            "--untrusted",
            help="The config and overrides come from a remote client (the web UI sets this): only the keys in "
            "elastune/untrusted.py, none of which names a file; the checkpoint goes to $ELASTUNE_HOME/jobs/JOB_ID/.",
        ),
    ] = False,
    all_cores: Annotated[
        bool,
        typer.Option(
            "--all-cores",
            help="Let torch use every core (threads=none) instead of the config's threads; a --from-sweep "
            "config has the threads its trial was measured with.",
        ),
    ] = False,
) -> None:
    """Train one configuration; print throughput, measured and predicted peak memory, quality."""
    from elastune.memory.estimate import estimate as run_estimate
    from elastune.training.loop import Progress
    from elastune.training.loop import train as run_training

    if from_sweep is not None:
        if config is not None:
            raise InputError("give a CONFIG file or --from-sweep, not both")
        config = _best_config_file(from_sweep, tracking_uri)
    if untrusted:
        set_ = _untrusted_overrides(config, set_ or [], from_sweep)
    cfg = load_run_config(config, set_ or [])
    if all_cores:
        cfg = cfg.model_copy(update={"threads": None})
    elif from_sweep is not None and cfg.threads is not None:
        err.print(
            f"measuring as the sweep's trial did: threads={cfg.threads} (its CPUs); --all-cores lets torch use "
            "every core, which may rank configs differently"
        )
    err.print(
        f"[bold]training[/] {cfg.workload} · {cfg.embedding.strategy} · {cfg.precision} · "
        f"batch {cfg.batch.micro}×{cfg.batch.accum} · {cfg.steps} steps · device {cfg.device} · "
        f"threads {cfg.threads or 'all (torch default)'}"
    )

    def show(p: Progress) -> None:
        rate = f"{p.samples_per_s:,.0f} samples/s" if p.samples_per_s else "warming up"
        err.print(f"  step {p.step:>5}/{p.steps}  loss {p.loss:.4f}  {rate}", highlight=False)

    result = run_training(cfg, on_progress=show)
    result = replace(result, estimated_peak_bytes=run_estimate(cfg).peak_bytes)  # predicted, beside measured
    if format is Format.json:
        print(dumps(_result_dict(result)))
        return
    table = Table(title="elastune train", show_header=False)
    for label, value in _summary_rows(result):
        table.add_row(label, value)
    out.print(table)


def estimate(config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table) -> None:
    """Predict a config's peak memory without running it (fake-tensor trace + overhead model)."""
    from elastune.memory.estimate import estimate as run_estimate
    from elastune.training.precision import resolve_device
    from elastune.workloads import build_workload

    cfg = load_run_config(config, set_ or [])
    est = run_estimate(cfg, resolve_device(cfg.device))
    workload = build_workload(cfg)
    specs = getattr(workload, "tables", None)
    # One entry per table: declared tables count a table several features share once.
    tables = tuple(t.rows for t in specs) if specs else workload.table_sizes
    # The tables' own bytes, by their strategies' formulas (exact: rows x dim x bytes per value,
    # plus any per-row metadata); the parameters part of the breakdown adds the MLPs.
    table_bytes = _table_bytes(cfg, specs, tables)
    # A table source's tables are its columns, sized by its data: each gets its own line.
    named = {s.name: s.rows for s in specs} if specs and cfg.data.source == "table" else {}
    if format is Format.json:
        payload = {
            "estimated_peak_bytes": est.peak_bytes,
            "kind": est.kind,
            "tables": {"count": len(tables), "rows": sum(tables), "bytes": table_bytes}
            | ({"by_name": named} if named else {}),
            "breakdown": est.breakdown,
            "traced_peak_bytes": est.traced_peak_bytes,
            "seconds": est.seconds,
            "config": cfg.to_dict(),
        }
        print(dumps(payload))
        return
    table = Table(title=f"elastune estimate ({est.kind}, {est.seconds:.2f} s)")
    table.add_column("part")
    table.add_column("bytes", justify="right")
    table.add_column("", justify="right")
    for part, size in est.breakdown.items():
        table.add_row(part, f"{size:,}", human_bytes(size))
        if part == "parameters":
            kind = cfg.embedding.strategy + (" + overrides" if cfg.embedding.overrides else "")
            label = f"  of which {len(tables)} table{'s' if len(tables) > 1 else ''} ({kind})"
            table.add_row(label, f"{table_bytes:,}", human_bytes(table_bytes))
            for spec in (specs or []) if named else []:
                size = _table_bytes(cfg, [spec], (spec.rows,))
                table.add_row(f"    {spec.name} ({spec.rows:,} rows)", f"{size:,}", human_bytes(size))
    table.add_row("[bold]peak[/]", f"[bold]{est.peak_bytes:,}[/]", f"[bold]{human_bytes(est.peak_bytes)}[/]")
    out.print(table)


def _table_bytes(cfg: RunConfig, specs: Any, sizes: tuple[int, ...]) -> int:
    """The tables' state bytes; per table when the workload names its tables (overrides match names)."""
    from elastune.embeddings import spec_for

    emb, opt = cfg.embedding, cfg.optimizer.sparse
    if not specs:
        return spec_for(emb).state_bytes(sizes, cfg.model.embedding_dim, emb, opt)
    groups: dict[str, tuple[Any, list[int], int]] = {}  # priced as built: tables of one config together
    for spec in specs:
        table_cfg = emb.for_table(spec.name, spec.rows)
        _, rows, _ = groups.setdefault(f"{spec.dim}/{table_cfg.model_dump_json()}", (table_cfg, [], spec.dim))
        rows.append(spec.rows)
    return sum(spec_for(c).state_bytes(rows, dim, c, opt) for c, rows, dim in groups.values())


def _untrusted_overrides(config: Path | None, sets: list[str], from_sweep: str | None) -> list[str]:
    """Hold a remote client's config and overrides to the allowlist (exit 2 naming each refused key,
    before anything runs), and add the checkpoint path this process chooses, keyed by the job id."""
    from elastune.config import read_yaml_mapping
    from elastune.errors import ConfigError
    from elastune.tuning.sweep import ray_job_id
    from elastune.untrusted import client_checkpoint, override_problems, stored_config_problems

    problems = override_problems(sets, field="--set")
    if config is not None:
        problems += stored_config_problems(read_yaml_mapping(config), field="from_sweep" if from_sweep else "config")
    if problems:
        raise ConfigError(problems, source="a remote client's run")
    job_id = ray_job_id() or f"local-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    return [*sets, f"checkpoint.path={client_checkpoint(job_id)}"]


def _best_config_file(sweep_id: str, tracking_uri: str | None) -> Path:
    from elastune.tracking.mlflow import artifact_path, load_sweep

    if load_sweep(sweep_id, tracking_uri).best() is None:
        raise InputError(f"--from-sweep {sweep_id}: the sweep has no feasible trial, so no best config to train")
    return artifact_path(sweep_id, "best_config.yaml", tracking_uri)


def config_schema() -> None:
    """Print the JSON schema of a run config."""
    print(dumps(RunConfig.model_json_schema()))


def config_show(config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table) -> None:
    """Print the resolved config (defaults, then the file, then --set overrides)."""
    import yaml

    cfg = load_run_config(config, set_ or [])
    if format is Format.json:
        print(dumps(cfg.to_dict()))
    else:
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")


def _result_dict(result: Any) -> dict[str, Any]:
    """The result as JSON: its fields, plus each eval metric flat as `val_NAME` for scripts."""
    from dataclasses import asdict

    return asdict(result) | {f"val_{name}": value for name, value in result.metrics.items()}


def _quality_rows(r: Any) -> list[tuple[str, str]]:
    """The eval metrics, the workload's quality metric first (a binary one: AUC, then log loss
    against the constant-prediction baseline)."""
    metrics = dict(r.metrics)
    if {"logloss", "auc", "baseline_logloss"} <= set(metrics):
        baseline = metrics.pop("baseline_logloss")
        rows = [("eval AUC", f"{metrics.pop('auc'):.4f}")]
        rows.append(("eval log loss", f"{metrics.pop('logloss'):.4f} (constant-prediction baseline {baseline:.4f})"))
    else:
        better = "lower" if r.quality_direction == "min" else "higher"
        value = metrics.pop(r.quality_metric)
        rows = [(f"eval {r.quality_metric}", f"{value:.4f} (quality metric, {better} is better)")]
    return rows + [(f"eval {name}", f"{value:.4f}") for name, value in sorted(metrics.items())]


def _summary_rows(r: Any) -> list[tuple[str, str]]:
    est = r.estimated_peak_bytes
    error = ""
    if est and r.peak_memory_bytes:
        error = f" ({(est - r.peak_memory_bytes) / r.peak_memory_bytes:+.1%} vs measured)"
    return [
        ("throughput", f"{r.samples_per_s:,.0f} samples/s (after {r.config['warmup_steps']} warm-up steps)"),
        *([(f"{r.units} throughput", f"{r.units_per_s:,.0f} {r.units}/s")] if r.units_per_s is not None else []),
        ("peak memory, measured", f"{human_bytes(r.peak_memory_bytes)} ({r.peak_memory_kind})"),
        ("peak memory, predicted", f"{human_bytes(est) if est else 'n/a'}{error}"),
        *_quality_rows(r),
        ("steps × effective batch", f"{r.steps} × {r.effective_batch} = {r.samples:,} samples"),
        ("micro-batch × accumulation", f"{r.micro_batch} × {r.accum}"),
        ("OOM retries", str(r.oom_retries)),
        ("device", r.device),
        ("timed training", f"{r.elapsed_s:.1f} s"),
    ]
