"""Readers for the real Criteo click logs: the TSV text format and Parquet with the same columns."""

from __future__ import annotations

import io
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import torch

from elastune.data.clicks import NUM_DENSE, NUM_SPARSE, ClickBatch, concat_batches, empty_batch, hash_category
from elastune.data.files import DEFAULT_MAX_DOCUMENT_BYTES, block_size, check_parquet_values, open_bounded
from elastune.data.source import I64, Mask, check_range
from elastune.errors import DataError

__all__ = ["CriteoParquet", "CriteoTSV"]


@dataclass(frozen=True)
class _Block:
    """Consecutive valid rows parsed from a file, with the malformed lines skipped among them."""

    batch: ClickBatch
    malformed: list[int]  # 1-based line (row) numbers skipped
    last_line: int  # the last line number this block covered
    truncated: int = 0  # rows whose multi-hot list was cut to its MAX_IDS (table sources)


class _RowStream:
    """The valid rows of one file, from its beginning, handed out k at a time."""

    def __init__(self, batches: Iterator[ClickBatch]) -> None:
        self._batches = batches
        self._head: ClickBatch | None = None
        self.consumed = 0  # rows handed out (or skipped) so far

    def take(self, k: int) -> list[ClickBatch]:
        """Up to k rows as views of parsed blocks; fewer only when the file has run out."""
        parts: list[ClickBatch] = []
        while k > 0:
            if self._head is None or len(self._head) == 0:
                self._head = next(self._batches, None)
                if self._head is None:
                    break
                continue
            part = self._head.slice(0, k)
            self._head = self._head.slice(len(part), len(self._head))
            parts.append(part)
            k -= len(part)
            self.consumed += len(part)
        return parts

    def skip(self, k: int) -> int:
        return sum(len(p) for p in self.take(k))


def _require_file(path: Path, what: str) -> Path:
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"{path}: no such file; set {what} to an existing data file")
    return path


