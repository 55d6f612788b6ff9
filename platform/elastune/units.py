"""Byte sizes as people write them (`512MiB`, `2GiB`, `1.5GB`, `1073741824`) and back."""

from __future__ import annotations

import math
import re

__all__ = ["MAX_BYTES", "human_bytes", "parse_bytes"]

MAX_BYTES = 2**60  # 1 EiB: any real device or host is far below; a bound keeps hostile input finite

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
# ASCII digits only: \d would also take '５' or '٥', which float() then reads as 5.
_SIZE = re.compile(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([a-zA-Z]{0,3})\s*$", re.ASCII)
_FORMS = "write it like 512MiB, 2GiB, 1.5GB or 1073741824 (ASCII digits)"


def parse_bytes(value: str | int | float) -> int:
    """`"1.5GiB"` -> 1610612736. Raises ValueError with the accepted forms on anything else, and on
    sizes outside 1 byte .. `MAX_BYTES`."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a size; {_FORMS}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite size; {_FORMS}")
        size = int(min(value, 2.0 * MAX_BYTES))
    else:
        match = _SIZE.match(value) if len(value) <= 80 else None
        if match is None or match.group(2).lower() not in _UNITS:
            shown = value if len(value) <= 40 else value[:37] + "..."
            raise ValueError(f"{shown!r} is not a size; {_FORMS}")
        size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise ValueError("must be above 0 bytes")
    if size > MAX_BYTES:
        raise ValueError(f"must be at most {MAX_BYTES} bytes (1 EiB)")
    return size


def human_bytes(n: float) -> str:
    """1610612736 -> '1.50 GiB' (binary units, as device memory is reported)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
