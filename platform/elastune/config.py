"""RunConfig: everything one training run needs, and how its fields are checked.

A config comes from an optional YAML file plus `--set key=value` overrides (keys use dots:
`batch.micro=2048`). Field checks report every problem at once, each with its field path, the value
given and the fix; unknown keys get a "did you mean". This module is a leaf: it imports no
component. What only a component knows (which strategies are built, what a backend's kernels cannot
do, how many rows the tables have) is checked after pydantic, in validate.py, which every entry point
uses (`load_run_config`, `validate_run_config`). Untyped dicts exist only where Ray hands a trial its
config: the first thing such code does is `RunConfig.model_validate(d)`.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from elastune.dotted import set_path
from elastune.errors import MISSING, ConfigError, Problem
from elastune.units import parse_bytes

__all__ = [
    "MOVED_KEYS",
    "PER_TABLE_FIELDS",
    "BatchConfig",
    "CheckpointConfig",
    "DataConfig",
    "EmbeddingConfig",
    "EmbeddingOverride",
    "EvalConfig",
    "ModelConfig",
    "OptimizerConfig",
    "RunConfig",
    "TableMatch",
    "TableSchema",
    "apply_overrides",
    "elastune_home",
    "moved_key_message",
    "parse_overrides",
    "problems_from_validation",
    "read_yaml_mapping",
]


# Every number has finite bounds (and no NaN or infinity): a config may come from a remote client
# (the web UI), and a 400-digit step count would otherwise start a run that never ends.
MAX_SEED = 2**32 - 1
MAX_TABLES = 1024  # tables of one run (a bound: hostile input stays finite)
MAX_TABLE_ROWS = 2**40  # rows of one table
MAX_STEPS = 10**9
MAX_ROWS = 2**40  # rows of one table, a cache or a bucket count: far beyond any device


class _Section(BaseModel):
    # extra="forbid" is what turns a typo into a "did you mean" instead of a silent default.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


MAX_COLUMNS = 4096  # dense columns of a table source
MAX_MULTI_HOT = 64  # ids per multi-hot bag
# data.max_document_bytes: the longest line (document, row) a reader takes in. The readers hold a line
# whole (and the tokenizer several times over), so this bounds their memory; 1 GiB is past any real
# document and keeps a mistyped value from lifting the bound altogether.
DEFAULT_MAX_DOCUMENT_BYTES = 16 << 20
MIN_DOCUMENT_BYTES = 1 << 10
MAX_DOCUMENT_BYTES = 1 << 30
TABLE_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "csv",
    ".csv.gz": "csv",
    ".tsv.gz": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
ColumnName = Annotated[str, Field(min_length=1, max_length=200)]
TEXT_SUFFIXES = {".txt": "txt", ".txt.gz": "txt", ".jsonl": "jsonl", ".jsonl.gz": "jsonl"}
_TEXT_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")


def table_format(path: Path) -> str | None:
    """ "csv" or "parquet" for a data.path of `source: table`, from its suffix; None if neither."""
    name = path.name.lower()
    return next((fmt for suffix, fmt in TABLE_SUFFIXES.items() if name.endswith(suffix)), None)


def text_format(path: Path) -> str | None:
    """ "txt" (one document per non-empty line) or "jsonl" (one JSON object per line) for a data.path
    of `source: text`, from its suffix; None if neither."""
    name = path.name.lower()
    return next((fmt for suffix, fmt in TEXT_SUFFIXES.items() if name.endswith(suffix)), None)


class TableSchema(_Section):
    """`data.schema` of `source: table`: which columns of the file are the label, the dense
    features and the categorical features (one embedding table each, named as the column)."""

    label: ColumnName = Field(description="The label column: numbers in {0, 1}.")
    dense: list[ColumnName] = Field(
        default_factory=list, max_length=MAX_COLUMNS, description="Numeric columns (int or float; null reads as 0)."
    )
    categorical: list[ColumnName] = Field(
        default_factory=list, max_length=MAX_TABLES, description="One value per row; one embedding table each."
    )
    multi_hot: dict[ColumnName, Annotated[int, Field(ge=1, le=MAX_MULTI_HOT)]] = Field(
        default_factory=dict,
        max_length=MAX_TABLES,
        description="COLUMN: MAX_IDS for list columns (Parquet lists, or CSV text of values separated by |): "
        "a pooled bag of up to MAX_IDS ids per row, one embedding table each.",
    )

    @model_validator(mode="after")
    def _columns_once(self) -> TableSchema:
        names = [self.label, *self.dense, *self.categorical, *self.multi_hot]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"column(s) {', '.join(map(repr, twice))} named more than once in data.schema; "
                "give each column one role (label, dense, categorical or multi_hot)"
            )
        if not self.categorical and not self.multi_hot:
            raise ValueError(
                "data.schema needs at least one categorical or multi_hot column (each becomes an embedding table)"
            )
        if len(self.categorical) + len(self.multi_hot) > MAX_TABLES:
            raise ValueError(f"at most {MAX_TABLES} categorical and multi_hot columns in all")
        return self

    @property
    def sparse(self) -> list[str]:
        """The embedding tables' columns, in the order of Batch.sparse: categorical, then multi_hot."""
        return [*self.categorical, *self.multi_hot]


