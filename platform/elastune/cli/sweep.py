"""`elastune sweep` and `elastune results`: run (or resume) a sweep, and read one back from MLflow."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from elastune.cli.common import FormatOpt, SetOpt, TrackingOpt, out
from elastune.errors import InputError
from elastune.jsonout import Format, dumps
from elastune.units import human_bytes

__all__ = ["results", "sweep"]


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
