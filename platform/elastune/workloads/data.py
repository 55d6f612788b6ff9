"""Criteo-shaped training data for DLRM: a synthetic stream, and readers for the real files.

Every source yields `Batch`es of 13 dense features, 26 sparse (categorical) features and a binary
label, the shape of the Criteo Kaggle / Terabyte click logs that DLRM was built for.

The one property everything else leans on is that a source is a *pure function of position*:
`read(start, n)` returns training samples `[start, start + n)` of an endless stream, and the same
samples whatever way the range is split into calls. That is what makes gradient accumulation
(one batch read as k micro-batches), OOM retries (re-read a batch at a smaller micro-batch) and
checkpoint resume (continue at sample `step * batch_size`) exact rather than approximate.

Sources:

* `SyntheticCriteo` (workloads/synthetic.py) needs no files. It draws Zipf-skewed ids (the access pattern that makes
  embedding tables interesting: a few hot rows, a long cold tail) and labels from a hidden
  "teacher" model, so a learner has a real signal to find and a known ceiling (`teacher_auc`).
  It is generated chunk by chunk from seeds, never materialised, so the full-size Criteo tables
  (10M rows) cost no memory.
* `CriteoTSV` reads the Criteo text format; `CriteoParquet` reads the same columns from Parquet
  (both in workloads/criteo_files.py).
* `TableSource` (workloads/table_source.py) reads a CSV or Parquet file of the user's own columns
  (`data.source: table`, `data.schema`): its own dense width, one table per categorical column.
* `TextSource` (workloads/text_source.py) reads the user's documents for `workload: lm`
  (`data.source: text`), tokenized by a BPE trained on them.

The file sources read a user's file, untrusted input, through workloads/files.py: a line over
`data.max_document_bytes` is refused by its number before it is read whole, and a .gz is inflated
as it is read.

This module holds what they share: the shapes, `Batch`, the `DataSource` protocol, and the
`DataArtifact` a file source keeps beside the weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import torch

from elastune.config import DataConfig

__all__ = [
    "CRITEO_KAGGLE_CARDINALITIES",
    "NUM_DENSE",
    "NUM_SPARSE",
    "Batch",
    "DataArtifact",
    "DataSource",
    "check_range",
    "concat_batches",
    "data_artifact",
    "empty_batch",
    "hash_category",
    "table_sizes",
    "tables_of",
]

NUM_DENSE = 13
NUM_SPARSE = 26

# Distinct values per categorical column of the Criteo Kaggle display-advertising set (C1..C26).
CRITEO_KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
Mask = npt.NDArray[np.bool_]


def tables_of(data: DataConfig) -> tuple[int, ...]:
    """The rows of each table a run's data has: for `source: table` the data's own (vocabulary
    sizes or hash buckets, workloads/table_source.py); else `data.table_rows` as given, else the
    Criteo cardinalities scaled by `data.rows_scale`."""
    if data.source == "table":
        from elastune.workloads.table_source import table_layout  # it builds on this module

        return table_layout(data).sizes
    return tuple(data.table_rows) if data.table_rows else table_sizes(data.rows_scale)


def table_sizes(rows_scale: float) -> tuple[int, ...]:
    """Criteo Kaggle cardinalities scaled: max(2, ceil(card * rows_scale)) each.

    Scaling keeps the *shape* of the problem (one huge table next to tiny ones) while letting a
    laptop run it; 1.0 gives the real sizes. The product is rounded to 1e-9 before the ceiling so
    float error cannot add a row (100 * 0.07 is 7.000000000000001 in floats; it must give 7).
    """
    if not rows_scale > 0:
        raise ValueError(f"rows_scale must be > 0, got {rows_scale}")
    return tuple(max(2, math.ceil(round(c * rows_scale, 9))) for c in CRITEO_KAGGLE_CARDINALITIES)


# ----------------------------------------------------------------------------------------------
# The batch and the source protocol
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Batch:
    """B samples, ready for the model.

    dense:  float32 [B, 13], already log1p(max(x, 0)): Criteo counts are heavy-tailed, and the log
            keeps one huge count from dominating the bottom MLP. A table source (table_source.py)
            has its own width, len(data.schema.dense), with the values as given.
    sparse: int64 [B, F, P] row ids, each in [0, table_sizes[f]) for feature f; P is the pooling
            (ids per multi-hot bag, fixed per source; 1 for the Criteo files).
    labels: float32 [B] in {0., 1.} (float so it feeds BCE-with-logits directly).
    """

    dense: torch.Tensor
    sparse: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def slice(self, start: int, stop: int) -> Batch:
        """Rows [start, stop), as views: micro-batching must not copy the batch."""
        return Batch(self.dense[start:stop], self.sparse[start:stop], self.labels[start:stop])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The same batch on `device` (sources produce CPU tensors; the loop moves them);
        `non_blocking` copies from pinned memory asynchronously."""
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in (self.dense, self.sparse, self.labels)))

    def pin_memory(self) -> Batch:
        """The batch in page-locked host memory (what a DataLoader with pin_memory=True calls)."""
        return Batch(self.dense.pin_memory(), self.sparse.pin_memory(), self.labels.pin_memory())