class _FileSource(ABC):
    """A DataSource over a data file (Criteo TSV or Parquet, a table source's CSV or Parquet):
    sequential cursor, epochs, eval split.

    * `read` keeps a cursor: a read that starts where the last one stopped continues the open file;
      any other start reopens it and skips to `start` (which costs parsing everything before it).
    * When the file runs out the stream wraps around to its first training row: sample
      `start` is training row `start mod (training rows)`, i.e. epochs follow each other.
    * Eval: with `eval_path`, the eval set is that file's rows; otherwise the first `eval_samples`
      valid rows of `path` are held out and training starts right after them.
    * Malformed rows raise DataError naming file and line, or with skip_malformed are skipped and
      counted (once each, however many epochs re-read them) in `malformed_lines`; rows a block
      reports `truncated` are counted the same way in `truncated_rows`.
    * A line (a Parquet row's value) over `max_document_bytes` is a DataError naming it, whatever
      skip_malformed says: it is refused before it is read whole (data/files.py).

    A subclass sets `num_dense`, `num_sparse` and `pooling` (the ClickBatch shape) before calling
    `__init__`, or keeps Criteo's 13, 26 and 1.
    """

    pooling: int = 1
    num_dense: int = NUM_DENSE
    num_sparse: int = NUM_SPARSE
    _fix = "fix the file or set data.skip_malformed=true to skip and count such lines"

    def __init__(
        self,
        path: Path,
        table_sizes: Sequence[int],
        *,
        eval_path: Path | None = None,
        eval_samples: int = 0,
        skip_malformed: bool = False,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    ) -> None:
        if len(table_sizes) != self.num_sparse:
            raise ValueError(f"need {self.num_sparse} table sizes, one per sparse feature, got {len(table_sizes)}")
        if eval_samples < 0:
            raise ValueError(f"eval_samples must be >= 0, got {eval_samples}")
        self.path = _require_file(path, "data.path")
        self.eval_path = _require_file(eval_path, "data.eval_path") if eval_path else None
        self.table_sizes = tuple(int(s) for s in table_sizes)
        self.held_out = 0 if self.eval_path else eval_samples
        self.skip_malformed = skip_malformed
        self.max_document_bytes = max_document_bytes
        self.malformed_lines = 0
        self.truncated_rows = 0
        self._scanned: dict[Path, int] = {}  # per file, the furthest line already counted
        self._stream: _RowStream | None = None
        self._cursor = 0  # the training sample the open stream yields next
        self._train_rows: int | None = None  # valid training rows per epoch, once known

    @abstractmethod
    def _parse(self, path: Path) -> Iterator[_Block]:
        """The file's valid rows from its start, in blocks; malformed rows per skip_malformed."""

    def read(self, start: int, n: int) -> ClickBatch:
        """Training samples [start, start + n), wrapping around the file; see the class doc."""
        check_range(start, n)
        if n == 0:
            return empty_batch(self.num_sparse, self.pooling, self.num_dense)
        try:
            if self._stream is None or start != self._cursor:
                self._seek(start)
            assert self._stream is not None
            parts: list[ClickBatch] = []
            left = n
            while left > 0:
                got = self._stream.take(left)
                parts += got
                left -= sum(len(p) for p in got)
                if left > 0:
                    self._wrap()
        except BaseException:
            self._stream = None  # a parser that raised is dead: the next read reopens the file
            raise
        self._cursor = start + n
        return concat_batches(parts)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[ClickBatch]:
        """The first n rows of the eval set, in batches (re-read from the file every call)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        source = self.eval_path or self.path
        if self.eval_path is None and n > self.held_out:
            raise DataError(
                f"{source}: asked for {n} eval samples but only eval_samples={self.held_out} rows "
                "are held out; set eval.samples accordingly or give data.eval_path"
            )
        stream = _RowStream(self._batches(source))
        for start in range(0, n, batch_size):
            want = min(batch_size, n - start)
            got = stream.take(want)
            if sum(len(p) for p in got) < want:
                raise DataError(
                    f"{source}: has only {stream.consumed} valid rows, fewer than the {n} eval "
                    "samples asked for; lower eval.samples or use a bigger file"
                )
            yield concat_batches(got)

    def _batches(self, path: Path) -> Iterator[ClickBatch]:
        for block in self._parse(path):
            seen = self._scanned.get(path, 0)
            self.malformed_lines += sum(1 for line in block.malformed if line > seen)
            self.truncated_rows += block.truncated if block.last_line > seen else 0
            self._scanned[path] = max(seen, block.last_line)
            yield block.batch

    def _open_training(self) -> _RowStream:
        """A stream at training row 0, i.e. past the held-out eval rows."""
        stream = _RowStream(self._batches(self.path))
        if stream.skip(self.held_out) < self.held_out:
            raise DataError(
                f"{self.path}: has only {stream.consumed} valid rows, fewer than the "
                f"{self.held_out} held out for evaluation, so none are left to train on; lower "
                "eval.samples or give data.eval_path"
            )
        return stream

    def _wrap(self) -> None:
        """The open stream hit the end of the file: record the epoch length and start over."""
        assert self._stream is not None
        rows = self._stream.consumed - self.held_out
        if rows == 0:
            raise DataError(
                f"{self.path}: no valid training rows after the {self.held_out} held out for "
                "evaluation; lower eval.samples or give data.eval_path"
            )
        self._train_rows = rows
        self._stream = self._open_training()

    def _seek(self, start: int) -> None:
        self._stream = self._open_training()
        left = start % self._train_rows if self._train_rows else start
        while left > 0:
            left -= self._stream.skip(left)
            if left > 0:
                self._wrap()
                assert self._train_rows is not None
                left %= self._train_rows

    def _malformed(self, path: Path, line: int, problem: str) -> DataError:
        return DataError(f"{path}:{line}: {problem}; {self._fix}")


def _rows_to_batch(labels: npt.ArrayLike, ints: npt.ArrayLike, ids: npt.ArrayLike) -> ClickBatch:
    """Parsed columns -> a ClickBatch: dense log1p(max(x, 0)), sparse [B, 26, 1].

    Counts are converted through float64 so a huge count cannot overflow an int64 on the way."""
    counts = np.asarray(ints, dtype=np.float64).reshape(-1, NUM_DENSE)
    return ClickBatch(
        torch.from_numpy(np.log1p(np.maximum(counts, 0.0)).astype(np.float32)),
        torch.from_numpy(np.asarray(ids, dtype=np.int64).reshape(-1, NUM_SPARSE, 1)),
        torch.from_numpy(np.asarray(labels, dtype=np.float32)),
    )


# ----------------------------------------------------------------------------------------------
# Criteo TSV
# ----------------------------------------------------------------------------------------------

_TSV_FIELDS = 1 + NUM_DENSE + NUM_SPARSE


class _Malformed(ValueError):
    """A line that is not a Criteo row; the message says what is wrong with it."""


def _parse_tsv_line(line: str, sizes: Sequence[int]) -> tuple[int, list[int], list[int]]:
    """`label \\t I1..I13 \\t C1..C26` -> (label, ints, row ids); raises _Malformed."""
    fields = line.rstrip("\n").rstrip("\r").split("\t")
    if len(fields) != _TSV_FIELDS:
        raise _Malformed(
            f"expected {_TSV_FIELDS} tab-separated fields (label, {NUM_DENSE} integer, "
            f"{NUM_SPARSE} categorical), found {len(fields)}"
        )
    if fields[0] not in ("0", "1"):
        raise _Malformed(f"the label must be 0 or 1, found {fields[0]!r}")
    try:
        ints = [int(v) if v else 0 for v in fields[1 : 1 + NUM_DENSE]]
    except ValueError:
        j, v = next((j, v) for j, v in enumerate(fields[1 : 1 + NUM_DENSE], 1) if not _is_int(v))
        raise _Malformed(f"I{j} must be an integer or empty, found {v!r}") from None
    cats = fields[1 + NUM_DENSE :]
    try:  # hash_category, inlined: this is the reader's hot loop
        ids = [int(v, 16) % s if v else 0 for v, s in zip(cats, sizes, strict=True)]
    except ValueError:
        j, v = next((j, v) for j, v in enumerate(cats, 1) if not _is_hex(v))
        raise _Malformed(f"C{j} must be a hex string or empty, found {v!r}") from None
    return int(fields[0]), ints, ids


def _is_int(v: str) -> bool:
    try:
        int(v or "0")
    except ValueError:
        return False
    return True


def _is_hex(v: str) -> bool:
    try:
        int(v or "0", 16)
    except ValueError:
        return False
    return True


class CriteoTSV(_FileSource):
    """The Criteo Kaggle / Terabyte text format (optionally .gz); implements DataSource.

    Each line is `label \\t I1..I13 \\t C1..C26`: integer counts (empty = missing = 0, negative
    clamped to 0) and hex-hashed categoricals (empty = missing = row 0), the latter mapped into
    each table with `hash_category`. pyarrow's CSV reader splits the lines (in C++, block by
    block); the checks and conversions run on whole columns, and only the rare value that is not in
    canonical form (`+5`, `0x1f`, a hex string longer than 16 digits) goes through Python's `int`,
    so a file reads as the line-by-line parser `_parse_tsv_line` would read it. A malformed line's
    message is that parser's, for the line read again. The file reaches pyarrow through
    files.open_bounded (which gunzips a .gz), so a line over max_document_bytes is refused by its
    number before pyarrow holds it. See _FileSource for the cursor, epoch and eval semantics.
    """

    block_bytes = 1 << 20  # pyarrow's read block, at least (files.block_size: the longest line fits one)

    def _parse(self, path: Path) -> Iterator[_Block]:
        invalid: list[int] = []  # line numbers pyarrow found with the wrong number of fields

        def wrong_field_count(row: pa_csv.InvalidRow) -> str:
            invalid.append(int(row.number) if row.number is not None else -1)
            return "skip"

        with open_bounded(path, self.max_document_bytes, cr_ends_lines=True) as f:  # as pyarrow ends rows
            yield from self._parse_lines(path, f, invalid, wrong_field_count)

    def _parse_lines(
        self,
        path: Path,
        f: IO[bytes],
        invalid: list[int],
        on_invalid: Callable[[pa_csv.InvalidRow], str],
    ) -> Iterator[_Block]:
        try:
            reader = self._open_tsv(f, on_invalid)
        except pa.ArrowInvalid as exc:
            if "Empty CSV file" in str(exc):
                return  # no rows: the callers say what is missing
            raise DataError(f"{path}: cannot be read as text ({exc}); {self._fix}") from None
        except (OSError, EOFError, zlib.error) as exc:  # a damaged .gz stream
            raise DataError(f"{path}: cannot be read as text ({exc}); {self._fix}") from None
        last_line = 0
        for record_batch in self._blocks(path, reader):
            skipped, invalid[:] = sorted(invalid), []
            lines = _line_numbers(last_line, record_batch.num_rows, skipped)
            last_line = int(lines[-1]) if len(lines) else max([last_line, *skipped])
            columns = [record_batch.column(k) for k in range(_TSV_FIELDS)]
            labels, counts, ids, bad = _convert_tsv(columns, self.table_sizes)
            malformed = sorted([*skipped, *(int(n) for n in lines[bad])])
            if malformed and not self.skip_malformed:
                raise self._malformed(path, malformed[0], _problem_at(path, malformed[0], self.max_document_bytes))
            keep = ~bad
            batch = ClickBatch(
                torch.from_numpy(np.log1p(np.maximum(counts[keep], 0.0)).astype(np.float32)),
                torch.from_numpy(ids[keep].reshape(-1, NUM_SPARSE, 1)),
                torch.from_numpy(labels[keep].astype(np.float32)),
            )
            yield _Block(batch, malformed, last_line)
        if invalid:  # lines past the last block (a file whose last lines are all malformed)
            skipped = sorted(invalid)
            if not self.skip_malformed:
                raise self._malformed(path, skipped[0], _problem_at(path, skipped[0], self.max_document_bytes))
            yield _Block(empty_batch(NUM_SPARSE, 1), skipped, max(last_line, skipped[-1]))

    def _open_tsv(self, f: IO[bytes], on_invalid: Callable[[pa_csv.InvalidRow], str]) -> pa_csv.CSVStreamingReader:
        """A streaming reader of the file's lines as 40 binary columns; lines with another number
        of fields go to `on_invalid`."""
        block = block_size(self.max_document_bytes, self.block_bytes)
        return pa_csv.open_csv(
            f,
            read_options=pa_csv.ReadOptions(column_names=_TSV_COLUMNS, use_threads=False, block_size=block),
            parse_options=pa_csv.ParseOptions(
                delimiter="\t", quote_char=False, ignore_empty_lines=False, invalid_row_handler=on_invalid
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types=dict.fromkeys(_TSV_COLUMNS, pa.binary()),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )

    def _blocks(self, path: Path, reader: pa_csv.CSVStreamingReader) -> Iterator[pa.RecordBatch]:
        try:
            yield from reader
        except (pa.ArrowInvalid, OSError, EOFError, zlib.error) as exc:  # e.g. a damaged .gz stream
            raise DataError(f"{path}: cannot be read as text ({exc}); {self._fix}") from None


_TSV_COLUMNS = ["label", *(f"I{j}" for j in range(1, NUM_DENSE + 1)), *(f"C{j}" for j in range(1, NUM_SPARSE + 1))]
_HEX_WIDTH = 16  # hex digits decoded on whole columns: a uint64
_NOT_HEX = 255
_NIBBLE = np.full(256, _NOT_HEX, dtype=np.uint8)  # ASCII byte -> its hex digit's value
for _k, _c in enumerate(b"0123456789abcdef"):
    _NIBBLE[_c] = _k
for _k, _c in enumerate(b"ABCDEF", start=10):
    _NIBBLE[_c] = _k


def _line_numbers(after: int, rows: int, skipped: list[int]) -> npt.NDArray[np.int64]:
    """The file line of each of a block's rows: the lines after `after`, less those skipped."""
    numbers = np.arange(after + 1, after + 1 + rows + len(skipped), dtype=np.int64)
    return numbers[~np.isin(numbers, skipped)][:rows] if skipped else numbers[:rows]