class DataConfig(_Section):
    """Where samples come from. `synthetic` needs no files and plants a learnable signal; `table`
    reads a CSV or Parquet file of your own columns, described by `data.schema`; `text` reads your
    documents for `workload: lm` (docs/data.md)."""

    # `schema` is the key (a BaseModel attribute: the field is `table_schema`, aliased).
    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        allow_inf_nan=False,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    loader_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="Processes reading batches ahead of the step (a torch DataLoader's num_workers); 0 reads "
        "each step's batch in the training process.",
    )
    prefetch: int = Field(
        2, ge=1, le=64, description="Batches each loader worker keeps ready (prefetch_factor; needs loader_workers)."
    )
    pin_memory: bool = Field(
        False, description="Batches in page-locked host memory, copied to the GPU asynchronously (GPU runs only)."
    )
    source: Literal["synthetic", "criteo_tsv", "parquet", "table", "text"] = Field(
        "synthetic",
        description="synthetic | criteo_tsv | parquet (Criteo's columns) | table (your own columns: "
        "CSV or Parquet with data.schema) | text (workload lm: your documents, .txt one per line or .jsonl, "
        "tokenized by a byte-level BPE trained on them).",
    )
    rows_scale: float = Field(
        0.01, gt=0, le=1.0, description="Criteo Kaggle table sizes x this (1.0 = the real sizes)."
    )
    table_rows: list[Annotated[int, Field(ge=2, le=MAX_TABLE_ROWS)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_TABLES,
        description="Synthetic data only: one table per entry with this many rows, instead of the Criteo "
        "cardinalities x rows_scale (price and tune your own table shapes before you have data).",
    )
    zipf_alpha: float = Field(1.15, gt=0, le=5, description="Skew of the synthetic id stream.")
    pooling: int = Field(1, ge=1, le=64, description="Ids per bag (multi-hot) in synthetic data.")
    seed: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description="Seed of the synthetic stream and its hidden teacher; source=text: of the training "
        "sequences' order; a workload's own torch Dataset: of its held-out split, each epoch's order and "
        "each item's augmentation draws.",
    )
    path: Path | None = Field(
        None,
        description="Training file for criteo_tsv / parquet / table / text (table: .csv, .tsv, .csv.gz, "
        ".tsv.gz, .parquet or .pq; text: .txt, .txt.gz, .jsonl or .jsonl.gz). Relative: in a config file, "
        "to that file's folder; with --set, to the working directory.",
    )
    eval_path: Path | None = Field(
        None,
        description="Held-out file; without it the first eval.samples rows of path are held out (source=text: "
        "eval.samples documents spread over it). Relative as path.",
    )
    skip_malformed: bool = Field(
        False, description="Skip and count malformed rows instead of failing (criteo_tsv / parquet)."
    )
    table_schema: TableSchema | None = Field(
        None,
        alias="schema",
        description="source=table: {label: COL, dense: [COL, ...], categorical: [COL, ...], "
        "multi_hot: {COL: MAX_IDS, ...}}.",
    )
    encoding: Literal["vocabulary", "hash"] = Field(
        "vocabulary",
        description="source=table: how categorical values become row ids: vocabulary (one pass over "
        "data.path counts the values; table sizes come from the data) or hash (into data.hash_buckets rows).",
    )
    min_count: int = Field(
        2,
        ge=1,
        le=2**31,
        description="source=table, vocabulary: values seen fewer times than this share the rare-or-unseen row "
        "(2: values seen once train that row, which unseen values then use).",
    )
    text_field: str = Field(
        "text",
        description="source=text, JSON Lines: the top-level key of each line's object that holds the document "
        "(a string).",
    )
    hash_buckets: (
        Annotated[int, Field(ge=2, le=MAX_TABLE_ROWS)]
        | Annotated[dict[ColumnName, Annotated[int, Field(ge=2, le=MAX_TABLE_ROWS)]], Field(max_length=MAX_TABLES)]
        | None
    ) = Field(
        None,
        description="source=table, encoding=hash: rows per table, one number for all or {COLUMN: ROWS} for "
        "every categorical and multi_hot column.",
    )
    max_document_bytes: int = Field(
        DEFAULT_MAX_DOCUMENT_BYTES,
        ge=MIN_DOCUMENT_BYTES,
        le=MAX_DOCUMENT_BYTES,
        description="The longest line a file reader takes (a row of CSV / TSV, a document of .txt / .jsonl; in "
        "Parquet a row's value), decompressed, its line ending not counted: 16MiB, 64KiB or bytes, 1 KiB to 1 GiB. "
        "A longer one is refused, naming its line, before it is read whole.",
    )

    @field_validator("path", "eval_path")
    @classmethod
    def _must_exist(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        path = value.expanduser()
        # A relative path here came from --set or a spec (a run config file's are made absolute by
        # validate.load_run_config): say where it was looked for.
        tried = (
            ""
            if path.is_absolute()
            else f"tried {path.absolute()} (a relative path is taken from the working directory): "
        )
        if path.is_dir():
            raise ValueError(f"{tried}is a directory; give the path to a data file in it")
        if not path.is_file():
            raise ValueError(f"{tried}file does not exist; give the path to an existing data file")
        return path

    @field_validator("max_document_bytes", mode="before")
    @classmethod
    def _byte_size(cls, value: Any) -> Any:
        try:
            size = parse_bytes(value)  # 16MiB, 1.5GB or bytes
        except ValueError as exc:
            raise ValueError(f"{exc}; give 1KiB to 1GiB (the default is 16MiB)") from None
        if not MIN_DOCUMENT_BYTES <= size <= MAX_DOCUMENT_BYTES:  # also the Field's bounds, for the schema
            raise ValueError(f"is {size} bytes; give 1KiB to 1GiB ({MIN_DOCUMENT_BYTES} to {MAX_DOCUMENT_BYTES})")
        return size

    @field_validator("text_field")
    @classmethod
    def _key_like(cls, value: str) -> str:
        if not _TEXT_FIELD.match(value):
            raise ValueError(
                "must be a top-level JSON key of up to 100 letters, digits, _ or -, starting with a letter or _ "
                "(e.g. text, content)"
            )
        return value

    @model_validator(mode="after")
    def _files_need_a_path(self) -> DataConfig:
        if self.source != "synthetic" and self.path is None:
            raise ValueError(
                f"data.source={self.source!r} needs data.path; set data.path=FILE or use data.source=synthetic"
            )
        if self.source != "synthetic" and self.table_rows is not None:
            has = {
                "table": "the tables of data.schema",
                "text": "one table, the tokenizer's vocabulary (workload_options.vocab)",
            }.get(self.source, "the Criteo files' 26 columns")
            raise ValueError(
                f"data.table_rows sets synthetic tables; data.source={self.source!r} has {has}: drop "
                "data.table_rows or use data.source=synthetic"
            )
        if self.prefetch != 2 and self.loader_workers == 0:
            raise ValueError(
                f"data.prefetch={self.prefetch} is what each loader worker keeps ready, and data.loader_workers=0 "
                "reads in the training process: set data.loader_workers >= 1 or drop data.prefetch"
            )
        if self.source == "text":
            self._text_rules()
        elif self.text_field != "text":
            raise ValueError(
                f"data.text_field names the documents' key in a data.source=text JSON Lines file, not "
                f"data.source={self.source!r}; drop data.text_field or set data.source=text"
            )
        if self.source == "table":
            self._table_rules()
        else:
            given = [
                key
                for key, value, default in (
                    ("data.schema", self.table_schema, None),
                    ("data.encoding", self.encoding, "vocabulary"),
                    ("data.min_count", self.min_count, 2),
                    ("data.hash_buckets", self.hash_buckets, None),
                )
                if value != default
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)} describe(s) the columns of a data.source=table file, not "
                    f"data.source={self.source!r}; drop {', '.join(given)} or set data.source=table"
                )
        return self

    def _table_rules(self) -> None:
        for key, path in (("data.path", self.path), ("data.eval_path", self.eval_path)):
            if path is not None and table_format(path) is None:
                raise ValueError(
                    f"{key}={str(path)!r}: data.source=table reads CSV (.csv, .tsv, .csv.gz, .tsv.gz) or "
                    "Parquet (.parquet, .pq), told apart by the suffix; rename the file or convert it"
                )
        if self.table_schema is None:
            raise ValueError(
                "data.source=table needs data.schema: {label: COL, dense: [COL, ...], categorical: [COL, ...]} "
                "(docs/data.md)"
            )
        if self.skip_malformed:
            raise ValueError(
                "data.skip_malformed applies to criteo_tsv / parquet; a table source stops at the first bad row, "
                "naming it: fix the row or drop data.skip_malformed"
            )
        if self.encoding == "hash":
            self._bucket_rules(self.table_schema)
        elif self.hash_buckets is not None:
            raise ValueError(
                "data.hash_buckets sets the rows of hashed tables; with data.encoding=vocabulary the table sizes "
                "come from the data: drop data.hash_buckets or set data.encoding=hash"
            )

    def _text_rules(self) -> None:
        formats = []
        for key, path in (("data.path", self.path), ("data.eval_path", self.eval_path)):
            if path is None:
                continue
            formats.append(text_format(path))
            if formats[-1] is None:
                raise ValueError(
                    f"{key}={str(path)!r}: data.source=text reads plain text (.txt, .txt.gz: one document per "
                    "non-empty line) or JSON Lines (.jsonl, .jsonl.gz: one object per line), told apart by the "
                    "suffix; rename the file or convert it"
                )
        if self.text_field != "text" and "jsonl" not in formats:
            raise ValueError(
                f"data.text_field={self.text_field!r} names the documents' key in a JSON Lines file, and "
                "data.path is plain text (one document per line); drop data.text_field or give a .jsonl file"
            )
        if self.skip_malformed:
            raise ValueError(
                "data.skip_malformed applies to criteo_tsv / parquet; a text source stops at the first bad line, "
                "naming it: fix the line or drop data.skip_malformed"
            )

    def _bucket_rules(self, schema: TableSchema) -> None:
        if self.hash_buckets is None:
            raise ValueError(
                "data.encoding=hash needs data.hash_buckets: rows per table (e.g. 100000), or {COLUMN: ROWS} for "
                "every categorical and multi_hot column"
            )
        if isinstance(self.hash_buckets, dict):
            missing = [c for c in schema.sparse if c not in self.hash_buckets]
            extra = [c for c in self.hash_buckets if c not in schema.sparse]
            if missing or extra:
                what = []
                if missing:
                    what.append(f"has no entry for {', '.join(map(repr, missing))}")
                if extra:
                    what.append(f"names {', '.join(map(repr, extra))}, not a categorical or multi_hot column")
                raise ValueError(
                    f"data.hash_buckets {' and '.join(what)}; give ROWS for exactly the columns "
                    f"{', '.join(map(repr, schema.sparse))}, or one number for all"
                )


