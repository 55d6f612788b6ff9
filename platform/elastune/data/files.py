"""Reading a user's data file with bounded memory: every reader of a CSV, TSV, .txt or .jsonl file
(plain or .gz) opens it here.

A data file is untrusted input, whoever wrote it: one line may hold 100 MB, and a few MB of gzip
may inflate to any size. `open_bounded` hands out the file's decompressed bytes through a guard
that counts lines as the bytes pass and refuses (DataError naming the file, the line, its size and
the fix) a line over `limit` bytes, having read no more of it than the limit and one chunk
(READ_CHUNK), never the line whole; and, with `max_bytes`, a file past that many decompressed
bytes, having inflated no more than that and one chunk. gzip.open decompresses as it is read, so
a gzip bomb costs the time to inflate the limit, never the memory.

A line's length is its bytes without its line ending (`\\n` or `\\r\\n`). `bounded_lines` gives
(line number, bytes) to the line-by-line readers (text_source.py); the csv module (a table's
header, the Criteo TSV's error message) reads the guarded file through io.TextIOWrapper, and
pyarrow's CSV reader takes it as it is, with `block_size(limit, ...)`: pyarrow needs a whole row
inside one block, so the block is as long as the longest line allowed. `check_parquet_values` is
what Parquet gets instead (see its docstring).
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from elastune.config import DEFAULT_MAX_DOCUMENT_BYTES
from elastune.errors import DataError
from elastune.units import human_bytes

__all__ = [
    "DEFAULT_MAX_DOCUMENT_BYTES",
    "DataTooBig",
    "block_size",
    "bounded_lines",
    "check_parquet_values",
    "open_bounded",
]

READ_CHUNK = 1 << 20  # decompressed bytes the guard passes on at most per read
# inflated by pyarrow as they are read (what its CSV reader did by the name for the Criteo TSV)
ARROW_CODECS = {".bz2": "bz2", ".lz4": "lz4", ".zst": "zstd"}
_CR, _LF = b"\r", b"\n"
I64 = npt.NDArray[np.int64]


class DataTooBig(DataError):
    """The file is past its reader's `max_bytes` (decompressed); the reader says what the bound is for."""


def _over(path: Path, line: int, limit: int, size: int, *, whole: bool) -> DataError:
    """`size`: the line's length when `whole`, else how much of it was read before stopping."""
    said = f"is {size:,} bytes" if whole else f"is over {limit:,} bytes (reading stopped {size:,} bytes into it)"
    return DataError(
        f"{path}: line {line} {said}: data.max_document_bytes={limit:,} ({human_bytes(limit)}) is the longest "
        "line (document, row) a reader takes; split the document into shorter lines, or raise "
        "data.max_document_bytes (at most 1GiB)"
    )


class _Guard(io.RawIOBase):
    """A file's decompressed bytes, handed on in chunks of at most `limit` bytes, checked as they pass.

    A chunk is never longer than `limit`, so a line that starts and ends inside one chunk is within
    the limit: only the line a chunk opens in (begun in earlier chunks) and the one it leaves open
    need counting, which keeps the check at a few C-speed calls a chunk (find, count, rfind).
    Lines end at "\\n" ("\\r\\n" counted as the "\\n"); with `cr`, at "\\r" too, as pyarrow's CSV
    reader and Python's csv module end rows, so that line numbers are theirs."""

    def __init__(self, path: Path, limit: int, max_bytes: int | None, cr: bool) -> None:
        suffix = path.suffix.lower()
        self._f: Any
        if suffix == ".gz":
            self._f = gzip.open(path, "rb")  # noqa: SIM115 (closed in close())
        elif suffix in ARROW_CODECS:
            self._f = pa.input_stream(str(path), compression=ARROW_CODECS[suffix])
        else:
            self._f = open(path, "rb")  # noqa: SIM115
        super().__init__()
        self._path, self._limit, self._max_bytes, self._cr = path, limit, max_bytes, cr
        self._line = 1  # the line the next byte belongs to
        self._run = 0  # bytes of that line passed on so far
        self._last = b""  # the last byte passed on: a "\r" there may be half of a "\r\n"
        self._total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._f.read(min(len(buffer), self._limit, READ_CHUNK))
        if not data:  # the end: a last line's "\r" with no "\n" after it is no line ending, and counts
            if self._run > self._limit:
                raise _over(self._path, self._line, self._limit, self._run, whole=True)
            return 0
        self._total += len(data)
        if self._max_bytes is not None and self._total > self._max_bytes:
            raise DataTooBig(f"{self._path}: is over {self._max_bytes:,} bytes")
        first, last, breaks = self._breaks(data)
        if first < 0:  # the open line goes on
            self._run += len(data)
            # exact: without `cr`, a "\r" at the end may be the start of the line's ending
            if self._run - (not self._cr and data[-1:] == _CR) > self._limit:
                raise _over(self._path, self._line, self._limit, self._run, whole=False)
        else:
            before = data[first - 1 : first] if first else self._last
            length = self._run + first - (not self._cr and before == _CR)
            if length > self._limit:
                raise _over(self._path, self._line, self._limit, length, whole=True)
            self._line += breaks
            self._run = len(data) - last - 1
        self._last = data[-1:]
        buffer[: len(data)] = data
        return len(data)

    def _breaks(self, data: bytes) -> tuple[int, int, int]:
        """(where the first line ending is, where the last one is, how many lines end) in `data`;
        -1, -1, 0 when none does."""
        if not self._cr:
            return data.find(_LF), data.rfind(_LF), data.count(_LF)
        found = [i for i in (data.find(_LF), data.find(_CR)) if i >= 0]
        if not found:
            return -1, -1, 0
        # "\r\n" ends one line, also when a chunk ends between the two
        joined = data.count(b"\r\n") + (self._last == _CR and data[:1] == _LF)
        return min(found), max(data.rfind(_LF), data.rfind(_CR)), data.count(_LF) + data.count(_CR) - joined

    def close(self) -> None:
        f = getattr(self, "_f", None)  # None: open() itself failed
        if f is not None and not self.closed:
            f.close()
        super().close()


