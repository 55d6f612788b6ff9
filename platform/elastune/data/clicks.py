"""Click-log data, the shape DLRM was built for: 13 dense features, 26 sparse (categorical)
features and a binary label per sample, as in the Criteo Kaggle / Terabyte logs.

`ClickBatch` is this family's batch (one batch type among any a workload may use: data/batch.py);
the synthetic stream, the Criteo readers and a table source's columns (data/table.py) produce it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "CRITEO_KAGGLE_CARDINALITIES",
    "NUM_DENSE",
    "NUM_SPARSE",
    "ClickBatch",
    "concat_batches",
    "empty_batch",
    "hash_category",
    "table_sizes",
]

NUM_DENSE = 13
NUM_SPARSE = 26

# Distinct values per categorical column of the Criteo Kaggle display-advertising set (C1..C26).
CRITEO_KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip


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
class ClickBatch:
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

    def slice(self, start: int, stop: int) -> ClickBatch:
        """Rows [start, stop), as views: micro-batching must not copy the batch."""
        return ClickBatch(self.dense[start:stop], self.sparse[start:stop], self.labels[start:stop])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ClickBatch:
        """The same batch on `device` (sources produce CPU tensors; the loop moves them);
        `non_blocking` copies from pinned memory asynchronously."""
        return ClickBatch(*(t.to(device, non_blocking=non_blocking) for t in (self.dense, self.sparse, self.labels)))

    def pin_memory(self) -> ClickBatch:
        """The batch in page-locked host memory (what a DataLoader with pin_memory=True calls)."""
        return ClickBatch(self.dense.pin_memory(), self.sparse.pin_memory(), self.labels.pin_memory())


def concat_batches(parts: Sequence[ClickBatch]) -> ClickBatch:
    if len(parts) == 1:
        return parts[0]
    return ClickBatch(
        torch.cat([p.dense for p in parts]),
        torch.cat([p.sparse for p in parts]),
        torch.cat([p.labels for p in parts]),
    )


def empty_batch(num_sparse: int, pooling: int, num_dense: int = NUM_DENSE) -> ClickBatch:
    return ClickBatch(
        torch.zeros(0, num_dense),
        torch.zeros(0, num_sparse, pooling, dtype=torch.int64),
        torch.zeros(0),
    )


def hash_category(value: str, size: int) -> int:
    """Row id of a categorical value in a table of `size` rows; empty (missing) -> 0.

    Criteo categoricals are already hashed to hex strings ("68fd1e64"), so reading them as a number
    modulo the table size is a well-spread, *stable* hash: the same value gets the same row in
    every process and run, which Python's salted `hash()` would not give. Raises ValueError for a
    value that is not hexadecimal.
    """
    return int(value, 16) % size if value else 0
