"""Byte sizes as people write them (`512MiB`, `2GiB`, `1.5GB`, `1073741824`) and back."""

from __future__ import annotations

import re

__all__ = ["human_bytes", "parse_bytes"]

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
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: str | int | float) -> int:
    """`"1.5GiB"` -> 1610612736. Raises ValueError with the accepted forms on anything else."""
    if isinstance(value, bool):
        raise ValueError("must be a size such as 512MiB, 2GiB, 1.5GB or a number of bytes")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    else:
        match = _SIZE.match(value)
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"{value!r} is not a size; write it like 512MiB, 2GiB, 1.5GB or 1073741824")
        number, unit = float(match.group(1)), match.group(2).lower()
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ValueError("must be above 0 bytes")
    return size


def human_bytes(n: float) -> str:
    """1610612736 -> '1.50 GiB' (binary units, as device memory is reported)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