class ModelConfig(_Section):
    """What every workload's model shares: the width of its embedding tables, which the embedding
    strategies and the estimator read. A workload's own shape is in its options (`workload_options`:
    DLRM's MLPs, the LM's blocks and heads)."""

    embedding_dim: int = Field(
        16, ge=2, le=1024, description="Embedding width (workload lm: the model width, default 64)."
    )


# The names a config may give; which of them this build has, and what each needs, is the embedding
# registry's to say (validate.py asks it; a test ties this list to the registry).
Strategy = Literal["full", "half", "int8", "hashed", "qr", "mixed_dim", "shared", "cached"]
SparseOptimizer = Literal["adam", "sgd", "adagrad", "rowwise_adagrad"]


class TableMatch(_Section):
    """Which tables an embedding override applies to: a name glob, a size floor, or both."""

    name: str | None = Field(None, min_length=1, max_length=200, description="fnmatch glob over table names, e.g. C*")
    min_rows: int | None = Field(None, ge=1, le=MAX_ROWS, description="tables with at least this many rows")

    @model_validator(mode="after")
    def _says_something(self) -> TableMatch:
        if self.name is None and self.min_rows is None:
            raise ValueError("give match.name (a glob over table names) or match.min_rows (a size floor), or both")
        return self

    def matches(self, table: str, rows: int) -> bool:
        return (self.name is None or fnmatch.fnmatchcase(table, self.name)) and (
            self.min_rows is None or rows >= self.min_rows
        )


