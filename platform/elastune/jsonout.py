"""Output for people or for scripts: the `--format` choice every command offers, and JSON that is
always valid.

Python's `json` writes NaN and Infinity as bare `NaN` / `Infinity`, which JSON has no word for and
strict parsers (jq, JavaScript's JSON.parse, Go) refuse. A figure that is not a finite number (a
metric nobody measured, a loss that diverged) is printed as null instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

__all__ = ["Format", "dumps", "finite"]


class Format(StrEnum):
    """`--format`: a table for people, JSON for scripts."""

    table = "table"
    json = "json"


def finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by None, containers walked (tuples become lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps(value: Any) -> str:
    """Indented, strictly valid JSON (raises ValueError rather than print a bare NaN)."""
    return json.dumps(finite(value), indent=2, allow_nan=False, default=str)
