"""`elastune doctor`: check the cluster, the store and this machine before a sweep (elastune/doctor/)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from elastune.cli.common import FormatOpt, TrackingOpt, out
from elastune.errors import ElastuneError
from elastune.jsonout import Format, dumps
from elastune.text import printable, safe_text

if TYPE_CHECKING:
    from elastune.doctor.findings import Finding

__all__ = ["doctor", "doctor_table", "print_findings"]

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}
_KEEP = "\u00a0"  # a space a wrapped line never breaks at (textwrap breaks at ASCII whitespace only)
_COMMAND = re.compile(r"`[^`]*`")
_BREAKS = re.compile(r"[\t\n\x0b\x0c\r ]+")  # where textwrap may break a line


def doctor(
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster's GCS address HOST:PORT (`ray status` on the head shows it); default $RAY_ADDRESS, "
            "else none (no cluster is checked: a sweep starts its own Ray on 127.0.0.1). `auto` is refused: Ray "
            "would join whichever cluster it finds on this machine, another user's included."
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
        print_findings(findings, out)
    if failed:
        raise ElastuneError(f"{len(failed)} check(s) failed: {', '.join(failed)}; each row's fix says what to do")


def print_findings(findings: list[Finding], console: Console) -> None:
    """The table (at most 100 columns wide), then each fix that holds a command wider than the
    table's text column, whole on a line of its own: the terminal wraps it, nothing cuts or breaks
    it, so it can be copied as it is."""
    width = min(console.width, 100) if console.width else 100
    console.print(doctor_table(findings, width))
    text_w = _text_width(findings, width)
    for f in findings:
        if f.fix and not _fix_fits(f.fix, text_w):
            # markup=False: the fix is shown as written (a finding may quote a server's answer, cleaned)
            console.print(f"fix for {f.check}: {printable(f.fix)}", markup=False, highlight=False, soft_wrap=True)


def doctor_table(findings: list[Finding], width: int) -> Table:
    """One row per check: its status, then what was found with its fix under it, across the table's
    widest column. Wrapped here rather than by rich, so that a command in backticks (`ray start
    ...`) is never broken across lines: a fix holding a command wider than the column says it is
    below the table (`print_findings` prints it there, whole)."""
    check_w = max([len("check"), *(len(f.check) for f in findings)])
    text_w = _text_width(findings, width)
    table = Table(width=width, show_lines=True)
    # overflow="fold": a table squeezed below its columns' widths folds a line; it never puts "…" for the rest
    table.add_column("check", no_wrap=True, overflow="fold", min_width=check_w)
    table.add_column("status", no_wrap=True, overflow="fold")
    table.add_column("finding, and its fix", no_wrap=True, overflow="fold")
    for f in findings:
        fix = f.fix if _fix_fits(f.fix, text_w) else _BELOW
        text = _wrapped(f.finding, text_w) + (f"\n{_wrapped(fix, text_w, _FIX_LABEL)}" if f.fix else "")
        table.add_row(f.check, f"[{_STYLE[f.status]}]{f.status}[/]", text)
    return table


_FIX_LABEL = "fix: "
_BELOW = "below the table, whole (a command in it is wider than this column)"


def _text_width(findings: list[Finding], width: int) -> int:
    check_w = max([len("check"), *(len(f.check) for f in findings)])
    return max(width - check_w - len("status") - 10, 20)  # 4 borders, 2 columns of padding each


def _fix_fits(fix: str, width: int) -> bool:
    """Whether every command (and every other unbreakable run) of `fix` fits a line of the column
    after the label: else wrapping would break it mid-word."""
    kept = _COMMAND.sub(lambda m: m.group(0).replace(" ", _KEEP), printable(fix))
    # split as textwrap does, at ASCII whitespace only (str.split would break at the kept spaces too)
    return all(len(word) <= width - len(_FIX_LABEL) for word in _BREAKS.split(kept))


def _wrapped(text: str, width: int, label: str = "") -> str:
    """`label` and `text` (control characters dropped: a finding may quote a server's answer) in
    lines of at most `width`, backticked commands kept whole where they fit, escaped for rich."""
    kept = _COMMAND.sub(lambda m: m.group(0).replace(" ", _KEEP), printable(text))
    indent = " " * len(label)  # the lines after the first under the text, not the label
    lines = textwrap.wrap(kept, width, initial_indent=label, subsequent_indent=indent, break_on_hyphens=False)
    return "\n".join(safe_text(line.replace(_KEEP, " ")) for line in lines or [label])