# Fields a per-table override may set: how one table is stored, not what all tables share.
PER_TABLE_FIELDS = frozenset(
    {"strategy", "dtype", "buckets", "compression", "num_hashes", "qr_combine", "mixed_blocks", "mixed_min_dim"}
    | {"cache_rows", "cache_ratio"}
)


class EmbeddingOverride(BaseModel):
    """`{match: {...}, strategy: int8, ...}`: the embedding fields to use for the tables it matches."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    match: TableMatch

    def fields(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class EmbeddingConfig(_Section):
    """How the sparse features' tables are stored and looked up (embeddings/)."""

    strategy: Strategy = Field(
        "full",
        description="full (fp32 rows) | half (fp16/bf16 storage) | int8 (row-wise quantized) | "
        "hashed (k hashes into B buckets) | qr (quotient-remainder) | mixed_dim (frequency blocks of "
        "decreasing dim) | shared (feature groups share a table) | cached (hot rows on device over host)",
    )
    dtype: Literal["fp16", "bf16"] = Field("fp16", description="half: the storage dtype.")
    buckets: int | None = Field(None, ge=1, le=MAX_ROWS, description="hashed / qr / shared: rows per table (a cap).")
    compression: float | None = Field(
        None,
        ge=1,
        le=1e12,
        description="hashed / qr / shared: rows per table = ceil(rows / compression) (default 4 for hashed "
        "and qr: for qr it sets the remainder table's rows; shared is uncapped by default).",
    )
    num_hashes: int = Field(2, ge=1, le=8, description="hashed: hash functions per id, summed.")
    qr_combine: Literal["mult", "add", "concat"] = Field("mult", description="qr: how the two rows combine.")
    mixed_blocks: int = Field(4, ge=1, le=8, description="mixed_dim: frequency blocks per table.")
    mixed_min_dim: int = Field(2, ge=1, le=1024, description="mixed_dim: smallest block dimension.")
    groups: list[list[int]] | None = Field(
        None,
        description="shared: feature indices (0-25) per shared table; default: features of similar size are paired.",
    )
    cache_rows: int | None = Field(None, ge=1, le=MAX_ROWS, description="cached: rows held on the device.")
    cache_ratio: float | None = Field(
        None, gt=0, le=1, description="cached: rows held on the device, as a share of all rows (default 0.1)."
    )
    backend: Literal["torch", "fbgemm"] = Field(
        "torch",
        description="torch | fbgemm (FBGEMM's fused table-batched kernels, optimizer applied in backward; "
        "pip install 'elastune[fbgemm]'; strategies full and half (fp16), optimizers sgd, adagrad, rowwise_adagrad).",
    )

    overrides: list[EmbeddingOverride] = Field(
        default_factory=list,
        max_length=64,
        description="Per-table storage, applied in order to the tables each matches: "
        "[{match: {name: GLOB} or {min_rows: N}, strategy: int8, <any per-table embedding field>}, ...].",
    )

    @model_validator(mode="after")
    def _one_size_knob(self) -> EmbeddingConfig:
        if self.buckets is not None and self.compression is not None:
            raise ValueError("set embedding.buckets or embedding.compression, not both")
        if self.cache_rows is not None and self.cache_ratio is not None:
            raise ValueError("set embedding.cache_rows or embedding.cache_ratio, not both")
        for i, override in enumerate(self.overrides):
            unknown = sorted(set(override.fields()) - PER_TABLE_FIELDS)
            if unknown:
                raise ValueError(
                    f"embedding.overrides[{i}] sets {', '.join(unknown)}, which a table cannot have on its own; "
                    f"an override may set {', '.join(sorted(PER_TABLE_FIELDS))}"
                )
            try:
                self._merged([override])
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise ValueError(f"embedding.overrides[{i}].{where}: {first['msg']}") from None
        return self

    def for_table(self, name: str, rows: int) -> EmbeddingConfig:
        """The embedding config of one table: this one with every override that matches it applied,
        in order (a later override wins a field both set)."""
        return self._merged([o for o in self.overrides if o.match.matches(name, rows)])

    def _merged(self, overrides: list[EmbeddingOverride]) -> EmbeddingConfig:
        if not overrides:
            return self if not self.overrides else self.model_copy(update={"overrides": []})
        merged = self.model_dump(exclude={"overrides"})
        for override in overrides:
            merged.update(override.fields())
        return EmbeddingConfig.model_validate(merged)


