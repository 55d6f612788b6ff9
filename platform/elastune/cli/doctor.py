"""`elastune doctor`: check the cluster, the store and this machine before a sweep (elastune/doctor/)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from elastune.cli.common import FormatOpt, TrackingOpt, out
from elastune.errors import ElastuneError
from elastune.jsonout import Format, dumps

__all__ = ["doctor"]

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    address: Annotated[
        str | None,
        typer.Option(help="Ray cluster's GCS address HOST:PORT; default $RAY_ADDRESS, else none (a local Ray)."),
    ] = None,
    tracking_uri: TrackingOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """What to know before a sweep: Ray, exposed ports, the MLflow store, GPUs, CPU precision, ELASTUNE_HOME."""
    from dataclasses import asdict

    from elastune.doctor import run_doctor

    findings = run_doctor(address, tracking_uri)
    failed = [f.check for f in findings if f.status == "fail"]
    if format is Format.json:
        print(dumps({"ok": not failed, "failed": failed, "findings": [asdict(f) for f in findings]}))
    else:
        table = Table(width=min(out.width, 100) if out.width else 100, show_lines=True)
        table.add_column("check", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("finding", ratio=3)
        table.add_column("fix", ratio=2)
        for f in findings:
            table.add_row(f.check, f"[{_STYLE[f.status]}]{f.status}[/]", escape(f.finding), escape(f.fix))
        out.print(table)
    if failed:
        raise ElastuneError(f"{len(failed)} check(s) failed: {', '.join(failed)}; each row's fix says what to do")
