"""What the three click models share with elastune's built-in DLRM: its workload, less the model.

`ClickWorkload` hands everything but the network to a `DLRMWorkload` (elastune.workloads.dlrm) it
holds: the data (`data.source` synthetic, criteo_tsv, parquet or table, with `data.rows_scale`,
`data.pooling` and the rest as for `workload: dlrm`), the tables (C1..C26, built by
`elastune.build_tables`, so every `embedding.strategy`, `embedding.overrides` and
`optimizer.sparse` apply), the loss (BCE on logits) and the eval metrics (log loss, AUC and the
click-rate baseline). A subclass names its options model and gives `make_model(embeddings)`, a
module called as `model(dense [B, D], sparse ids [B, F, P]) -> logits [B]`.

Unlike DLRM, which is judged by log loss, these are judged by eval AUC (higher is better), the
metric their papers report first.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import torch
from elastune import Batch, QualityMetric, RunConfig, TableSpec, Workload, build_tables
from elastune.data import DataSource
from elastune.workloads.dlrm import DLRMWorkload, mlp
from pydantic import Field
from torch import nn

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["AUC", "ClickWorkload", "Width", "field_vectors", "mlp"]

AUC = QualityMetric("auc", "max")
Width = Annotated[int, Field(ge=1, le=65536)]  # one hidden layer's width, as DLRM bounds its own


def field_vectors(embeddings: nn.Module, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
    """The F pooled field vectors of a batch, [B, F, dim], in the dense features' dtype (a `half`
    or `int8` table may return another)."""
    vectors: torch.Tensor = embeddings(sparse)
    return vectors.to(dense.dtype)


class ClickWorkload(Workload):
    """`workload: dlrm`'s data, tables, loss and metrics around another model; judged by eval AUC."""

    quality = AUC
    eval_loss_name = DLRMWorkload.eval_loss_name  # "logloss"

    def __init__(self, cfg: RunConfig, options: Any = None) -> None:
        model = type(self).options_model
        super().__init__(cfg, options if options is not None or model is None else model())
        self.clicks = DLRMWorkload(cfg)  # reads the data's layout; its model and options go unused

    def make_model(self, embeddings: nn.Module) -> nn.Module:
        raise NotImplementedError(f"{type(self).__name__} must define make_model(embeddings)")

    @property
    def num_dense(self) -> int:
        return self.clicks.num_dense

    @property
    def tables(self) -> list[TableSpec]:
        return self.clicks.tables

    def build_model(self) -> nn.Module:
        embeddings = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        with warnings.catch_warnings():  # a table source may have no dense column: a 0-wide layer
            warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op", UserWarning)
            return self.make_model(embeddings)

    def data_source(self) -> DataSource:
        return self.clicks.data_source()

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return self.clicks.loss(model, batch)

    def metrics(self) -> dict[str, Metric]:
        return self.clicks.metrics()

    def eval_step(self, model: nn.Module, batch: Batch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        return self.clicks.eval_step(model, batch, metrics)

    def evaluate(self, model: nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
        return self.clicks.evaluate(model, batches)

    def table_ids(self, batch: Batch) -> torch.Tensor:
        return self.clicks.table_ids(batch)

    def example_batch(self, n: int) -> Batch:
        return self.clicks.example_batch(n)