def _convert_tsv(
    columns: list[pa.Array], sizes: Sequence[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], I64, Mask]:
    """(labels, counts as float64, row ids, rows that are malformed) of one block's columns."""
    n = len(columns[0])
    label = columns[0]
    ones = pc.equal(label, pa.scalar(b"1", pa.binary())).to_numpy(zero_copy_only=False)
    zeros = pc.equal(label, pa.scalar(b"0", pa.binary())).to_numpy(zero_copy_only=False)
    bad = ~(ones | zeros)
    counts = np.zeros((n, NUM_DENSE), dtype=np.float64)
    for j, col in enumerate(columns[1 : 1 + NUM_DENSE]):
        counts[:, j] = _counts(col, bad)
    ids = np.zeros((n, NUM_SPARSE), dtype=np.int64)
    for j, (col, size) in enumerate(zip(columns[1 + NUM_DENSE :], sizes, strict=True)):
        ids[:, j] = _row_ids(col, size, bad)
    return ones.astype(np.int64), counts, ids, bad


def _counts(col: pa.Array, bad: Mask) -> npt.NDArray[np.float64]:
    """An integer column as float64 (empty: 0). Arrow parses a column of plain integers at once;
    a column with anything else (`+5`, ` 7`, a count past int64, a bad byte) is read value by value
    with Python's `int`, as the line parser reads it, marking in `bad` the rows it refuses."""
    filled = pc.if_else(pc.equal(pc.binary_length(col), 0), pa.scalar(b"0", pa.binary()), col)
    try:
        values: npt.NDArray[np.float64] = (
            pc.cast(pc.cast(filled, pa.string()), pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64)
        )
        return values
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = np.zeros(len(col), dtype=np.float64)
    for r, raw in enumerate(col.to_pylist()):
        text = raw.decode("utf-8", errors="replace")
        if _is_int(text):
            out[r] = float(int(text)) if text else 0.0
        else:
            bad[r] = True
    return out