class OptimizerConfig(_Section):
    dense: Literal["adam", "sgd", "adagrad"] = Field("adam", description="For the MLPs.")
    sparse: SparseOptimizer = Field(
        "adam",
        description="For the embedding tables: adam (dense torch Adam, the baseline) or a row-wise "
        "sparse optimizer whose cost grows with the rows a step touches: sgd | adagrad | rowwise_adagrad.",
    )
    lr: float = Field(3e-3, gt=0, le=10, description="Learning rate of the dense optimizer and the sparse one.")
    clip_grad_norm: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="Clip the dense parameters' gradient norm to this (off by default; embedding rows are not "
        "clipped). A training choice that changes quality: a sweep keeps it fixed (base), never searches it.",
    )


class BatchConfig(_Section):
    """effective batch = micro x accum (x data-parallel workers)."""

    micro: int = Field(
        1024, ge=1, le=1 << 22, description="Samples per forward/backward (workload lm: sequences, default 32)."
    )
    accum: int = Field(1, ge=1, le=4096, description="Micro-batches per optimizer step.")

    @property
    def effective(self) -> int:
        return self.micro * self.accum


class EvalConfig(_Section):
    samples: int = Field(
        65536, ge=256, le=2**31, description="Held-out samples for the eval metrics (workload lm: 2048 sequences)."
    )
    batch: int | None = Field(
        None, ge=1, le=1 << 22, description="Eval batch; default the micro-batch, so eval never outgrows training."
    )


