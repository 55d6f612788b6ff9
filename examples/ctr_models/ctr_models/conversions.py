"""A second label for the click logs: whether a click converted, for the two-task MMoE.

Click logs carry one label. `WithConversions` wraps any click source (synthetic, Criteo files, a
table's columns) and adds `conversions`: a click converts when a hidden score of four of its
categorical ids passes a threshold, so a conversion is always a click (the impression-level
"click and convert" label of e-commerce logs) and depends on ids the click teacher weighs
differently. Each id's share of the score is a fixed pseudo-random value in [-0.5, 0.5), so the
label is learnable from the embeddings of the ids a model sees often, and a pure function of the
sample: the stream stays a pure function of position, as elastune's `DataSource` asks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from elastune.data import ClickBatch, DataSource

__all__ = ["CONVERSION_FIELDS", "THRESHOLD", "ConversionBatch", "WithConversions", "conversions"]

CONVERSION_FIELDS = (1, 3, 6, 10)  # C2, C4, C7, C11 (fields past a table source's last wrap around)
THRESHOLD = 0.25  # on a sum of four values in [-0.5, 0.5): about a third of clicks convert
_GOLDEN = 0.6180339887498949  # Weyl sequence: id * golden mod 1 spreads neighbouring ids apart


@dataclass(frozen=True, eq=False)
class ConversionBatch:
    """A ClickBatch's fields and `conversions`: float32 [B] in {0., 1.}, 1 only where labels is."""

    dense: torch.Tensor
    sparse: torch.Tensor
    labels: torch.Tensor
    conversions: torch.Tensor


def conversions(batch: ClickBatch) -> torch.Tensor:
    """The conversion label of each sample of `batch` (see the module docstring)."""
    num_fields = batch.sparse.shape[1]
    score = torch.zeros(len(batch), dtype=torch.float64)
    for i, f in enumerate(CONVERSION_FIELDS):
        ids = batch.sparse[:, f % num_fields].double()  # [B, P]; exact: ids < 2^31
        salt = 0.1 + 0.2 * i  # the same id of another field gets another value
        score += (torch.frac(ids * _GOLDEN + salt) - 0.5).mean(dim=1)
    return batch.labels * (score > THRESHOLD).float()


class WithConversions:
    """`source`'s samples as ConversionBatches; a DataSource."""

    def __init__(self, source: DataSource) -> None:
        self.source = source
        self.table_sizes = source.table_sizes
        self.pooling = source.pooling

    def read(self, start: int, n: int) -> ConversionBatch:
        return _with_conversions(self.source.read(start, n))

    def eval_batches(self, n: int, batch_size: int) -> Iterator[ConversionBatch]:
        for batch in self.source.eval_batches(n, batch_size):
            yield _with_conversions(batch)


def _with_conversions(batch: ClickBatch) -> ConversionBatch:
    return ConversionBatch(batch.dense, batch.sparse, batch.labels, conversions(batch))
