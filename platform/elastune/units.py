"""Byte sizes as people write them (`512MiB`, `2GiB`, `1.5GB`, `1073741824`: pydantic's ByteSize units,
kB to EB and KiB to EiB) and back."""

from __future__ import annotations

import math
import re

from pydantic import ByteSize, TypeAdapter, ValidationError

__all__ = ["MAX_BYTES", "human_bytes", "parse_bytes", "short_bytes"]

MAX_BYTES = 2**60  # 1 EiB: any real device or host is far below; a bound keeps hostile input finite

# pydantic's ByteSize reads the units (b, kb .. eb decimal, kib .. eib binary, case-insensitive);
# this check comes first: ASCII digits only (its \d would also take '５' or '٥', which float()
# then reads as 5), a bounded length, and a unit of letters.
_SIZE = re.compile(r"^\s*[0-9]{1,30}(?:\.[0-9]{1,30})?\s*[a-zA-Z]{0,3}\s*$", re.ASCII)
_FORMS = "write it like 512MiB, 2GiB, 1.5GB or 1073741824 (ASCII digits)"
_BYTE_SIZE = TypeAdapter(ByteSize)


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
        shown = value if len(value) <= 40 else value[:37] + "..."
        if len(value) > 80 or not _SIZE.match(value):
            raise ValueError(f"{shown!r} is not a size; {_FORMS}")
        try:
            size = int(_BYTE_SIZE.validate_python(value))
        except ValidationError:  # a unit it does not know
            raise ValueError(f"{shown!r} is not a size; {_FORMS}") from None
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


def short_bytes(n: float) -> str:
    """human_bytes to three significant digits: 95.4 MiB, 858 MiB, 1.23 GiB; how the sweep's
    console and its table write every size (the ceiling 256 MiB, not 256.00 MiB)."""
    number, unit = human_bytes(n).split()
    value = float(number)
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
