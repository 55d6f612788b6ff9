"""The `elastune` command line. Thin: parse, call the library, print.

Exit codes: 0 ok, 1 runtime failure, 2 invalid input (nothing launched, written or lost).
"""

from __future__ import annotations

import secrets
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from elastune.config import RunConfig
from elastune.errors import ElastuneError, InputError
from elastune.jsonout import Format, dumps
from elastune.units import human_bytes
from elastune.validate import load_run_config

__all__ = ["app", "main"]

app = typer.Typer(
    help="Find, then run, the fastest way to train an embedding-heavy model inside a memory ceiling.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect run configs.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.command("ui")(__import__("elastune.ui_cli", fromlist=["ui"]).ui)  # `elastune ui`: see ui_cli.py
app.add_typer(__import__("elastune.memory.status_cli", fromlist=["edo_app"]).edo_app, name="edo")

# Wide enough for the sweep summary when output goes to a file or a pipe (rich assumes 80 there).
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


ConfigArg = Annotated[Path | None, typer.Argument(help="YAML run config; without it the embedded defaults are used.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a key, e.g. --set batch.micro=2048 (repeatable)."),
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table for people, json for scripts.")]


TrackingOpt = Annotated[
    str | None,
    typer.Option("--tracking-uri", help="MLflow store; default $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db."),
]


@app.command()
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
    err.print(
        f"[bold]training[/] {cfg.workload} · {cfg.embedding.strategy} · {cfg.precision} · "
        f"batch {cfg.batch.micro}×{cfg.batch.accum} · {cfg.steps} steps · device {cfg.device}"
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


@app.command()
def estimate(config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table) -> None:
    """Predict a config's peak memory without running it (fake-tensor trace + overhead model)."""
    from elastune.memory.estimate import estimate as run_estimate
    from elastune.training.precision import resolve_device

    cfg = load_run_config(config, set_ or [])
    est = run_estimate(cfg, resolve_device(cfg.device))
    if format is Format.json:
        payload = {
            "estimated_peak_bytes": est.peak_bytes,
            "kind": est.kind,
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
    table.add_row("[bold]peak[/]", f"[bold]{est.peak_bytes:,}[/]", f"[bold]{human_bytes(est.peak_bytes)}[/]")
    out.print(table)


@app.command()
def sweep(
    spec: Annotated[Path | None, typer.Argument(help="Sweep spec YAML (see search_spaces/).")] = None,
    memory_ceiling: Annotated[
        str | None, typer.Option(help="Peak memory a trial may use: 512MiB, 2GiB, 1.5GB.")
    ] = None,
    max_trials: Annotated[int | None, typer.Option(help="Proposals, screened-out ones included.")] = None,
    max_concurrent: Annotated[int | None, typer.Option(help="Trials running at once.")] = None,
    cpus_per_trial: Annotated[float | None, typer.Option(help="CPUs per trial worker.")] = None,
    gpus_per_trial: Annotated[float | None, typer.Option(help="GPUs per trial worker (below 1 shares a GPU).")] = None,
    set_: SetOpt = None,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address; default $RAY_ADDRESS, else a local Ray on 127.0.0.1.")
    ] = None,
    tracking_uri: TrackingOpt = None,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Continue an interrupted or stale sweep where it stopped, on the cluster it ran on (--address "
            "overrides); finished trials are not run again."
        ),
    ] = None,
    format: FormatOpt = Format.table,
) -> None:
    """Search strategy, precision, micro-batch and accumulation for the highest samples/s under a ceiling."""
    from elastune.errors import SweepInterrupted
    from elastune.tuning.results import results_json
    from elastune.tuning.spec import load_sweep_spec
    from elastune.tuning.sweep import SweepOptions, run_sweep

    if spec is None and resume is None:
        raise InputError("give a sweep SPEC file (e.g. search_spaces/dlrm_quick.yaml) or --resume SWEEP_ID")
    flags = {
        "constraints.memory_ceiling": memory_ceiling,
        "budget.max_trials": max_trials,
        "budget.max_concurrent": max_concurrent,
        "resources.cpus_per_trial": cpus_per_trial,
        "resources.gpus_per_trial": gpus_per_trial,
    }
    overrides = [*(set_ or []), *(f"{key}={value}" for key, value in flags.items() if value is not None)]
    parsed = load_sweep_spec(spec, overrides) if spec is not None else None
    if parsed is None and overrides:
        raise InputError("--resume continues the stored spec as it was; drop the spec overrides")
    try:
        record = run_sweep(parsed, SweepOptions(address=address, tracking_uri=tracking_uri), resume=resume)
    except SweepInterrupted as stopped:  # the table of what ran, then (main) the line that resumes it
        if format is Format.table:
            _print_summary(stopped.record)
        raise
    if format is Format.json:
        print(dumps(results_json(record)))
    else:
        _print_summary(record)


@app.command()
def results(
    sweep_id: Annotated[str | None, typer.Argument(help="A sweep id; default the newest sweep.")] = None,
    tracking_uri: TrackingOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Show a sweep's results, read back from MLflow."""
    from elastune.tracking.mlflow import load_sweep
    from elastune.tuning.results import results_json

    record = load_sweep(sweep_id, tracking_uri)
    if format is Format.json:
        print(dumps(results_json(record)))
    else:
        _print_summary(record)


def _print_summary(record: Any) -> None:
    from elastune.tuning.results import SUMMARY_COLUMNS, summary_rows

    counts = record.counts()
    table = Table(title=f"sweep {record.sweep_id} ({record.status})")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="right" if column not in {"trial", "status", "parameters"} else "left")
    for row in summary_rows(record):
        table.add_row(*(escape(cell) for cell in row))
    out.print(table)
    ceiling = human_bytes(record.memory_ceiling_bytes) if record.memory_ceiling_bytes else "none"
    ref = f"{record.reference_samples_per_s:,.0f} samples/s" if record.reference_samples_per_s else "n/a"
    out.print(
        f"ceiling {ceiling} · reference {ref} · " + " · ".join(f"{status} {n}" for status, n in counts.items() if n)
    )
    best = record.best()
    if best is not None:
        out.print(f"best config: elastune train --from-sweep {record.sweep_id}   (MLflow artifact best_config.yaml)")


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


@config_app.command("schema")
def config_schema() -> None:
    """Print the JSON schema of a run config."""
    print(dumps(RunConfig.model_json_schema()))


@config_app.command("show")
def config_show(config: ConfigArg = None, set_: SetOpt = None, format: FormatOpt = Format.table) -> None:
    """Print the resolved config (defaults, then the file, then --set overrides)."""
    import yaml

    cfg = load_run_config(config, set_ or [])
    if format is Format.json:
        print(dumps(cfg.to_dict()))
    else:
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")


def _result_dict(result: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(result)


def _summary_rows(r: Any) -> list[tuple[str, str]]:
    est = r.estimated_peak_bytes
    error = ""
    if est and r.peak_memory_bytes:
        error = f" ({(est - r.peak_memory_bytes) / r.peak_memory_bytes:+.1%} vs measured)"
    return [
        ("throughput", f"{r.samples_per_s:,.0f} samples/s (after {r.config['warmup_steps']} warm-up steps)"),
        ("peak memory, measured", f"{human_bytes(r.peak_memory_bytes)} ({r.peak_memory_kind})"),
        ("peak memory, predicted", f"{human_bytes(est) if est else 'n/a'}{error}"),
        ("eval AUC", f"{r.val_auc:.4f}"),
        ("eval log loss", f"{r.val_logloss:.4f} (constant-prediction baseline {r.baseline_logloss:.4f})"),
        ("steps × effective batch", f"{r.steps} × {r.effective_batch} = {r.samples:,} samples"),
        ("micro-batch × accumulation", f"{r.micro_batch} × {r.accum}"),
        ("OOM retries", str(r.oom_retries)),
        ("device", r.device),
        ("timed training", f"{r.elapsed_s:.1f} s"),
    ]


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=False)
    except ElastuneError as exc:
        # soft_wrap: a path (or the resume command, an interrupted sweep's last line) stays whole
        err.print(f"[bold red]{exc.label}:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except SystemExit as exc:  # typer's --help and usage errors
        return int(exc.code or 0)
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except Exception as exc:
        # Usage errors arrive here with standalone_mode=False. Recent typer releases vendor their
        # own click, so they are recognised by shape (show() and exit_code), not by class.
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            return code
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