class CheckpointConfig(_Section):
    """Where a run saves (and resumes) itself. The file system is checked when the run starts, before
    the model is built (training/checkpoint.py: check_checkpoint), not here: the process that trains
    may not be the one that validates the config."""

    path: Path | None = Field(
        None,
        description="Checkpoint file, written at the end (and every N steps) and read to resume. Its folder "
        "must exist and be writable (elastune creates no folder); a folder, or an existing file that is not "
        "an elastune checkpoint (empty files excepted), or a symlink, is refused, never overwritten. Written "
        "to a private temporary file in the folder, then renamed over it. Read as tensors and plain data only "
        "(torch.load weights_only=True): a file holding a pickled object is refused unrun.",
    )
    every: int = Field(0, ge=0, le=MAX_STEPS, description="Write every N optimizer steps; 0 = only at the end.")
    resume: bool = Field(
        False,
        description="Start from checkpoint.path if that file exists: it must be an elastune checkpoint of "
        "this run's config (workload, data, model, embedding, optimizer, precision, seed) with its effective "
        "batch (batch.micro x batch.accum), at a step within steps, with finite weights and state; no file: "
        "start from scratch.",
    )

    @model_validator(mode="after")
    def _resume_needs_path(self) -> CheckpointConfig:
        if (self.resume or self.every) and self.path is None:
            raise ValueError("checkpoint.resume / checkpoint.every need checkpoint.path=FILE")
        return self


_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


# Defaults of a built-in workload that differ from the table above, used where a config leaves the
# field out: DLRM's micro-batch of 1024 samples would be 1024 sequences of the LM (a 6.5 GiB step,
# 45 minutes for `elastune train` on a laptop CPU), its 65,536 eval samples as many held-out
# documents (longer than the training), and its 16-wide embeddings 4-wide heads. Defaults of a
# general key only: a workload's own knobs are its options.
WORKLOAD_DEFAULTS: dict[str, dict[str, Any]] = {
    "lm": {"batch": {"micro": 32}, "model": {"embedding_dim": 64}, "eval": {"samples": 2048}},
    # hf: sequences too (its width is its model config's, so model.embedding_dim stays unset)
    "hf": {"batch": {"micro": 32}, "eval": {"samples": 2048}},
}


# Run-config keys that moved into a workload's own options: an old config or spec that still sets
# one is refused with where it went (an unknown key, not an alias: one key per setting), instead of
# a bare "unknown key". {old key: (workload, its option)}.
MOVED_KEYS: dict[str, tuple[str, str]] = {
    "model.bottom_mlp": ("dlrm", "bottom_mlp"),
    "model.top_mlp": ("dlrm", "top_mlp"),
    "model.tie_embeddings": ("lm", "tie_embeddings"),
    "model.activation_checkpointing": ("lm", "activation_checkpointing"),
    "model.checkpoint_every": ("lm", "checkpoint_every"),
    "data.padding": ("lm", "padding"),
    "data.bucket_by_length": ("lm", "bucket_by_length"),
}


def moved_key_message(key: str) -> str | None:
    """Where a run-config key that moved into a workload's options went; None if it did not."""
    if key not in MOVED_KEYS:
        return None
    workload, option = MOVED_KEYS[key]
    return f"moved to workload_options.{option} (workload {workload}); set it there"


