"""Byte sizes as people write them and back (elastune/units.py), every expected value written out
by hand: the bounds, each refusal's message, and the unit each size is shown in. bench/mutation.py
found the module reached only by slow CLI and sweep tests before these."""

from __future__ import annotations

import re

import pytest
from elastune.units import MAX_BYTES, human_bytes, parse_bytes, short_bytes

FORMS = "write it like 512MiB, 2GiB, 1.5GB or 1073741824 (ASCII digits)"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.5GiB", 1_610_612_736),  # 1.5 x 2**30
        ("512MiB", 536_870_912),  # 512 x 2**20
        (" 1.5 GB ", 1_500_000_000),
        ("1", 1),
        (" " * 76 + "1GiB", 2**30),  # 80 characters: the longest accepted
        (1_073_741_824, 1_073_741_824),
        (2.5, 2),  # a float is cut to whole bytes
        (MAX_BYTES, 2**60),  # 1 EiB, the most
        ("1EiB", 2**60),
    ],
)
def test_parse_bytes_reads_sizes(value: str | int | float, expected: int) -> None:
    assert parse_bytes(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, f"must be a size; {FORMS}"),  # a bool is an int to Python, not a size
        (None, f"must be a size; {FORMS}"),
        (float("nan"), f"must be a finite size; {FORMS}"),
        (float("inf"), f"must be a finite size; {FORMS}"),
        (0, "must be above 0 bytes"),
        (-1, "must be above 0 bytes"),
        (0.5, "must be above 0 bytes"),  # cut to 0 bytes
        (2**60 + 1, "must be at most 1152921504606846976 bytes (1 EiB)"),
        (1e30, "must be at most 1152921504606846976 bytes (1 EiB)"),
        ("x" * 40, f"'{'x' * 40}' is not a size; {FORMS}"),  # 40 characters: shown whole
        ("x" * 41, f"'{'x' * 37}...' is not a size; {FORMS}"),  # longer: cut to 37 and '...'
        (" " * 77 + "1GiB", f"'{' ' * 37}...' is not a size; {FORMS}"),  # 81 characters
        ("5 XB", f"'5 XB' is not a size; {FORMS}"),  # letters, but not a unit
        ("５GiB", f"'５GiB' is not a size; {FORMS}"),  # a full-width digit
    ],
)
def test_parse_bytes_refuses_what_is_not_a_size(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_bytes(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "human", "short"),
    [
        (0, "0 B", "0 B"),
        (1000, "1000 B", "1000 B"),  # four digits: not 1e+03
        (1023, "1023 B", "1023 B"),
        (1024, "1.00 KiB", "1 KiB"),
        (-2048, "-2.00 KiB", "-2 KiB"),
        (95.4 * 2**20, "95.40 MiB", "95.4 MiB"),
        (1023 * 2**20, "1023.00 MiB", "1023 MiB"),
        (1_610_612_736, "1.50 GiB", "1.5 GiB"),
        (1.234 * 2**30, "1.23 GiB", "1.23 GiB"),
        (2**40, "1.00 TiB", "1 TiB"),
        (2**50, "1024.00 TiB", "1024 TiB"),  # TiB is the largest unit shown
    ],
)
def test_sizes_are_shown_in_binary_units(n: float, human: str, short: str) -> None:
    assert (human_bytes(n), short_bytes(n)) == (human, short)