def open_bounded(
    path: Path, limit: int, *, max_bytes: int | None = None, cr_ends_lines: bool = False
) -> io.BufferedReader:
    """`path`'s decompressed bytes (gunzipped if its name ends in .gz; .bz2, .lz4 and .zst, which
    only the Criteo TSV's name may end in, inflated by pyarrow), refusing a line over `limit`
    bytes and, with `max_bytes`, a file over that many bytes (DataTooBig) while reading: see the
    module docstring. `cr_ends_lines`: a lone "\\r" ends a line too (for pyarrow's CSV reader and
    the csv module, which end rows there). OSError (a missing file, a damaged gzip stream),
    EOFError and zlib.error come through as they are: each reader names them in its own words."""
    return io.BufferedReader(_Guard(Path(path), limit, max_bytes, cr_ends_lines), buffer_size=READ_CHUNK)


def bounded_lines(path: Path, limit: int, *, max_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, the line's bytes without its `\\n` or `\\r\\n`) of `path`, as
    `open_bounded` reads it: never a line over `limit` bytes, never more than `max_bytes` in all."""
    with open_bounded(path, limit, max_bytes=max_bytes) as f:
        for number, line in enumerate(f, 1):
            yield number, line[:-2] if line.endswith(b"\r\n") else line.rstrip(_LF)


def block_size(limit: int, smallest: int) -> int:
    """pyarrow's CSV block for lines of up to `limit` bytes: it refuses ("straddling object") a
    row or header not inside one block, and a block of limit + 2 bytes holds one with its "\\r\\n"
    wherever it starts; `smallest` keeps the reader's usual block when the limit is lower."""
    return max(smallest, limit + 2)


def check_parquet_values(path: Path, rb: pa.RecordBatch, first_row: int, limit: int) -> None:
    """A Parquet row whose text, bytes or list in one column is over `limit` bytes is refused,
    naming the row, the column and the size, as a CSV line over it is.

    What this does not bound: pyarrow decompresses a Parquet page whole, and offers no cap on a
    page's declared size, so the batch is checked after it is decoded: what bounds the reading is
    the record batch (65,536 rows in both Parquet readers) and pyarrow's page-at-a-time decoding."""
    for name, col in zip(rb.schema.names, rb.columns, strict=True):
        sizes = _value_bytes(col)
        if sizes is None or not len(sizes):
            continue
        worst = int(np.argmax(sizes))
        if sizes[worst] > limit:
            raise DataError(
                f"{path}: row {first_row + worst}: column {name!r} holds {int(sizes[worst]):,} bytes, over "
                f"data.max_document_bytes={limit:,} ({human_bytes(limit)}), the most one row's value may hold; "
                "split the value, or raise data.max_document_bytes (at most 1GiB)"
            )


def _value_bytes(col: pa.Array) -> I64 | None:
    """Bytes of each row's value: a string's or binary's length, a list's items' together; None for
    a fixed-width column (numbers are a few bytes a row)."""
    t = col.type
    if pa.types.is_dictionary(t):  # a row's value is its dictionary entry: measured once per entry
        lengths = _value_bytes(col.dictionary)
        if lengths is None:
            return None
        index = col.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return np.asarray(lengths, dtype=np.int64)[index] if len(lengths) else np.zeros(len(col), np.int64)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        items = _value_bytes(pc.list_flatten(col))
        counts = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        if items is None:  # fixed-width items (numbers)
            try:
                width = max(t.value_type.bit_width // 8, 1)
            except ValueError:  # nested types this reader does not take (structs): the reader refuses them
                return None
            items = np.full(int(counts.sum()), width, dtype=np.int64)
        ends = np.cumsum(counts)
        totals = np.concatenate([[0], np.cumsum(items)])
        return totals[ends] - totals[ends - counts]
    return None
