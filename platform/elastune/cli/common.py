"""What every `elastune` command shares: the consoles and the options spelled the same everywhere."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from elastune.jsonout import Format

__all__ = ["ConfigArg", "FormatOpt", "SetOpt", "TrackingOpt", "err", "out"]

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
