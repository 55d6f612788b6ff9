"""`elastune sweep`, `elastune results` and `elastune sweeps`: run (or resume) a sweep, read one back from
MLflow, list them."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from elastune.cli.common import FormatOpt, SetOpt, TrackingOpt, err, out, reading_the_store
from elastune.errors import InputError
from elastune.jsonout import Format, dumps
from elastune.text import printable, safe_text

__all__ = ["results", "sweep", "sweeps"]

TOP_TRIALS = 10  # the results table's rows unless --all
WideOpt = Annotated[bool, typer.Option("--wide", help="Every figure in its own column (needs about 180 columns).")]
AllOpt = Annotated[bool, typer.Option("--all", help=f"Every trial (default: the best {TOP_TRIALS}, then a count).")]


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
        str | None,
        typer.Option(
            help="The Ray cluster to run on: its GCS address HOST:PORT (e.g. 127.0.0.1:6379; `ray status` on the "
            "head shows it); default $RAY_ADDRESS, else a new local Ray on 127.0.0.1. `auto` is refused: Ray would "
            "join whichever cluster it finds on this machine, another user's included."
        ),
    ] = None,
    tracking_uri: TrackingOpt = None,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Continue an interrupted or stale sweep where it stopped, from its state folder "
            "($ELASTUNE_HOME/sweeps/SWEEP_ID) and the spec kept there, on the cluster --address or $RAY_ADDRESS "
            "names, else a new local Ray; finished trials are not run again. A journal its last driver left "
            "(the store was down) is written to the store first."
        ),
    ] = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show what Ray, Tune and Optuna print (hidden by default).")
    ] = False,
) -> None:
    """Search strategy, precision, micro-batch and accumulation for the highest samples/s under a ceiling.

    Exits 0 with a config found, 1 where no trial completed, 2 on bad input or where nothing was
    feasible (the message names the cheapest config and a ceiling that fits it), 130 / 143 when
    stopped by SIGINT / SIGTERM (resumable)."""
    from elastune.errors import StoreUnreachable, SweepFoundNothing, SweepInterrupted
    from elastune.tuning.display import LiveDisplay
    from elastune.tuning.outcome import outcome
    from elastune.tuning.results import results_json
    from elastune.tuning.spec import load_sweep_spec, validate_sweep_spec
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
        raise InputError(
            "--resume continues the sweep with the spec it started with (kept in its state folder); "
            "drop the spec overrides"
        )
    # on a terminal, one live progress row under the trials' lines; elsewhere plain lines
    display = LiveDisplay(err) if err.is_terminal else None
    options = SweepOptions(address=address, tracking_uri=tracking_uri, display=display, verbose=verbose)
    try:
        record = run_sweep(parsed, options, resume=resume)
    except (SweepInterrupted, StoreUnreachable) as stopped:  # the table of what ran, then (main) the line to go on
        if display is not None:
            display.close()
        if format is Format.table:
            _print_summary(stopped.record, wide=wide, hints=False)  # the error's last line resumes or syncs it
        raise
    finally:
        if display is not None:
            display.close()
    if format is Format.json:
        print(dumps(results_json(record)))
    else:
        _print_summary(record, wide=wide)
    ended = outcome(record, parsed or validate_sweep_spec(record.spec))
    if ended.exit_code:
        raise SweepFoundNothing(ended.message, ended.exit_code)


def results(
    sweep_id: Annotated[
        str | None, typer.Argument(help="A sweep id (`elastune sweeps` lists them); default the newest finished one.")
    ] = None,
    tracking_uri: TrackingOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
    all_: AllOpt = False,
) -> None:
    """Show a sweep's results, read back from MLflow."""
    from elastune.tracking.mlflow import load_sweep, newest_sweep_id
    from elastune.tuning.results import results_json

    with reading_the_store():
        newest = sweep_id is None
        if newest:
            sweep_id = newest_sweep_id(tracking_uri, finished=True) or newest_sweep_id(tracking_uri)
        record = load_sweep(sweep_id, tracking_uri)
    if newest and format is Format.table:
        # stored: whatever the store's writers put there (elastune/text.py)
        status = safe_text(record.status)
        which = "finished sweep" if record.status == "finished" else f"sweep ({status}; none has finished)"
        listed = "(`elastune sweeps` lists every one)"
        err.print(f"the newest {which}: {safe_text(record.sweep_id)} {listed}", highlight=False)
    if format is Format.json:
        print(dumps(results_json(record)))
    else:
        _print_summary(record, wide=wide, top=None if all_ else TOP_TRIALS)


