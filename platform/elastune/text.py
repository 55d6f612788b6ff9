"""Text that others could have written, made fit for a terminal.

The MLflow store is shared by a team and its jobs, Ray's temp folder by every user of a machine,
and an EDO broker by every trial on a cluster: a sweep id, a parameter, an error read back from
them is whatever was written. Printed raw, an escape sequence in it drives the terminal (retitles
the window, recolours or hides what follows), and a `[/bold]` in it breaks rich's markup (a
crash). `printable` drops the control characters; `safe_text` also escapes rich's markup, for
every stored string a rich console prints with markup on. JSON output needs neither:
`json.dumps` escapes every control character (and, by default, everything beyond ASCII).
"""

from __future__ import annotations

from rich.markup import escape

__all__ = ["printable", "safe_text"]

# Line breaks and tabs become a space (a stored value stays on the line it is printed on, and its
# words apart); every other C0 control (ESC among them), DEL and the C1 controls (U+0080-U+009F:
# U+009B is an 8-bit CSI to some terminals) are dropped, as are the bidirectional overrides and
# isolates, which reorder what the terminal shows after them. Printable unicode stays.
_SPACES = "\t\n\v\f\r\x1c\x1d\x1e\x1f\x85\u2028\u2029"
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_TABLE: dict[int, str | None] = {**dict.fromkeys(_CONTROLS), **{ord(c): " " for c in _SPACES}}


def printable(value: object) -> str:
    """`str(value)` without control characters: line breaks and tabs as spaces, the rest dropped.
    For text printed without markup (`markup=False`, a plain line, a shell command)."""
    return str(value).translate(_TABLE)


def safe_text(value: object) -> str:
    """`printable(value)` with rich's markup escaped: for a stored string in a rich console's
    markup (a table cell, a title, a line printed with markup on)."""
    return escape(printable(value))