def _row_ids(col: pa.Array, size: int, bad: Mask) -> I64:
    """A hex categorical column as row ids `int(value, 16) % size` (empty: 0). Values of up to 16
    hex digits are decoded on the whole column (packed into big-endian uint64s); any other value
    goes through Python's `int`, as the line parser reads it, marking in `bad` the rows it refuses."""
    n = len(col)
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset : col.offset + n + 1].astype(np.int64)
    data = np.frombuffer(col.buffers()[2], dtype=np.uint8) if col.buffers()[2] is not None else np.zeros(1, np.uint8)
    lengths = np.diff(offsets)
    short = lengths <= _HEX_WIDTH
    # Each value right-aligned in _HEX_WIDTH bytes, '0' on its left: the digits of a 64-bit number.
    column = np.arange(_HEX_WIDTH)
    present = (column[None, :] >= _HEX_WIDTH - lengths[:, None]) & short[:, None]
    where = offsets[:-1, None] + lengths[:, None] - _HEX_WIDTH + column[None, :]
    digits = np.full((n, _HEX_WIDTH), ord("0"), dtype=np.uint8)
    digits[present] = data[where[present]]
    nibbles = _NIBBLE[digits]
    fast = short & (nibbles != _NOT_HEX).all(axis=1)
    packed = np.ascontiguousarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2])
    values = packed.view(">u8").reshape(n).astype(np.uint64)
    ids = (values % np.uint64(size)).astype(np.int64)
    for r in np.flatnonzero(~fast):  # long, odd (`0x1f`, ` a`) or not hex: Python's int decides
        text = col[int(r)].as_py().decode("utf-8", errors="replace")
        if _is_hex(text):
            ids[r] = int(text, 16) % size if text else 0
        else:
            bad[r] = True
    return ids


