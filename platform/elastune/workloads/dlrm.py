"""`workload: dlrm`: DLRM (Naumov et al. 2019), the recommender shape whose embedding tables
outgrow device memory, on click-log data (synthetic, the Criteo files, or a table's own columns).

dense features -> bottom MLP -> one vector of size `dim`
sparse features -> one pooled embedding bag each -> 26 vectors of size `dim`
pairwise dot products of those 27 vectors (the "interaction") + the bottom output -> top MLP -> logit

Judged as a click model: eval log loss (its quality metric, lower is better), AUC, and the log loss
of always predicting the eval set's click rate (the bar a model must clear).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from pydantic import Field, field_validator
from torch import nn
from torch.nn import functional as F

from elastune.config import RunConfig
from elastune.data.clicks import NUM_DENSE, ClickBatch, table_sizes
from elastune.data.criteo import CriteoParquet, CriteoTSV
from elastune.data.source import DataSource
from elastune.data.synthetic import SyntheticCriteo
from elastune.data.table import TableSource, table_layout
from elastune.embeddings.tables import TableSpec, build_tables
from elastune.workloads.base import Workload
from elastune.workloads.options import WorkloadOptions
from elastune.workloads.quality import LOGLOSS

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["DLRM", "DLRMOptions", "DLRMWorkload", "mlp"]

MAX_WIDTH = 65536  # one hidden layer's width


class DLRMOptions(WorkloadOptions):
    """`workload_options` of `workload: dlrm`: the MLPs' hidden widths (the width of the embeddings
    and of the bottom MLP's output is `model.embedding_dim`); the output layers are added for you."""

    bottom_mlp: list[int] = Field(
        default_factory=lambda: [64, 32],
        max_length=16,
        description="Hidden widths of the MLP over the dense features; a last layer maps to model.embedding_dim.",
    )
    top_mlp: list[int] = Field(
        default_factory=lambda: [64, 32],
        max_length=16,
        description="Hidden widths of the MLP over the interaction; a last layer maps to 1 logit.",
    )

    @field_validator("bottom_mlp", "top_mlp")
    @classmethod
    def _positive_widths(cls, widths: list[int]) -> list[int]:
        bad = [w for w in widths if not 1 <= w <= MAX_WIDTH]
        if bad:
            raise ValueError(f"layer widths must be between 1 and {MAX_WIDTH}, got {bad}")
        return widths


def mlp(widths: Sequence[int], *, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(widths) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    pair_rows: torch.Tensor
    pair_cols: torch.Tensor

    def __init__(
        self,
        num_dense: int,
        embeddings: nn.Module,
        dim: int,
        bottom_hidden: Sequence[int],
        top_hidden: Sequence[int],
    ) -> None:
        super().__init__()
        self.embeddings = embeddings
        num_sparse = len(embeddings.table_sizes)  # type: ignore[arg-type]
        # The bottom MLP ends at `dim` so its output can be dotted with the embeddings.
        self.bottom = mlp([num_dense, *bottom_hidden, dim], last_activation=True)
        vectors = num_sparse + 1
        pairs = vectors * (vectors - 1) // 2
        self.top = mlp([dim + pairs, *top_hidden, 1], last_activation=False)
        rows, cols = torch.tril_indices(vectors, vectors, offset=-1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)  # [B, dim]
        emb = self.embeddings(sparse)  # [B, F, dim]
        # Under autocast the bottom output may be low precision while bags stay fp32: match them.
        vectors = torch.cat([x.unsqueeze(1), emb.to(x.dtype)], dim=1)  # [B, F+1, dim]
        dots = torch.bmm(vectors, vectors.transpose(1, 2))  # [B, F+1, F+1]
        pairs = dots[:, self.pair_rows, self.pair_cols]  # each unordered pair once
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)