def sweeps(
    tracking_uri: TrackingOpt = None,
    format: FormatOpt = Format.table,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="The newest this many.")] = 20,
) -> None:
    """List the sweeps recorded in MLflow, newest first."""
    from elastune.tracking.mlflow import sweep_summaries

    with reading_the_store():
        summaries = sweep_summaries(tracking_uri)[:limit]
    if format is Format.json:
        print(dumps([s.to_dict() for s in summaries]))
        return
    if not summaries:
        out.print("no sweeps recorded yet: `elastune sweep SPEC.yaml` runs one")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("sweep", "status", "started", "trials", "best samples/s"):
        table.add_column(column, justify="right" if column in {"trials", "best samples/s"} else "left")
    for s in summaries:
        best = f"{s.best_samples_per_s:,.0f}" if s.best_samples_per_s else "-"
        if s.best_confirmed_speedup:
            best += f" ({s.best_confirmed_speedup:.2f}× ref)"
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started_at)) if s.started_at else "-"
        trials = str(s.trials) if s.trials is not None else "-"
        table.add_row(safe_text(s.sweep_id), safe_text(s.status), started, trials, best)
    out.print(table)


def _print_summary(record: Any, wide: bool = False, top: int | None = TOP_TRIALS, hints: bool = True) -> None:
    from elastune.tuning.results import (
        COMPACT_COLUMNS,
        SUMMARY_COLUMNS,
        compact_rows,
        legend,
        short_bytes,
        summary_rows,
    )

    counts = record.counts()
    left = {"trial", "status", "parameters", "config", "#"}
    table = Table(
        title=f"sweep {safe_text(record.sweep_id)} ({safe_text(record.status)})",  # a title is markup too
        box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD,
        pad_edge=wide,
        collapse_padding=not wide,
    )
    columns: tuple[str, ...]
    if wide:
        columns, rows = SUMMARY_COLUMNS, summary_rows(record, top)
    else:
        columns, rows = COMPACT_COLUMNS, compact_rows(record, top)
    for column in columns:
        # no cell wraps: the compact columns' natural widths fit 100 columns (a narrower terminal crops)
        table.add_column(column, justify="left" if column in left else "right", no_wrap=True)
    for row in rows:
        # a cell stacks its figures a line each: each line cleaned, the stacking kept
        table.add_row(*("\n".join(safe_text(line) for line in cell.split("\n")) for cell in row), end_section=not wide)
    out.print(table)
    if rows:
        out.print(legend(record), highlight=False, markup=False)
    # highlight=False: rich would colour the digits inside a sweep id as numbers
    if len(rows) < len(record.trials):
        out.print(f"the best {len(rows)} of {len(record.trials)} trials; --all shows every one", highlight=False)
    ceiling = short_bytes(record.memory_ceiling_bytes) if record.memory_ceiling_bytes else "none"
    ref = f"{record.reference_samples_per_s:,.0f} samples/s" if record.reference_samples_per_s else "n/a"
    counted = " · ".join(f"{safe_text(status)} {n}" for status, n in counts.items() if n)
    out.print(f"ceiling {ceiling} · reference {ref} · {counted}", highlight=False)
    if hints:
        _print_next_step(record)


def _print_next_step(record: Any) -> None:
    """The command that works for the sweep's state, if one does: train its best config (finished),
    resume it (interrupted, stale), or wait for it (running)."""
    # quoted for a shell: a stored id is pasted into one
    sweep_id = shlex.quote(printable(record.sweep_id))
    if record.status == "finished" and record.best() is not None:
        said, command = "best config (MLflow artifact best_config.yaml):", f"elastune train --from-sweep {sweep_id}"
    elif record.status in {"interrupted", "stale"}:
        gone = "was interrupted" if record.status == "interrupted" else "stopped without a word (its driver is gone)"
        said, command = f"the sweep {gone}; resume it where its state folder is:", f"elastune sweep --resume {sweep_id}"
    elif record.status == "running":
        out.print("still running: these are its figures so far", highlight=False, markup=False)
        return
    else:
        return
    if len(said) + 1 + len(command) <= out.width:
        out.print(f"{said} {command}", highlight=False, markup=False)
    else:  # the command whole, on a line of its own (rich would break it at a space)
        out.print(said, highlight=False, markup=False)
        out.print(f"  {command}", highlight=False, markup=False, soft_wrap=True)
