"""`data.source: table`: the user's own columns, read from CSV or Parquet with a declared schema.

```yaml
data:
  source: table
  path: clicks.parquet            # or .csv / .tsv / .csv.gz / .tsv.gz / .pq (the suffix says which)
  schema: {label: clicked, dense: [age, price], categorical: [city, device], multi_hot: {tags: 8}}
  encoding: vocabulary            # or hash, with hash_buckets: 100000 (or {city: 1000, ...})
  min_count: 2
```

What a row becomes (a `ClickBatch`, data.py):

* dense: float32 [B, len(schema.dense)], the numbers as given (int or float columns; null and NaN
  read as 0). No log1p or scaling: elastune cannot know what a column measures, and a transform the
  user did not ask for would be one more thing to undo when serving; scale columns in the file.
* labels: the label column, which must hold 0 or 1 (the workloads are binary classifiers).
* sparse: int64 [B, F, P], one feature per categorical column, then one per multi_hot column, each
  looked up in its own table named as the column (so `embedding.overrides` match column names).
  P is the largest multi_hot MAX_IDS (1 without multi_hot columns). A bag shorter than P, and every
  single-valued column, is padded with id 0; id 0 is also a missing value (null or empty). Row 0
  is an ordinary, learned row of the table: DLRM sums a bag, so padding adds the same learned
  vector to every bag of that length (a bias the model can use or cancel), not nothing.
  A multi_hot list longer than its MAX_IDS keeps its first MAX_IDS ids; the source counts the rows
  cut in `truncated_rows` (once per row, however many epochs re-read it). A multi_hot column is a
  list column in Parquet (of strings or integers) or, in CSV or a Parquet string column, text of
  values separated by `|` (`a|b|c`; an empty item is a missing value, id 0).

Categorical values become ids by their text (an integer 7 and the string "7" are the same value):

* `encoding: vocabulary` (default): ONE streaming pass over data.path counts every value of every
  categorical and multi_hot column. Values seen at least `min_count` times are kept, sorted by
  descending count then by value (deterministic), and numbered from 2; id 0 is missing/padding, id 1
  the bucket shared by rare values (seen fewer than min_count times) and by values the training file
  does not have (e.g. new values in eval_path). A table has (kept values + 2) rows: sizes come from
  the data. With the default min_count=2, values seen once train row 1, which unseen values use.
  The vocabulary is a JSON file (never a pickle) cached in $ELASTUNE_HOME/vocabularies/, keyed by a
  fingerprint of the file (path, size, mtime) and of what shapes the ids (schema, min_count): the
  validation, the estimator, the driver and every trial on the machine load it instead of re-reading
  the file; a changed file gets a new one. A run with checkpoint.path writes it beside the checkpoint
  (`<checkpoint>.vocab.json`) and a sweep logs it to its MLflow parent run (artifact `vocabulary/`).
* `encoding: hash`: no pass over the data. A value goes to row 1 + (blake2b-64 of its UTF-8 text
  mod (rows - 1)) of a table of `hash_buckets` rows (row 0 stays missing/padding): stable across
  processes and runs, unlike Python's salted `hash()`.

Bad input is a DataError naming the file and the column (and the row for a value): a missing
column, a dense or label column that is not numeric, a label outside {0, 1}, an empty file, a file
that is not CSV or Parquet, a multi_hot column that is neither a list nor text. Validation
(validate.py: `check_table_data`) reads the schema and the first rows of each file, and with the
vocabulary encoding the whole training file; rows read later fail the same way when they are read.
Epochs, the cursor and the eval split are those of every file source (criteo_files._FileSource).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import torch

from elastune.config import DataConfig, TableSchema, elastune_home, table_format
from elastune.data.clicks import ClickBatch
from elastune.data.criteo import _Block, _FileSource
from elastune.data.files import block_size, check_parquet_values, open_bounded
from elastune.data.source import F64, I64, DataArtifact
from elastune.errors import DataError

__all__ = [
    "FIRST_ID",
    "MISSING_ID",
    "MULTI_HOT_SEPARATOR",
    "RARE_ID",
    "TableLayout",
    "TableSource",
    "Vocabulary",
    "check_table_data",
    "hash_id",
    "table_layout",
    "vocabulary_artifact",
    "vocabulary_file",
    "vocabulary_json",
    "vocabulary_of",
]

MISSING_ID = 0  # a null or empty value, and the padding of bags
RARE_ID = 1  # vocabulary: values seen fewer than min_count times, and values not seen at all
FIRST_ID = 2  # vocabulary: the most frequent kept value
MULTI_HOT_SEPARATOR = "|"
VOCABULARY_FORMAT = "elastune.vocabulary/1"
BLOCK_ROWS = 65536  # rows per record batch (a CSV block longer than that is cut into such batches)
CSV_BLOCK_BYTES = 1 << 20  # CSV bytes per read block, at least (files.block_size: a row fits in one)


# ----------------------------------------------------------------------------------------------
# Reading: the schema's columns, streamed in record batches
# ----------------------------------------------------------------------------------------------


def _roles(schema: TableSchema) -> dict[str, str]:
    return {
        schema.label: "label",
        **dict.fromkeys(schema.dense, "dense"),
        **dict.fromkeys(schema.categorical, "categorical"),
        **dict.fromkeys(schema.multi_hot, "multi_hot"),
    }


def _record_batches(path: Path, schema: TableSchema, limit: int) -> Iterator[pa.RecordBatch]:
    """The schema's columns of `path`, in record batches; the file is never read whole, and a row
    over `limit` bytes (data.max_document_bytes) is refused (data/files.py)."""
    if table_format(path) == "parquet":
        yield from _parquet_batches(path, schema, limit)
    else:
        yield from _csv_batches(path, schema, limit)


def _missing_columns(path: Path, names: list[str], schema: TableSchema) -> None:
    missing = [c for c in _roles(schema) if c not in names]
    if missing:
        shown = ", ".join(map(repr, names[:20])) + (", ..." if len(names) > 20 else "")
        roles = _roles(schema)
        raise DataError(
            f"{path}: no column {', '.join(f'{c!r} ({roles[c]})' for c in missing)} in the file, which has "
            f"{shown or 'no columns'}; fix data.schema or the file"
        )


def _parquet_file(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{path}: not a readable Parquet file ({exc}); give a Parquet file, or name a CSV file .csv"
        ) from None


def _parquet_batches(path: Path, schema: TableSchema, limit: int) -> Iterator[pa.RecordBatch]:
    f = _parquet_file(path)
    arrow = f.schema_arrow
    _missing_columns(path, list(arrow.names), schema)
    for name, role in _roles(schema).items():
        _check_type(path, name, role, arrow.field(name).type)
    first_row = 1
    try:
        for rb in f.iter_batches(BLOCK_ROWS, columns=list(_roles(schema))):
            check_parquet_values(path, rb, first_row, limit)
            first_row += rb.num_rows
            yield rb
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: cannot be read as Parquet ({exc}); fix or rewrite the file") from None


def _check_type(path: Path, name: str, role: str, t: pa.DataType) -> None:
    """A Parquet column's type must fit its role (a CSV's columns are typed by the reader)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    number = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)
    listed = pa.types.is_list(t) or pa.types.is_large_list(t)
    ok = {
        "label": number,
        "dense": number or pa.types.is_null(t),
        "categorical": text or number or pa.types.is_null(t),
        "multi_hot": text or listed,
    }[role]
    if ok:
        return
    need = {
        "label": "numbers 0 or 1",
        "dense": "numbers (int or float)",
        "categorical": "one value per row (text or integers); a list column goes under data.schema.multi_hot",
        "multi_hot": f"a list per row (a Parquet list column, or text of values separated by {MULTI_HOT_SEPARATOR!r})",
    }[role]
    raise DataError(f"{path}: column {name!r} ({role}) has type {t}; a {role} column holds {need}")