def _problem_at(path: Path, line: int, limit: int) -> str:
    """What `_parse_tsv_line` says about the file's `line` (read again: only for the error), its
    lines ended as pyarrow ends them ("\\n", "\\r\\n" or "\\r"). Undecodable bytes become U+FFFD,
    which then fail the field checks with the line's number."""
    with io.TextIOWrapper(open_bounded(path, limit, cr_ends_lines=True), encoding="utf-8", errors="replace") as f:
        for number, text in enumerate(f, 1):
            if number == line:
                try:
                    _parse_tsv_line(text, [2] * NUM_SPARSE)
                except _Malformed as exc:
                    return str(exc)
                break
    return "not a Criteo row"


# ----------------------------------------------------------------------------------------------
# Criteo Parquet
# ----------------------------------------------------------------------------------------------

_DENSE_COLUMNS = [f"I{j}" for j in range(1, NUM_DENSE + 1)]
_SPARSE_COLUMNS = [f"C{j}" for j in range(1, NUM_SPARSE + 1)]
_COLUMNS = ["label", *_DENSE_COLUMNS, *_SPARSE_COLUMNS]


class CriteoParquet(_FileSource):
    """Criteo columns `label, I1..I13, C1..C26` in Parquet; implements DataSource.

    Integer columns may be any integer or integral float type (null = missing = 0) or strings;
    categoricals may be hex strings (hashed with `hash_category`) or integers (value % size).
    The file is read in record batches, never whole; "line" in messages is the 1-based row.
    See _FileSource for the cursor, epoch and eval semantics.
    """

    block_rows = 65536
    _fix = "fix the file or set data.skip_malformed=true to skip and count such rows"

    def __init__(
        self,
        path: Path,
        table_sizes: Sequence[int],
        *,
        eval_path: Path | None = None,
        eval_samples: int = 0,
        skip_malformed: bool = False,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    ) -> None:
        super().__init__(
            path,
            table_sizes,
            eval_path=eval_path,
            eval_samples=eval_samples,
            skip_malformed=skip_malformed,
            max_document_bytes=max_document_bytes,
        )
        for p in (self.path, self.eval_path):
            if p is not None:
                self._check_columns(p)

    @staticmethod
    def _open(path: Path) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{path}: not a readable Parquet file ({e})") from None

    def _check_columns(self, path: Path) -> None:
        names = set(self._open(path).schema_arrow.names)
        missing = [c for c in _COLUMNS if c not in names]
        if missing:
            raise DataError(
                f"{path}: missing column(s) {', '.join(missing)}; a Criteo Parquet file needs label, I1..I13, C1..C26"
            )

    def _parse(self, path: Path) -> Iterator[_Block]:
        first_row = 1
        for record_batch in self._open(path).iter_batches(self.block_rows, columns=_COLUMNS):
            check_parquet_values(path, record_batch, first_row, self.max_document_bytes)
            yield self._convert(path, record_batch, first_row)
            first_row += record_batch.num_rows

    def _convert(self, path: Path, rb: pa.RecordBatch, first_row: int) -> _Block:
        """One record batch -> its valid rows; `bad` collects each column's malformed rows."""
        label, label_bad, label_missing = _int_column(path, rb, "label", int)
        bad = {"label": label_bad | label_missing | (label > 1) | (label < 0)}
        ints = np.empty((rb.num_rows, NUM_DENSE), dtype=np.int64)
        for j, name in enumerate(_DENSE_COLUMNS):
            ints[:, j], bad[name], _ = _int_column(path, rb, name, _parse_count)
        ids = np.empty((rb.num_rows, NUM_SPARSE), dtype=np.int64)
        for j, (name, size) in enumerate(zip(_SPARSE_COLUMNS, self.table_sizes, strict=True)):
            parse = partial(hash_category, size=size)
            values, bad[name], _ = _int_column(path, rb, name, parse)
            ids[:, j] = np.remainder(values, size)
        any_bad = np.logical_or.reduce(list(bad.values()))
        rows = np.flatnonzero(any_bad)
        if len(rows) and not self.skip_malformed:
            row = int(rows[0])
            name = next(n for n, b in bad.items() if b[row])
            problem = f"column {name}: {_EXPECTED[name[0]]}, found {rb.column(name)[row].as_py()!r}"
            raise self._malformed(path, first_row + row, problem)
        keep = ~any_bad
        batch = _rows_to_batch(label[keep], ints[keep], ids[keep])
        return _Block(batch, [first_row + int(r) for r in rows], first_row + rb.num_rows - 1)


