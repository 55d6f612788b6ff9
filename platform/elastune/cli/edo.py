"""`elastune edo status`: what the cluster's EDO broker holds, per device and per trial.

Registered in cli/app.py as `elastune edo`. Connects to a running cluster (never
starts one), reads `broker.read_status()`, prints, disconnects.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from elastune.errors import ElastuneError, InputError
from elastune.jsonout import Format, dumps
from elastune.units import human_bytes

__all__ = ["edo_app"]

edo_app = typer.Typer(help="EDO: several trials sharing one device's memory.", no_args_is_help=True)
NO_BROKER = "no EDO broker is running on this cluster"


@edo_app.command()
def status(
    format: Annotated[
        Format, typer.Option("--format", "-f", help="table for people, json for scripts.")
    ] = Format.table,
    address: Annotated[
        str | None,
        typer.Option("--address", help="The cluster's GCS address HOST:PORT; default: RAY_ADDRESS or the local one."),
    ] = None,
    timeline_s: Annotated[float, typer.Option("--timeline-s", help="Seconds of timeline in the json output.")] = 600.0,
) -> None:
    """Per device: capacity, reserve, free; per trial: grant, measured use, minimum, want and state."""
    report = _read(address, timeline_s)
    if report is None:
        print(NO_BROKER)
        return
    if format is Format.json:
        print(dumps(report))
        return
    console = Console()
    for device in report["devices"]:
        console.print(_table(device))


def _read(address: str | None, timeline_s: float) -> dict[str, Any] | None:
    import ray  # lazy: `elastune --help` should not pay for Ray

    from elastune.edo.broker import NAMESPACE, read_status

    try:
        # address="auto" finds RAY_ADDRESS or a local head; it never starts a cluster.
        ray.init(address=address or "auto", namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False)
    except ConnectionError as exc:
        where = address or "this machine (RAY_ADDRESS or a local head)"
        raise ElastuneError(
            f"no Ray cluster found at {where}: {exc}; start one (ray start --head) or pass --address"
        ) from exc
    except ValueError as exc:
        raise InputError(
            f"--address={address!r}: not a Ray address ({exc}); give the head's HOST:PORT, e.g. 127.0.0.1:6379"
        ) from exc
    try:
        return read_status(timeline_s)
    finally:
        ray.shutdown()


def _table(device: dict[str, Any]) -> Table:
    title = (
        f"{device['device']}: capacity {human_bytes(device['capacity_bytes'])}, reserve "
        f"{human_bytes(device['reserve_bytes'])}, free {human_bytes(device['free_bytes'])}"
    )
    table = Table(title=title, title_justify="left")
    for column in ("trial", "state", "grant", "used", "min", "want"):
        table.add_column(column, justify="left" if column in ("trial", "state") else "right")
    for t in device["trials"]:
        table.add_row(
            t["trial_id"],
            t["state"],
            *(human_bytes(t[k]) for k in ("grant_bytes", "used_bytes", "min_bytes", "want_bytes")),
        )
    if not device["trials"]:
        table.add_row("(no trials)", "", "", "", "", "")
    return table