def _delimiter(path: Path) -> str:
    return "\t" if path.name.lower().endswith((".tsv", ".tsv.gz")) else ","


def _csv_header(path: Path, limit: int) -> list[str]:
    try:
        raw = open_bounded(path, limit, cr_ends_lines=True)  # the csv module ends a row at a lone "\r" too
        # utf-8-sig: a byte-order mark is not part of the first name
        with io.TextIOWrapper(raw, encoding="utf-8-sig", errors="replace", newline="") as f:
            header = next(csv.reader(f, delimiter=_delimiter(path)), None)
    except (OSError, EOFError, zlib.error, csv.Error) as exc:
        raise DataError(f"{path}: cannot be read as CSV ({exc}); give a CSV file with a header line") from None
    if not header:
        raise DataError(f"{path}: is empty (no header line, no rows); give a CSV file with a header and data rows")
    return header


def _csv_batches(path: Path, schema: TableSchema, limit: int) -> Iterator[pa.RecordBatch]:
    header = _csv_header(path, limit)
    _missing_columns(path, header, schema)
    roles = _roles(schema)
    types = {c: pa.float64() if r in ("label", "dense") else pa.string() for c, r in roles.items()}
    # the file through files.open_bounded (gunzipped there), so that a line over the limit is
    # refused by its number before pyarrow holds it, and pyarrow's block holds the longest line allowed
    try:
        f = open_bounded(path, limit, cr_ends_lines=True)  # pyarrow ends a row at a lone "\r" too
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot be read as CSV ({exc}); fix the file") from None
    with f:
        yield from _csv_rows(path, f, header, roles, types, block_size(limit, CSV_BLOCK_BYTES))


