"""`elastune train`, `elastune estimate` and `elastune config`: one run of the engine, its predicted
peak, and the resolved config."""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from elastune.cli.common import ConfigArg, FormatOpt, SetOpt, TrackingOpt, err, out
from elastune.config import RunConfig, apply_overrides, parse_overrides
from elastune.errors import InputError
from elastune.jsonout import Format, dumps
from elastune.units import human_bytes

if TYPE_CHECKING:  # validation asks the components, which pull in torch: not imported to print --help
    from elastune.memory.overhead import HeldOutError

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
    from elastune.validate import load_run_config, validate_run_config

    if from_sweep is not None and config is not None:
        raise InputError("give a CONFIG file or --from-sweep, not both")
    if untrusted:
        cfg = _untrusted_config(config, set_ or [], from_sweep, tracking_uri)
    elif from_sweep is not None:
        raw = apply_overrides(_best_config(from_sweep, tracking_uri), parse_overrides(set_ or []))
        cfg = validate_run_config(raw, source=f"--from-sweep {from_sweep}")
    else:
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

    from elastune.tuning.display import step_line

    def show(p: Progress) -> None:  # the rate is the running mean; the result's is the steady rate
        err.print(step_line(p.step, p.steps, p.loss, p.samples_per_s), highlight=False)

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
    from elastune.validate import load_run_config
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
        payload = est.to_dict() | {
            "tables": {"count": len(tables), "rows": sum(tables), "bytes": table_bytes}
            | ({"by_name": named} if named else {}),
            "config": cfg.to_dict(),
        }
        print(dumps(payload))
        return
    table = Table(title=f"elastune estimate ({est.kind}, {est.seconds:.2f} s)")
    table.add_column("part")
    table.add_column("bytes", justify="right")
    table.add_column("", justify="right")
    for part, size in est.breakdown.items():
        # activations are the step's unless the peak is elsewhere: an evaluation that gathers its
        # outputs (`Workload.example_eval_state`), or a build's scratch
        elsewhere = part == "activations" and est.peak_phase != "training"
        label = f"{part} (at the {est.peak_phase}'s peak)" if elsewhere else part
        table.add_row(label, f"{size:,}", human_bytes(size))
        if part == "parameters":
            kind = cfg.embedding.strategy + (" + overrides" if cfg.embedding.overrides else "")
            label = f"  of which {len(tables)} table{'s' if len(tables) > 1 else ''} ({kind})"
            table.add_row(label, f"{table_bytes:,}", human_bytes(table_bytes))
            for spec in (specs or []) if named else []:
                size = _table_bytes(cfg, [spec], (spec.rows,))
                table.add_row(f"    {spec.name} ({spec.rows:,} rows)", f"{size:,}", human_bytes(size))
        if part == "other":  # the overhead model's terms, each named (memory/overhead.py)
            for term, term_size in est.overhead.items():
                label = f"  {OVERHEAD_LABELS.get(term, term.replace('_', ' '))}"
                table.add_row(label, f"{term_size:,}", human_bytes(term_size))
    table.add_row("[bold]peak[/]", f"[bold]{est.peak_bytes:,}[/]", f"[bold]{human_bytes(est.peak_bytes)}[/]")
    if est.upper_bound_bytes != est.peak_bytes:
        margin = est.upper_bound_bytes / est.peak_bytes
        bound = est.upper_bound_bytes
        table.add_row(f"upper bound (x{margin:.2f}, what sweeps screen)", f"{bound:,}", human_bytes(bound))
    out.print(table)
    out.print(expected_error_line(est.expected_error))


def expected_error_line(held: HeldOutError | None) -> str:
    """How far off to expect the prediction, from the estimator's held-out workloads."""
    if held is None:
        return "Expected error: not yet measured on workloads outside the estimator's fit set for this device."
    return (
        f"Expected error (bench/estimator.py's held-out models, none fitted on): {held.within} of {held.configs} "
        f"configs within ±{held.band:.0%}, median {held.median:.1%}; the most one measured above its prediction: "
        f"{-held.worst_under:.1%}."
    )


# How `elastune estimate` names the overhead model's terms (memory/overhead.py `other_parts`).
OVERHEAD_LABELS = {
    "runtime": "runtime (torch, autograd, data, kernels' scratch)",
    "activation_holes": "heap: freed activation blocks",
    "gradient_holes": "heap: freed gradient blocks",
    "heap_rounding": "heap: page and chunk rounding",
    "small_block_heap": "heap: small blocks' churn (under 256 KiB)",
    "onednn_cache": "oneDNN primitive cache",
    "allocator": "caching allocator: rounding, fragmentation, kernels' buffers",
    "data_reader": "data reader (pyarrow, text read ahead, parsed blocks)",
}


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