_EXPECTED = {
    "l": "the label must be 0 or 1",
    "I": "expected an integer or null",
    "C": "expected a hex string, an integer or null",
}


def _parse_count(value: str) -> int:
    return int(value) if value else 0


def _int_column(path: Path, rb: pa.RecordBatch, name: str, parse: Callable[[str], int]) -> tuple[I64, Mask, Mask]:
    """(values, malformed, missing) for a column read as integers; missing (null, NaN) reads as 0.

    Strings are parsed with `parse`, once per distinct value: categoricals repeat a lot (that is
    the Zipf skew), so this is much cheaper than parsing every cell.
    """
    col = rb.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    t = col.type
    missing = col.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        values = col.cast(pa.int64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False)
        return values.astype(np.int64), np.zeros(len(col), dtype=np.bool_), missing
    if pa.types.is_floating(t):
        x = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        missing |= np.isnan(x)
        x[missing] = 0.0
        bad = ~np.isfinite(x) | (x != np.floor(x)) | (np.abs(x) > 2.0**62)
        return np.where(bad, 0.0, x).astype(np.int64), bad, missing
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return (*_parse_strings(col, parse), missing)
    raise DataError(f"{path}: column {name} has type {t}; expected integers or strings")


def _parse_strings(col: pa.Array, parse: Callable[[str], int]) -> tuple[I64, Mask]:
    encoded = col.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    parsed = np.zeros(len(distinct) + 1, dtype=np.int64)  # the extra last entry serves nulls
    invalid = np.zeros(len(distinct) + 1, dtype=np.bool_)
    for i, v in enumerate(distinct):
        try:
            parsed[i] = parse(v)
        except (ValueError, OverflowError):
            invalid[i] = True
    index = encoded.indices.fill_null(len(distinct)).to_numpy(zero_copy_only=False)
    return parsed[index], invalid[index]