class DLRMWorkload(Workload):
    """DLRM on click-log data (synthetic, criteo_tsv, parquet) or on a table source's own columns
    (`data.source: table`): then its dense width is len(data.schema.dense) and its tables are the
    source's, one per categorical / multi_hot column, named as the column."""

    options_model = DLRMOptions
    options: DLRMOptions
    quality = LOGLOSS
    eval_loss_name = "logloss"  # the mean eval BCE is the log loss

    def __init__(self, cfg: RunConfig, options: DLRMOptions | None = None) -> None:
        super().__init__(cfg, options if options is not None else DLRMOptions())
        d = cfg.data
        self._layout = table_layout(d) if d.source == "table" else None
        criteo = tuple(d.table_rows) if d.table_rows else table_sizes(d.rows_scale)
        self._sizes = self._layout.sizes if self._layout else criteo
        self.num_dense = self._layout.num_dense if self._layout else NUM_DENSE
        self.pooling = self._layout.pooling if self._layout else d.pooling

    @property
    def tables(self) -> list[TableSpec]:
        """One table per categorical column, named as the Criteo columns (C1..C26; T1.. for
        `data.table_rows`; the column's own name for a table source): what `embedding.overrides`
        match by name."""
        dim = self.cfg.model.embedding_dim
        if self._layout is not None:
            return [TableSpec(name, rows, dim) for name, rows in zip(self._layout.names, self._sizes, strict=True)]
        prefix = "T" if self.cfg.data.table_rows else "C"
        return [TableSpec(f"{prefix}{i + 1}", rows, dim) for i, rows in enumerate(self._sizes)]

    def build_model(self) -> nn.Module:
        o = self.options
        emb = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        with warnings.catch_warnings():  # a table source may have no dense column: a 0-wide first layer
            warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op", UserWarning)
            return DLRM(self.num_dense, emb, self.cfg.model.embedding_dim, o.bottom_mlp, o.top_mlp)

    def data_source(self) -> DataSource:
        d = self.cfg.data
        eval_samples = 0 if d.eval_path else self.cfg.eval.samples
        if d.source == "synthetic":
            return SyntheticCriteo(self._sizes, zipf_alpha=d.zipf_alpha, pooling=d.pooling, seed=d.seed)
        if d.source == "table":
            return TableSource(d, eval_samples=eval_samples, layout=self._layout)
        reader = CriteoTSV if d.source == "criteo_tsv" else CriteoParquet
        assert d.path is not None  # RunConfig guarantees it for file sources
        return reader(
            d.path,
            self._sizes,
            eval_path=d.eval_path,
            eval_samples=eval_samples,
            skip_malformed=d.skip_malformed,
            max_document_bytes=d.max_document_bytes,
        )

    def loss(self, model: nn.Module, batch: ClickBatch) -> torch.Tensor:
        logits = model(batch.dense, batch.sparse)
        # BCE on logits in fp32: under autocast the logits may be fp16/bf16, and log-sigmoid of a
        # low-precision logit loses the small probabilities the log loss is most sensitive to.
        return F.binary_cross_entropy_with_logits(logits.float(), batch.labels)

    def metrics(self) -> dict[str, Metric]:
        # Imported here: torchmetrics imports matplotlib, which writes its caches under $HOME; a
        # config check (which builds the workload) must write nothing.
        from torchmetrics.classification import BinaryAUROC

        from elastune.workloads.click_metrics import BaselineLogLoss

        # validate_args=False: the inputs are well formed by construction, and the checks read
        # values (a host sync per batch, and impossible on the estimator's fake tensors)
        return {"auc": BinaryAUROC(validate_args=False), "baseline_logloss": BaselineLogLoss()}

    def eval_step(self, model: nn.Module, batch: ClickBatch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        logits = model(batch.dense, batch.sparse).float()
        metrics["auc"].update(torch.sigmoid(logits), batch.labels.long())
        metrics["baseline_logloss"].update(batch.labels)
        return F.binary_cross_entropy_with_logits(logits, batch.labels)

    def evaluate(self, model: nn.Module, batches: Any) -> dict[str, float]:
        with warnings.catch_warnings():  # one class only: said below as a NaN AUC, not a warning
            warnings.filterwarnings("ignore", "No (positive|negative) samples in targets", UserWarning)
            out = super().evaluate(model, batches)
        if out["baseline_logloss"] == 0.0:  # one class only: no ranking to score
            out["auc"] = math.nan
        return out

    def table_ids(self, batch: ClickBatch) -> torch.Tensor:
        return batch.sparse

    def example_batch(self, n: int) -> ClickBatch:
        return ClickBatch(
            torch.empty(n, self.num_dense),
            torch.zeros(n, len(self._sizes), self.pooling, dtype=torch.int64),
            torch.empty(n),
        )