def _untrusted_config(
    config: Path | None, sets: list[str], from_sweep: str | None, tracking_uri: str | None
) -> RunConfig:
    """A remote client's run: its config file or a sweep's best config (read back from the tracking
    store), and its overrides read as untrusted YAML (elastune.yamlsafe: no anchors, aliases, tags
    or merge keys, bounded), held to the allowlist and to CLIENT_LIMITS (exit 2 naming each problem,
    before anything runs), with the checkpoint path this process chooses, keyed by the job id."""
    from elastune.config import apply_overrides
    from elastune.dotted import flatten
    from elastune.errors import ConfigError
    from elastune.tuning.sweep import ray_job_id
    from elastune.untrusted import (
        client_checkpoint,
        limit_problems,
        override_problems,
        parse_client_overrides,
        read_stored_config,
        stored_config_problems,
    )
    from elastune.validate import validate_run_config

    source, field = "a remote client's run", "from_sweep" if from_sweep else "config"
    nested, problems = parse_client_overrides(sets, field="--set")
    problems += override_problems(sets, field="--set")
    raw: dict[str, Any] = {}
    if from_sweep is not None:
        raw = _best_trial(from_sweep, tracking_uri).config
        problems += stored_config_problems(raw, field=field)
    elif config is not None:
        raw = read_stored_config(config, field)
        problems += stored_config_problems(raw, field=field)
    if problems:
        raise ConfigError(problems, source=source)
    raw = apply_overrides(raw, nested)
    set_keys = set(flatten(nested))
    over = limit_problems(validate_run_config(raw, source=source))
    if over:
        named = [replace(p, path=f"{'--set' if p.path in set_keys else field}.{p.path}") for p in over]
        raise ConfigError(named, source=source)
    job_id = ray_job_id() or f"local-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    return validate_run_config(apply_overrides(raw, {"checkpoint": {"path": str(client_checkpoint(job_id))}}), source)


def _best_trial(sweep_id: str, tracking_uri: str | None) -> Any:
    from elastune.tracking.mlflow import load_sweep

    best = load_sweep(sweep_id, tracking_uri).best()
    if best is None:
        raise InputError(f"--from-sweep {sweep_id}: the sweep has no feasible trial, so no best config to train")
    return best


def _best_config(sweep_id: str, tracking_uri: str | None) -> dict[str, Any]:
    """The best trial's config, as this user may trust it (docs/security.md). The store is shared:
    where the sweep's local state holds its spec (it ran here), the config is that spec with the
    trial's parameters, which must be a point of its space; else the stored config is taken only
    if every key that names a file, a folder or a module is at its default, as for a UI client."""
    from elastune.errors import ConfigError
    from elastune.tuning.state import check_sweep_id, trusted_spec
    from elastune.tuning.sweep import sweeps_home
    from elastune.untrusted import stored_config_problems

    best = _best_trial(sweep_id, tracking_uri)
    home = sweeps_home().expanduser().resolve()
    spec = trusted_spec(home, check_sweep_id(sweep_id, home, field="--from-sweep"))
    if spec is not None:
        problem = spec.point_problem(best.params)
        if problem is not None:
            raise InputError(
                f"--from-sweep {sweep_id}: the best trial's parameters in the store are not a point of the "
                f"sweep's space ({problem}); the store was altered: pick another sweep"
            )
        config: dict[str, Any] = spec.trial_config(best.params).to_dict()
        return config
    problems = stored_config_problems(best.config, field="from_sweep")
    if problems:
        raise ConfigError(
            problems,
            source=f"the store's best config of {sweep_id} (no spec of it in {home}: it ran elsewhere, and the "
            "store is not trusted to name files or modules; train a config file you have checked instead)",
        )
    return dict(best.config)


def config_schema() -> None:
    """Print the JSON schema of a run config."""
    print(dumps(RunConfig.model_json_schema()))


CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Also run what train checks before it starts: read the data files, build the workload with "
        "its options, apply the embedding strategy's rules (imports torch: a second or more).",
    ),
]


def config_show(
    config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table, check: CheckOpt = False
) -> None:
    """Print the resolved config (defaults, then the file, then --set overrides), with every field
    checked (types, ranges, names, the rules between fields); --check adds the components' checks."""
    import yaml

    from elastune.validate import load_run_config

    cfg = load_run_config(config, set_ or [], components=check)
    if format is Format.json:
        print(dumps(cfg.to_dict()))
    else:
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")


def _read_note(seconds: float) -> str:
    """What the timed stretch spent reading a synthetic source, left out of the throughput."""
    return f" (and {seconds:.1f} s reading synthetic data, left out of the throughput)" if seconds else ""


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
        ("timed training", f"{r.elapsed_s:.1f} s{_read_note(r.synthetic_read_s)}"),
    ]