class RunConfig(_Section):
    """One training run: workload, data, model, embedding strategy, optimizer, precision, batch."""

    workload: str = Field(
        "dlrm",
        max_length=200,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.]*(:[A-Za-z_][A-Za-z0-9_]*)?$",
        description="The model family: a built-in (dlrm, lm, hf), an installed plugin's name (entry-point group "
        "elastune.workloads), or an import path MODULE:FACTORY.",
    )
    workload_options: dict[str, Any] = Field(
        default_factory=dict, description="The workload's own options, validated by the model its factory declares."
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed for model init and anything random in training.")
    device: str = Field("auto", description="auto | cpu | cuda | cuda:N")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="Autocast precision of the dense compute (bf16 needs native support to be fast)."
    )
    threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="torch's intra-op CPU threads (torch.set_num_threads); none: torch's own default (the "
        "machine's cores, or $OMP_NUM_THREADS). A sweep sets it to each trial's CPUs, so a trial's throughput "
        "and its rerun's are measured alike.",
    )
    steps: int = Field(300, ge=1, le=MAX_STEPS, description="Optimizer steps, warm-up included.")
    warmup_steps: int = Field(20, ge=0, le=MAX_STEPS, description="Steps left out of the throughput figure.")
    data: DataConfig = Field(default_factory=lambda: DataConfig())
    model: ModelConfig = Field(default_factory=lambda: ModelConfig())
    embedding: EmbeddingConfig = Field(default_factory=lambda: EmbeddingConfig())
    optimizer: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig())
    batch: BatchConfig = Field(default_factory=lambda: BatchConfig())
    eval: EvalConfig = Field(default_factory=lambda: EvalConfig())
    checkpoint: CheckpointConfig = Field(default_factory=lambda: CheckpointConfig())

    @model_validator(mode="before")
    @classmethod
    def _workload_defaults(cls, raw: Any) -> Any:
        """A built-in workload's own defaults where the config leaves a field out."""
        if isinstance(raw, Mapping) and isinstance(raw.get("workload"), str) and raw["workload"] in WORKLOAD_DEFAULTS:
            return apply_overrides(WORKLOAD_DEFAULTS[raw["workload"]], raw)
        return raw

    @field_validator("device")
    @classmethod
    def _device_form(cls, value: str) -> str:
        if not _DEVICE.match(value):
            raise ValueError("must be auto, cpu, cuda or cuda:N (e.g. cuda:0)")
        return value

    @model_validator(mode="after")
    def _warmup_below_steps(self) -> RunConfig:
        if self.warmup_steps >= self.steps:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} must be below steps={self.steps}, "
                "or no step is measured; lower warmup_steps or raise steps"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain, YAML/JSON-ready dict (paths as strings) that `load_run_config` reads back."""
        return self.model_dump(mode="json")


# ---------------------------------------------------------------------------------------------
# Loading: YAML + overrides -> RunConfig, or one ConfigError with every problem.


def parse_overrides(items: Sequence[str], *, untrusted: bool = False) -> dict[str, Any]:
    """`["batch.micro=2048", "workload_options.top_mlp=[64,32]"]` -> nested dict. Values are YAML scalars.

    `untrusted`: the pairs come from a remote client (the web UI, `elastune train --untrusted`), so
    each value is read by elastune.yamlsafe: an anchor, alias, tag or merge key, or a value too long,
    too big or too deeply nested, is a problem naming its key, refused before anything is expanded."""
    from elastune.yamlsafe import UnsafeYAML
    from elastune.yamlsafe import load as load_client_yaml

    problems: list[Problem] = []
    nested: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            problems.append(Problem(item, MISSING, "overrides look like key=value, e.g. batch.micro=2048"))
            continue
        try:
            if not raw.strip():
                value: Any = ""
            else:
                value = load_client_yaml(raw) if untrusted else yaml.safe_load(raw)
        except UnsafeYAML as exc:  # before ValueError, which it is: refused, never kept as text
            problems.append(Problem(key, raw, str(exc)))
            continue
        except (yaml.YAMLError, ValueError):  # ValueError: an int past Python's 4300-digit limit
            value = raw  # not YAML: keep the text and let validation say what it should be
        set_path(nested, key.split("."), value)
    if problems:
        raise ConfigError(problems, source="--set")
    return nested


def apply_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge `overrides` into a copy of `base` (dicts merge, anything else replaces). A list
    is addressed by index (`embedding.overrides.0.strategy`): keys that are indices of the list
    merge into its items; any other key replaces the list."""
    merged: dict[str, Any] = dict(base)
    for key, value in overrides.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = apply_overrides(current, value)
        elif isinstance(value, Mapping) and isinstance(current, list) and _indices_of(value, current):
            items = list(current)
            for index, item in value.items():
                old = items[int(index)]
                items[int(index)] = (
                    apply_overrides(old, item) if isinstance(old, Mapping) and isinstance(item, Mapping) else item
                )
            merged[key] = items
        else:
            merged[key] = value
    return merged


