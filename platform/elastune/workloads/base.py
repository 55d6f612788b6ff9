"""The Workload protocol: what the training loop and the estimator need from a model family.

The loop knows nothing about DLRM; it asks the workload for a model, a data source and a loss.
Which workload a run uses is resolved in workloads/registry.py (built-ins, plugins, import paths).
"""

from __future__ import annotations

import warnings
from typing import Protocol, runtime_checkable

import torch
from torch import nn
from torch.nn import functional as F

from elastune.config import RunConfig
from elastune.data.clicks import NUM_DENSE, Batch, table_sizes
from elastune.data.criteo import CriteoParquet, CriteoTSV
from elastune.data.source import DataSource
from elastune.data.synthetic import SyntheticCriteo
from elastune.data.table import TableSource, table_layout
from elastune.embeddings.tables import TableSpec, build_tables
from elastune.workloads.dlrm import DLRM
from elastune.workloads.quality import LOGLOSS

__all__ = ["DLRMWorkload", "Workload"]


@runtime_checkable
class Workload(Protocol):
    """A model family elastune can estimate, train and tune (docs/workloads.md).

    Six members are optional, so they are not part of the protocol's runtime check:

    * `quality: QualityMetric`: the eval metric the sweep's quality tolerance applies to and its
      direction, e.g. `QualityMetric("perplexity", "min")`. Default: `logloss`, lower is better.
    * `evaluate(model, batches) -> dict[str, float]`: eval metrics over the held-out batches (on
      the run's device, under no_grad and the run's autocast); must hold the `quality` metric.
      Default: a binary classifier's `logloss`, `auc` and `baseline_logloss` from `predict`.
    * `loss_weight(batch) -> Tensor | float`: how many terms `loss(batch)` is the mean of, when that
      is not the number of samples (an LM averages over real tokens). Gradient accumulation weights
      each micro-batch's loss by it, so micro x accum stays exact. Default: `len(batch)`.
    * `arrange_step(batch) -> Batch`: the step's samples reordered before the micro-batch split
      (an LM sorts them by length so that each micro-batch pads less). Default: as read.
    * `units: str` with `count_units(batch) -> int`: a throughput of the workload's own beside
      samples/s, over the same timed window (an LM's real tokens). Default: none.
    * `context: int`: tokens per row of a sequence workload (an LM's context length). A sweep's
      token budget, `constraints.effective_batch: {tokens: N}`, is N / context samples per step.
      Default: none (a token budget is refused).
    """

    table_sizes: tuple[int, ...]  # rows of each sparse feature's table

    def build_model(self) -> nn.Module: ...

    def data_source(self) -> DataSource: ...

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Mean loss of `batch` (a mean, so micro-batch losses average into the step's loss)."""
        ...

    def predict(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Probabilities for `batch`, used by evaluation."""
        ...

    def example_batch(self, n: int) -> Batch:
        """A batch of `n` samples of the source's shapes and dtypes (values do not matter): the
        estimator traces the model on it under fake tensors, so it must allocate with torch
        factory functions (torch.empty / torch.zeros), not copy real data."""
        ...


class DLRMWorkload:
    """DLRM on Criteo-shaped data (synthetic, criteo_tsv, parquet) or on a table source's own
    columns (`data.source: table`): then its dense width is len(data.schema.dense) and its tables
    are the source's, one per categorical / multi_hot column, named as the column."""

    quality = LOGLOSS  # a click model: eval log loss, scored from predict()

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        d = cfg.data
        self._layout = table_layout(d) if d.source == "table" else None
        criteo = tuple(d.table_rows) if d.table_rows else table_sizes(d.rows_scale)
        self.table_sizes = self._layout.sizes if self._layout else criteo
        self.num_dense = self._layout.num_dense if self._layout else NUM_DENSE
        self.pooling = self._layout.pooling if self._layout else d.pooling

    @property
    def tables(self) -> list[TableSpec]:
        """One table per categorical column, named as the Criteo columns (C1..C26; T1.. for
        `data.table_rows`; the column's own name for a table source): what `embedding.overrides`
        match by name."""
        dim = self.cfg.model.embedding_dim
        if self._layout is not None:
            return [TableSpec(name, rows, dim) for name, rows in zip(self._layout.names, self.table_sizes, strict=True)]
        prefix = "T" if self.cfg.data.table_rows else "C"
        return [TableSpec(f"{prefix}{i + 1}", rows, dim) for i, rows in enumerate(self.table_sizes)]

    def build_model(self) -> nn.Module:
        m = self.cfg.model
        emb = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        with warnings.catch_warnings():  # a table source may have no dense column: a 0-wide first layer
            warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op", UserWarning)
            return DLRM(self.num_dense, emb, m.embedding_dim, m.bottom_mlp, m.top_mlp)

    def data_source(self) -> DataSource:
        d = self.cfg.data
        eval_samples = 0 if d.eval_path else self.cfg.eval.samples
        if d.source == "synthetic":
            return SyntheticCriteo(self.table_sizes, zipf_alpha=d.zipf_alpha, pooling=d.pooling, seed=d.seed)
        if d.source == "table":
            return TableSource(d, eval_samples=eval_samples, layout=self._layout)
        reader = CriteoTSV if d.source == "criteo_tsv" else CriteoParquet
        assert d.path is not None  # RunConfig guarantees it for file sources
        return reader(
            d.path,
            self.table_sizes,
            eval_path=d.eval_path,
            eval_samples=eval_samples,
            skip_malformed=d.skip_malformed,
            max_document_bytes=d.max_document_bytes,
        )

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        logits = model(batch.dense, batch.sparse)
        # BCE on logits in fp32: under autocast the logits may be fp16/bf16, and log-sigmoid of a
        # low-precision logit loses the small probabilities the log loss is most sensitive to.
        return F.binary_cross_entropy_with_logits(logits.float(), batch.labels)

    def predict(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return torch.sigmoid(model(batch.dense, batch.sparse).float())

    def example_batch(self, n: int) -> Batch:
        return Batch(
            torch.empty(n, self.num_dense),
            torch.zeros(n, len(self.table_sizes), self.pooling, dtype=torch.int64),
            torch.empty(n),
        )
