"""`elastune edo status`: what the cluster's EDO broker holds, per device and per trial.

Registered in cli/app.py as `elastune edo`. Connects to a running cluster (never
starts one), reads `broker.read_status()`, prints, disconnects.

The cluster is the one the user names (`--address`, else `$RAY_ADDRESS`), else Ray's default GCS
on this machine's loopback, 127.0.0.1:6379: never Ray's `auto`, which joins the cluster named in
Ray's temp folder (`/tmp/ray/ray_current_cluster`, writable by every user of the machine) or any
GCS process it sees, so another user could point this client, and the Ray token it sends, at a
cluster of theirs.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from elastune.cluster import address_problem, connection_error_text, host_port
from elastune.errors import ElastuneError, InputError, Problem
from elastune.jsonout import Format, dumps
from elastune.text import safe_text
from elastune.units import human_bytes

__all__ = ["DEFAULT_ADDRESS", "cluster_address", "edo_app"]

edo_app = typer.Typer(help="EDO: several trials sharing one device's memory.", no_args_is_help=True)
NO_BROKER = "no EDO broker is running on this cluster"
DEFAULT_ADDRESS = "127.0.0.1:6379"  # where `ray start --head` puts the GCS of a cluster on this machine


@edo_app.command()
def status(
    format: Annotated[
        Format, typer.Option("--format", "-f", help="table for people, json for scripts.")
    ] = Format.table,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help=f"The cluster's GCS address HOST:PORT (`ray status` on the head shows it); default $RAY_ADDRESS, "
            f"else {DEFAULT_ADDRESS} (a cluster on this machine). `auto` is refused: Ray would join whichever "
            "cluster it finds on this machine, another user's included.",
        ),
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


def cluster_address(address: str | None) -> tuple[str, str]:
    """The cluster's GCS address and where it came from: --address, else $RAY_ADDRESS, else
    `DEFAULT_ADDRESS`; HOST:PORT only. Ray's `auto` (the cluster its temp folder names) and `local`
    (a new cluster) are refused, as is any other form."""
    if address:
        source = "--address"
    elif os.environ.get("RAY_ADDRESS"):
        address, source = os.environ["RAY_ADDRESS"], "--address (from $RAY_ADDRESS)"
    else:
        address, source = DEFAULT_ADDRESS, f"--address (default {DEFAULT_ADDRESS}: none given)"
    address = address.strip()
    if host_port(address) is None:
        why = (
            "is Ray's discovery through its temp folder, which any user of this machine can write: it joins "
            "whichever Ray cluster it finds here, another user's included"
            if address.lower() == "auto"
            else "is not HOST:PORT"
        )
        fix = f"give the cluster's GCS address HOST:PORT, e.g. {DEFAULT_ADDRESS} (`ray status` on the head shows it)"
        raise InputError(str(Problem(source, address, f"{why}; {fix}")))
    return address, source


def _read(address: str | None, timeline_s: float) -> dict[str, Any] | None:
    import ray  # lazy: `elastune --help` should not pay for Ray

    from elastune.compat import loopback_only_ray
    from elastune.doctor.findings import is_loopback
    from elastune.edo.broker import NAMESPACE, read_status

    address, source = cluster_address(address)
    # A loopback address stays loopback: Ray would dial this machine's network address instead,
    # where a one-machine cluster does not listen. Another host is dialled as Ray would.
    host = address.rpartition(":")[0]
    with loopback_only_ray() if is_loopback(host) else contextlib.nullcontext():
        problem = address_problem(address)  # said at once, where ray.init retries for half a minute
        if problem is not None:
            raise ElastuneError(f"{source}={address!r}: {problem.what}; {problem.fix}")
        try:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False)
        except ConnectionError as exc:
            raise ElastuneError(
                f"{source}={address!r}: no Ray cluster to join there ({connection_error_text(exc)}); run this on "
                "one of the cluster's nodes"
            ) from exc
    try:
        return read_status(timeline_s)
    finally:
        ray.shutdown()


def _table(device: dict[str, Any]) -> Table:
    # device and trial names come from the broker, which every trial on the cluster writes to
    title = (
        f"{safe_text(device['device'])}: capacity {human_bytes(device['capacity_bytes'])}, reserve "
        f"{human_bytes(device['reserve_bytes'])}, free {human_bytes(device['free_bytes'])}"
    )
    table = Table(title=title, title_justify="left")
    for column in ("trial", "state", "grant", "used", "min", "want"):
        table.add_column(column, justify="left" if column in ("trial", "state") else "right")
    for t in device["trials"]:
        table.add_row(
            safe_text(t["trial_id"]),
            safe_text(t["state"]),
            *(human_bytes(t[k]) for k in ("grant_bytes", "used_bytes", "min_bytes", "want_bytes")),
        )
    if not device["trials"]:
        table.add_row("(no trials)", "", "", "", "", "")
    return table