def _csv_rows(
    path: Path, f: io.BufferedReader, header: list[str], roles: dict[str, str], types: dict[str, Any], block: int
) -> Iterator[pa.RecordBatch]:
    try:
        reader = pa_csv.open_csv(
            f,
            read_options=pa_csv.ReadOptions(use_threads=False, block_size=block),
            parse_options=pa_csv.ParseOptions(delimiter=_delimiter(path)),
            convert_options=pa_csv.ConvertOptions(
                include_columns=list(roles),
                column_types=types,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        for rb in reader:  # a block of a long limit holds many rows: converted BLOCK_ROWS at a time
            for start in range(0, rb.num_rows, BLOCK_ROWS):
                yield rb.slice(start, BLOCK_ROWS)
    except pa.ArrowInvalid as exc:
        raise _csv_error(path, header, roles, exc) from None
    except (pa.ArrowException, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot be read as CSV ({exc}); fix the file") from None


def _csv_error(path: Path, header: list[str], roles: dict[str, str], exc: Exception) -> DataError:
    """pyarrow's conversion error, said with the column's name and role."""
    message = str(exc).strip().splitlines()[0]
    if "Empty CSV file" in message:
        return DataError(f"{path}: is empty (no header line, no rows); give a CSV file with a header and data rows")
    found = re.search(r"column #(\d+)", message)
    if found and "conversion error" in message and int(found.group(1)) < len(header):
        name = header[int(found.group(1))]
        value = re.search(r"invalid value (.*)$", message)
        what = f" found {value.group(1)}" if value else ""
        return DataError(
            f"{path}: column {name!r} ({roles.get(name, '?')}) must hold numbers;{what} ({message}); fix the file, "
            "or declare the column under data.schema.categorical"
        )
    return DataError(f"{path}: cannot be read as CSV ({message}); fix the file")


# ----------------------------------------------------------------------------------------------
# Values: numbers, labels, category texts
# ----------------------------------------------------------------------------------------------


def _decoded(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col.dictionary_decode() if pa.types.is_dictionary(col.type) else col


def _numbers(path: Path, rb: pa.RecordBatch, name: str, role: str, first_row: int) -> F64:
    """A label or dense column as float64: null and NaN -> 0 (a label must not be missing)."""
    col = _decoded(rb.column(name))
    _check_type(path, name, role, col.type)
    x = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)  # null -> NaN
    missing = np.isnan(x)
    if role == "label":
        bad = np.flatnonzero(missing | ((x != 0.0) & (x != 1.0)))
        if len(bad):
            r = int(bad[0])
            raise DataError(
                f"{path}: row {first_row + r}: column {name!r} (the label) is {col[r].as_py()!r}; a binary "
                f"workload needs labels 0 or 1 ({len(bad)} such row(s) in this block); fix the file or map the "
                "column to 0/1"
            )
        return x
    x[missing] = 0.0
    infinite = np.flatnonzero(~np.isfinite(x))
    if len(infinite):
        r = int(infinite[0])
        raise DataError(f"{path}: row {first_row + r}: column {name!r} (dense) is {x[r]}; give a finite number")
    return x


def _texts(col: pa.Array) -> pa.Array:
    """A categorical column as strings (nulls kept): integers by their decimal text."""
    col = _decoded(col)
    if pa.types.is_string(col.type):
        return col
    return pc.cast(col, pa.string())


def _lists(path: Path, rb: pa.RecordBatch, name: str) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """A multi_hot column as (every item's text, in row order; the item count of each row)."""
    col = _decoded(rb.column(name))
    _check_type(path, name, "multi_hot", col.type)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.split_pattern(col, MULTI_HOT_SEPARATOR)
    lengths = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return _texts(pc.list_flatten(col)), lengths


def hash_id(value: str, rows: int) -> int:
    """The row of `value` in a hashed table of `rows` rows: 1 + blake2b-64(text) mod (rows - 1);
    row 0 is missing/padding. The same in every process (Python's `hash()` is salted)."""
    digest = hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "little") % (rows - 1)


# ----------------------------------------------------------------------------------------------
# The vocabulary
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Per column, its kept values in id order (values[k] has id FIRST_ID + k), and their counts."""

    columns: dict[str, list[str]]
    counts: dict[str, list[int]]
    rows: int  # data rows of the training file
    rare: dict[str, int]  # per column, the distinct values sent to the rare bucket
    truncated: dict[str, int]  # per multi_hot column, the rows whose list is longer than MAX_IDS
    fingerprint: dict[str, Any]

    def size(self, column: str) -> int:
        return len(self.columns[column]) + FIRST_ID

    def index(self, column: str) -> dict[str, int]:
        return {v: FIRST_ID + k for k, v in enumerate(self.columns[column])}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": VOCABULARY_FORMAT,
            "fingerprint": self.fingerprint,
            "rows": self.rows,
            "ids": {"missing": MISSING_ID, "rare_or_unseen": RARE_ID, "first_value": FIRST_ID},
            "columns": {
                c: {
                    "values": self.columns[c],
                    "counts": self.counts[c],
                    "rows_in_table": self.size(c),
                    "rare_values": self.rare[c],
                    **({"truncated_rows": self.truncated[c]} if c in self.truncated else {}),
                }
                for c in self.columns
            },
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Vocabulary:
        if raw.get("format") != VOCABULARY_FORMAT:
            raise ValueError(f"not a {VOCABULARY_FORMAT} file")
        cols = raw["columns"]
        return cls(
            columns={c: [str(v) for v in d["values"]] for c, d in cols.items()},
            counts={c: [int(n) for n in d["counts"]] for c, d in cols.items()},
            rows=int(raw["rows"]),
            rare={c: int(d["rare_values"]) for c, d in cols.items()},
            truncated={c: int(d["truncated_rows"]) for c, d in cols.items() if "truncated_rows" in d},
            fingerprint=dict(raw["fingerprint"]),
        )


def _fingerprint(data: DataConfig) -> dict[str, Any]:
    """What the vocabulary depends on: the file (by path, size and mtime) and how values are kept."""
    assert data.path is not None and data.table_schema is not None
    path = data.path.resolve()
    stat = path.stat()
    return {
        "format": VOCABULARY_FORMAT,
        "path": str(path),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "schema": data.table_schema.model_dump(mode="json"),
        "min_count": data.min_count,
    }


def vocabulary_file(data: DataConfig) -> Path:
    """Where the vocabulary of `data` is cached: $ELASTUNE_HOME/vocabularies/<fingerprint>.json."""
    key = hashlib.sha256(json.dumps(_fingerprint(data), sort_keys=True).encode()).hexdigest()[:32]
    return elastune_home() / "vocabularies" / f"{key}.json"


def vocabulary_json(data: DataConfig) -> str:
    """The vocabulary of `data` as the JSON text of its cache file (built if there is none)."""
    return json.dumps(_vocabulary(data).to_json())


def vocabulary_of(data: Any) -> str | None:
    """`vocabulary_json` of a run config's `data` section as a plain dict (a checkpoint's or a
    sweep spec's); None for data that has no vocabulary (another source, or hash encoding)."""
    if not isinstance(data, dict) or data.get("source") != "table":
        return None
    if data.get("encoding", "vocabulary") != "vocabulary":
        return None
    return vocabulary_json(DataConfig.model_validate(data))


def vocabulary_artifact(data: Any) -> DataArtifact | None:
    """`vocabulary_of(data)` as the DataArtifact a checkpoint and a sweep's MLflow run keep."""
    text = vocabulary_of(data)
    if text is None:
        return None
    return DataArtifact(
        name="vocabulary",
        text=text,
        suffix=".vocab.json",
        mlflow_path="vocabulary/vocabulary.json",
        changed="data.path's values now map to other rows (the file changed since)",
        ids=lambda raw: {c: d.get("values") for c, d in raw["columns"].items()},  # counts may change
    )


_LOADED: dict[Path, Vocabulary] = {}  # this process's vocabularies, by cache file


def _vocabulary(data: DataConfig) -> Vocabulary:
    """The cached vocabulary of `data`, built (one pass over data.path) when there is none."""
    where = vocabulary_file(data)
    fingerprint = _fingerprint(data)
    known = _LOADED.get(where)
    if known is not None and known.fingerprint == fingerprint:
        return known
    vocab = _read_vocabulary(where, fingerprint)
    if vocab is None:
        vocab = _scan(data, fingerprint)
        _write_vocabulary(where, vocab)
    _LOADED[where] = vocab
    return vocab


def _read_vocabulary(where: Path, fingerprint: dict[str, Any]) -> Vocabulary | None:
    try:
        vocab = Vocabulary.from_json(json.loads(where.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # none yet, or damaged: built again
    return vocab if vocab.fingerprint == fingerprint else None


def _write_vocabulary(where: Path, vocab: Vocabulary) -> None:
    """Atomically (a concurrent trial reads the whole file or none); a cache that cannot be written
    only costs the next process a scan."""
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=where.parent, suffix=".tmp", delete=False) as f:
            json.dump(vocab.to_json(), f)
        os.replace(f.name, where)
    except OSError:
        return


def _scan(data: DataConfig, fingerprint: dict[str, Any]) -> Vocabulary:
    """One streaming pass over data.path: every value of every categorical and multi_hot column
    counted, and every label and dense value checked."""
    assert data.path is not None and data.table_schema is not None
    schema, path = data.table_schema, data.path
    counts: dict[str, Counter[str]] = {c: Counter() for c in schema.sparse}
    truncated = dict.fromkeys(schema.multi_hot, 0)
    rows = 0
    for rb in _record_batches(path, schema, data.max_document_bytes):
        _numbers(path, rb, schema.label, "label", rows + 1)
        for name in schema.dense:
            _numbers(path, rb, name, "dense", rows + 1)
        for name in schema.categorical:
            _count(counts[name], _texts(rb.column(name)))
        for name, max_ids in schema.multi_hot.items():
            items, lengths = _lists(path, rb, name)
            _count(counts[name], items)
            truncated[name] += int((lengths > max_ids).sum())
        rows += rb.num_rows
    if rows == 0:
        raise _empty(path)
    columns, kept_counts, rare = {}, {}, {}
    for name, counter in counts.items():
        kept = sorted(((v, n) for v, n in counter.items() if n >= data.min_count), key=lambda vn: (-vn[1], vn[0]))
        columns[name] = [v for v, _ in kept]
        kept_counts[name] = [n for _, n in kept]
        rare[name] = len(counter) - len(kept)
    return Vocabulary(columns, kept_counts, rows, rare, truncated, fingerprint)


def _count(counter: Counter[str], texts: pa.Array) -> None:
    for entry in pc.value_counts(texts).to_pylist():
        value = entry["values"]
        if value:  # None (null) and "" are missing values: id 0, not counted
            counter[value] += int(entry["counts"])


def _empty(path: Path) -> DataError:
    return DataError(f"{path}: has no data rows; give a file with a header (or a schema) and at least one row")


# ----------------------------------------------------------------------------------------------
# The layout (tables) and the source
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableLayout:
    """The tables a table source has: one per categorical, then multi_hot column, named as it."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    pooling: int
    num_dense: int
    vocabulary: Vocabulary | None  # None with encoding=hash


def table_layout(data: DataConfig) -> TableLayout:
    """The tables of `data` (source=table): with the vocabulary encoding, from the (cached)
    vocabulary, built on first use; with hash, `hash_buckets` after checking the file's columns."""
    schema = data.table_schema
    assert data.source == "table" and data.path is not None and schema is not None, "a validated table config"
    names = tuple(schema.sparse)
    vocab: Vocabulary | None = None
    if data.encoding == "vocabulary":
        vocab = _vocabulary(data)
        sizes = tuple(vocab.size(c) for c in names)
    else:
        buckets = data.hash_buckets
        assert buckets is not None
        sizes = tuple(buckets[c] if isinstance(buckets, dict) else buckets for c in names)
    pooling = max(schema.multi_hot.values(), default=1)
    return TableLayout(names, sizes, pooling, len(schema.dense), vocab)


def check_table_data(data: DataConfig, eval_samples: int) -> TableLayout:
    """Every problem validation can find before a run starts (DataError naming file and column):
    the layout (the vocabulary pass reads the whole training file), then the first rows of the
    training file and of eval_path read as a run reads them. Checked once per process for the same
    files (by size and mtime) and settings: a sweep spec's validation asks for every corner config."""
    key = _check_key(data, eval_samples)
    layout = table_layout(data)
    if key in _CHECKED:
        return layout
    vocab = layout.vocabulary
    if vocab is not None and data.eval_path is None and vocab.rows <= eval_samples:
        raise DataError(
            f"{data.path}: has {vocab.rows} data rows, and eval.samples={eval_samples} of them are held out for "
            "evaluation, leaving none to train on; lower eval.samples or give data.eval_path"
        )
    source = TableSource(data, eval_samples=eval_samples, layout=layout)
    for path in (source.path, source.eval_path):
        if path is not None:
            first = next(source._parse(path), None)
            if first is None or len(first.batch) == 0:
                raise _empty(path)
    _CHECKED.add(key)
    return layout


_CHECKED: set[str] = set()  # check_table_data's passes in this process


def _check_key(data: DataConfig, eval_samples: int) -> str:
    files = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in (data.path, data.eval_path) if p]
    settings = data.model_dump(mode="json", include={"table_schema", "encoding", "min_count", "hash_buckets"})
    return json.dumps([files, settings, eval_samples], sort_keys=True)


class TableSource(_FileSource):
    """A DataSource over a CSV or Parquet file of the user's columns (see the module docstring);
    cursor, epochs and eval split are _FileSource's. Nothing is skipped: a bad row is a DataError."""

    _fix = "fix the file"

    def __init__(self, data: DataConfig, *, eval_samples: int, layout: TableLayout | None = None) -> None:
        assert data.path is not None and data.table_schema is not None, "a validated table config"
        self.schema = data.table_schema
        self._limit = data.max_document_bytes
        self.layout = layout or table_layout(data)
        self.num_dense = self.layout.num_dense
        self.num_sparse = len(self.layout.names)
        self.pooling = self.layout.pooling
        vocab = self.layout.vocabulary
        self._index = {c: vocab.index(c) for c in self.layout.names} if vocab else None
        self._rows = dict(zip(self.layout.names, self.layout.sizes, strict=True))
        super().__init__(data.path, self.layout.sizes, eval_path=data.eval_path, eval_samples=eval_samples)

    def _parse(self, path: Path) -> Iterator[_Block]:
        first_row = 1
        for rb in _record_batches(path, self.schema, self._limit):
            batch, truncated = self._convert(path, rb, first_row)
            first_row += rb.num_rows
            yield _Block(batch, [], first_row - 1, truncated)

    def _convert(self, path: Path, rb: pa.RecordBatch, first_row: int) -> tuple[ClickBatch, int]:
        s, n = self.schema, rb.num_rows
        labels = _numbers(path, rb, s.label, "label", first_row)
        dense = np.zeros((n, self.num_dense), dtype=np.float32)
        for j, name in enumerate(s.dense):
            dense[:, j] = _numbers(path, rb, name, "dense", first_row)
        ids = np.zeros((n, self.num_sparse, self.pooling), dtype=np.int64)  # 0: missing / padding
        for f, name in enumerate(s.categorical):
            ids[:, f, 0] = self._ids(name, _texts(rb.column(name)))
        truncated = np.zeros(n, dtype=np.bool_)
        for f, (name, max_ids) in enumerate(s.multi_hot.items(), start=len(s.categorical)):
            items, lengths = _lists(path, rb, name)
            item_ids = self._ids(name, items)
            row = np.repeat(np.arange(n), lengths)
            position = np.arange(len(item_ids)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            keep = position < max_ids
            ids[row[keep], f, position[keep]] = item_ids[keep]
            truncated |= lengths > max_ids
        batch = ClickBatch(
            torch.from_numpy(dense),
            torch.from_numpy(ids),
            torch.from_numpy(labels.astype(np.float32)),
        )
        return batch, int(truncated.sum())

    def _ids(self, column: str, texts: pa.Array) -> I64:
        """Each text's id, computed once per distinct value of the block (values repeat a lot)."""
        encoded = texts.dictionary_encode()
        distinct = encoded.dictionary.to_pylist()
        if self._index is not None:
            index = self._index[column]
            table = [index.get(v, RARE_ID) if v else MISSING_ID for v in distinct]
        else:
            rows = self._rows[column]
            table = [hash_id(v, rows) if v else MISSING_ID for v in distinct]
        lookup = np.array([*table, MISSING_ID], dtype=np.int64)  # the extra last entry serves nulls
        positions = encoded.indices.fill_null(len(distinct)).to_numpy(zero_copy_only=False)
        ids: I64 = lookup[positions]
        return ids
