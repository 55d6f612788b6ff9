"""`elastune doctor`: check the cluster, the store and this machine before a sweep (elastune/doctor/)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from elastune.cli.common import FormatOpt, TrackingOpt, out
from elastune.errors import ElastuneError
from elastune.jsonout import Format, dumps
from elastune.text import printable, safe_text

if TYPE_CHECKING:
    from elastune.doctor.findings import Finding

__all__ = ["doctor", "doctor_table"]

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}
_KEEP = "\u00a0"  # a space a wrapped line never breaks at (textwrap breaks at ASCII whitespace only)
_COMMAND = re.compile(r"`[^`]*`")


def doctor(
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster's GCS address HOST:PORT; default $RAY_ADDRESS, else none (no cluster is checked: "
            "a sweep starts its own Ray on 127.0.0.1). Never discovered from Ray's temp folder."
        ),
    ] = None,
    tracking_uri: TrackingOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """What to know before a sweep: Ray and its token, exposed ports, Ray's temp folder, the MLflow store, GPUs,
    CPU precision, ELASTUNE_HOME."""
    from dataclasses import asdict

    from elastune.doctor import run_doctor

    findings = run_doctor(address, tracking_uri)
    failed = [f.check for f in findings if f.status == "fail"]
    if format is Format.json:
        print(dumps({"ok": not failed, "failed": failed, "findings": [asdict(f) for f in findings]}))
    else:
        out.print(doctor_table(findings, min(out.width, 100) if out.width else 100))
    if failed:
        raise ElastuneError(f"{len(failed)} check(s) failed: {', '.join(failed)}; each row's fix says what to do")


def doctor_table(findings: list[Finding], width: int) -> Table:
    """One row per check: its status, then what was found with its fix under it, across the table's
    widest column. Wrapped here rather than by rich, so that a command in backticks (`ray start
    ...`) is never broken across lines unless it is wider than the column."""
    check_w = max([len("check"), *(len(f.check) for f in findings)])
    text_w = max(width - check_w - len("status") - 10, 20)  # 4 borders, 2 columns of padding each
    table = Table(width=width, show_lines=True)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding, and its fix", no_wrap=True)
    for f in findings:
        text = _wrapped(f.finding, text_w) + (f"\n{_wrapped(f.fix, text_w, 'fix: ')}" if f.fix else "")
        table.add_row(f.check, f"[{_STYLE[f.status]}]{f.status}[/]", text)
    return table


def _wrapped(text: str, width: int, label: str = "") -> str:
    """`label` and `text` (control characters dropped: a finding may quote a server's answer) in
    lines of at most `width`, backticked commands kept whole where they fit, escaped for rich."""
    kept = _COMMAND.sub(lambda m: m.group(0).replace(" ", _KEEP), printable(text))
    indent = " " * len(label)  # the lines after the first under the text, not the label
    lines = textwrap.wrap(kept, width, initial_indent=label, subsequent_indent=indent, break_on_hyphens=False)
    return "\n".join(safe_text(line.replace(_KEEP, " ")) for line in lines or [label])
