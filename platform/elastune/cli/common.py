"""What every `elastune` command shares: the consoles and the options spelled the same everywhere."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from elastune.errors import ElastuneError
from elastune.jsonout import Format
from elastune.text import printable

__all__ = ["ConfigArg", "FormatOpt", "SetOpt", "TrackingOpt", "err", "out", "reading_the_store"]

# Wide enough for the sweep summary's --wide table (about 180 columns: a column per figure, and the
# workload's other eval metrics) when output goes to a file or a pipe (rich assumes 80 there).
out = Console(width=None if sys.stdout.isatty() else 200)
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


@contextmanager
def reading_the_store() -> Iterator[None]:
    """An error raised while reading the MLflow store may quote what it holds (the known sweeps' ids,
    a damaged record's value), which anyone who can write to the store chose: its text loses its
    control characters, its line breaks aside; `main` escapes rich's markup when it prints it."""
    try:
        yield
    except ElastuneError as exc:
        exc.args = ("\n".join(printable(line) for line in str(exc).split("\n")),)
        raise