def _indices_of(keys: Mapping[str, Any], items: list[Any]) -> bool:
    return all(isinstance(k, str) and k.isdigit() and int(k) < len(items) for k in keys)


class _YamlLoader(yaml.SafeLoader):
    """yaml.SafeLoader, except that an integer past Python's int-from-text limit (4300 digits) is
    kept as its text: validation then names the field it was given for, instead of a traceback."""


def _int_or_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:
        return loader.construct_scalar(node)


_YamlLoader.add_constructor("tag:yaml.org,2002:int", _int_or_text)


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError([Problem("config", str(path), "file does not exist; give a YAML file path")])
    try:
        loaded = yaml.load(path.read_text(), Loader=_YamlLoader) or {}  # a SafeLoader (see _YamlLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError([Problem("config", str(path), f"is not valid YAML{where}: {exc}; fix the syntax")]) from None
    if not isinstance(loaded, dict):
        raise ConfigError([Problem("config", str(path), "must be a YAML mapping of keys to values")])
    return loaded


def elastune_home() -> Path:
    """Where elastune keeps what runs leave behind (sweep state, UI jobs' checkpoints):
    $ELASTUNE_HOME, default ~/.elastune."""
    return Path(os.environ.get("ELASTUNE_HOME", Path.home() / ".elastune")).expanduser()


# ---------------------------------------------------------------------------------------------
# Turning pydantic's errors into Problems that say how to fix them.


def problems_from_validation(
    exc: ValidationError, model: type[BaseModel], raw: Mapping[str, Any], prefix: str = ""
) -> list[Problem]:
    """`exc`'s errors as Problems, each named by its dotted path in `raw` (under `prefix` where `raw`
    sits inside a config, e.g. `workload_options`)."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = [str(part) for part in err["loc"]]
        path = ".".join([prefix, *loc] if prefix else loc) or "config"
        value = _lookup(raw, err["loc"])
        if isinstance(value, Mapping):
            value = MISSING  # a whole-section rule; its message names the fields involved
        if err["type"] == "extra_forbidden":
            moved = moved_key_message(path) if model is RunConfig else None
            problems.append(Problem(path, MISSING, moved or _unknown_key_message(model, loc, prefix)))
        else:  # a rule may report several problems, one per line
            problems += [Problem(path, value, line) for line in _friendly(err).split("\n")]
    return problems


def _friendly(err: Mapping[str, Any]) -> str:
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '?')}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        op = {"greater_than": ">", "greater_than_equal": "≥", "less_than": "<", "less_than_equal": "≤"}
        bound = next(iter(ctx.values()))
        return f"must be {op[kind]} {bound}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    if kind == "int_parsing_size":  # past Python's 4300-digit limit: far beyond any bound here
        return "is a number of thousands of digits; every number here is bounded (elastune config schema)"
    if kind == "missing":
        return "is required"
    return str(err["msg"]).replace("Input should be", "must be")


def _unknown_key_message(model: type[BaseModel], loc: list[str], prefix: str = "") -> str:
    known = _fields_at(model, loc[:-1])
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.5)
    hint = f"did you mean {'.'.join([*([prefix] if prefix else []), *loc[:-1], close[0]])!r}?" if close else ""
    valid = f"valid keys here: {', '.join(sorted(known))}"
    return f"unknown key; {hint + ' ' if hint else ''}{valid}"


def _fields_at(model: type[BaseModel], loc: list[str]) -> list[str]:
    current: Any = model
    for part in loc:
        fields = current.model_fields
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        annotation = getattr(field, "annotation", None)
        # a section, or an optional one (`TableSchema | None`)
        found = [a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not found:
            return []
        current = found[0]
    return [field.alias or name for name, field in current.model_fields.items()]  # the key a config spells


def _lookup(raw: Any, loc: Sequence[Any]) -> Any:
    for part in loc:
        in_mapping = isinstance(raw, Mapping) and part in raw
        in_list = isinstance(raw, list) and isinstance(part, int) and part < len(raw)
        if in_mapping or in_list:
            raw = raw[part]
        else:
            return MISSING
    return raw