def concat_batches(parts: Sequence[Batch]) -> Batch:
    if len(parts) == 1:
        return parts[0]
    return Batch(
        torch.cat([p.dense for p in parts]),
        torch.cat([p.sparse for p in parts]),
        torch.cat([p.labels for p in parts]),
    )


def empty_batch(num_sparse: int, pooling: int, num_dense: int = NUM_DENSE) -> Batch:
    return Batch(
        torch.zeros(0, num_dense),
        torch.zeros(0, num_sparse, pooling, dtype=torch.int64),
        torch.zeros(0),
    )


@runtime_checkable
class DataSource(Protocol):
    """Where training and evaluation samples come from (see the module docstring)."""

    table_sizes: tuple[int, ...]
    pooling: int

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start+n) of the stream.

        Deterministic: read(s, a+b) == concat(read(s, a), read(s+a, b)) exactly, whatever the
        split. This is what makes micro-batch x accumulation, OOM retries and checkpoint resume
        exact.
        """
        ...

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        """The held-out eval set: n samples, disjoint from training, the same every call."""
        ...


def hash_category(value: str, size: int) -> int:
    """Row id of a categorical value in a table of `size` rows; empty (missing) -> 0.

    Criteo categoricals are already hashed to hex strings ("68fd1e64"), so reading them as a number
    modulo the table size is a well-spread, *stable* hash: the same value gets the same row in
    every process and run, which Python's salted `hash()` would not give. Raises ValueError for a
    value that is not hexadecimal.
    """
    return int(value, 16) % size if value else 0


def check_range(start: int, n: int) -> None:
    if start < 0 or n < 0:
        raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")


# ----------------------------------------------------------------------------------------------
# What a file source keeps beside the weights
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataArtifact:
    """What turned a file source's data into the ids a model trained on: a table source's
    vocabulary, a text source's tokenizer. The weights' rows mean nothing without it, so
    training/checkpoint.py writes it beside a checkpoint (`<checkpoint><suffix>`) and refuses a
    resume whose data now gives other ids, and tracking/mlflow.py logs it on a sweep's parent run."""

    name: str  # what it is, in messages: "vocabulary", "tokenizer"
    text: str  # its JSON
    suffix: str  # the file beside a checkpoint: <checkpoint.path><suffix>
    mlflow_path: str  # the artifact on a sweep's MLflow parent run
    changed: str  # what a resume is told when the data now gives other ids
    ids: Callable[[Any], Any]  # what of the parsed JSON must be equal for the ids to be the same


def data_artifact(config: Mapping[str, Any]) -> DataArtifact | None:
    """The data artifact of a run config given as a plain dict (a checkpoint's, a sweep spec's
    base), built if it is not cached; None for data that has none (synthetic data, the Criteo
    files, a hashed table)."""
    data = config.get("data")
    source = data.get("source") if isinstance(data, Mapping) else None
    if source == "table":
        from elastune.workloads.table_source import vocabulary_artifact  # they build on this module

        return vocabulary_artifact(data)
    if source == "text":
        from elastune.workloads.text_source import tokenizer_artifact

        return tokenizer_artifact(config)
    return None
