"""A digit classifier as an elastune workload, written only against elastune's public API.

Each image arrives as categorical ids (digits/data.py: a pixel's intensity level, a patch's
pattern), looked up in two embedding tables that every position shares (`pixel`, `patch`); the
vectors, flattened in position order, go through an MLP with dropout to ten logits. Trained by
cross-entropy, judged by accuracy on the held-out images (higher is better), macro-F1 beside it,
both from torchmetrics.

The tables come from `elastune.build_tables`, so every embedding strategy, `embedding.overrides`
(say, hash the patch vocabulary only: `match: {name: patch}`), the row-wise optimizers and the
estimator apply unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import torch
from elastune import QualityMetric, RunConfig, TableSpec, Workload, build_tables
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
from torch.nn import functional as F
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from digits.data import CLASSES, INTENSITIES, Batch, Digits, Vocabulary

__all__ = ["DigitsOptions", "DigitsWorkload", "PixelClassifier"]

MAX_PATCH_ROWS = 50_000_000  # 4 levels over 4x4 patches would be 4.3e9 rows: refused, by name


class DigitsOptions(BaseModel):
    """`workload_options` of `workload: digits`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    pixel_levels: int = Field(5, ge=2, le=INTENSITIES, description="Intensity levels of a pixel feature (17: exact).")
    patch_levels: int = Field(
        3, ge=0, le=INTENSITIES, description="Intensity levels of a patch feature's pixels; 0: no patch features."
    )
    patch_size: int = Field(2, ge=2, le=4, description="Side of a patch feature's window, in pixels.")
    hidden: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        [256], min_length=1, max_length=8, description="The MLP's hidden widths."
    )
    dropout: float = Field(0.5, ge=0, lt=1, description="Dropout on the MLP's input and hidden layers.")
    test_share: float = Field(0.2, ge=0.05, le=0.5, description="Share of each digit held out for evaluation.")

    @model_validator(mode="after")
    def _patch_table_fits(self) -> DigitsOptions:
        if self.patch_levels == 1:
            raise ValueError("patch_levels=1: a patch of one level says nothing; use 0 (no patches) or >= 2")
        rows = self.patch_levels ** (self.patch_size**2)
        if rows > MAX_PATCH_ROWS:
            raise ValueError(
                f"patch_levels={self.patch_levels} with patch_size={self.patch_size} gives a patch table of "
                f"{rows:,} rows (more than {MAX_PATCH_ROWS:,}); lower patch_levels or patch_size"
            )
        return self

    @property
    def vocabulary(self) -> Vocabulary:
        return Vocabulary(self.pixel_levels, self.patch_levels, self.patch_size)


class PixelClassifier(nn.Module):
    """ids [B, features, 1] -> logits [B, 10]."""

    def __init__(self, embeddings: nn.Module, features: int, dim: int, hidden: list[int], dropout: float) -> None:
        super().__init__()
        self.embeddings = embeddings
        widths = [features * dim, *hidden]
        layers: list[nn.Module] = [nn.Dropout(dropout)]
        for i in range(len(hidden)):
            layers += [nn.Linear(widths[i], widths[i + 1]), nn.ReLU(), nn.Dropout(dropout)]
        self.mlp = nn.Sequential(*layers, nn.Linear(widths[-1], CLASSES))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        vectors = self.embeddings(ids)  # [B, features, dim], in feature (position) order
        out: torch.Tensor = self.mlp(vectors.flatten(1))
        return out


class DigitsWorkload(Workload):
    """`workload: digits`: scikit-learn's bundled digits, read by this package (data.source stays
    at its default)."""

    options_model = DigitsOptions
    options: DigitsOptions
    quality = QualityMetric("accuracy", "max")
    eval_loss_name = "cross_entropy"

    def __init__(self, cfg: RunConfig, options: DigitsOptions | None = None) -> None:
        super().__init__(cfg, options or DigitsOptions())
        if cfg.data.source != "synthetic":
            raise ValueError(
                f"data.source={cfg.data.source!r}: the digits workload reads scikit-learn's bundled digits "
                "itself; leave data.source at its default"
            )
        vocabulary, dim = self.options.vocabulary, cfg.model.embedding_dim
        self._tables = [TableSpec("pixel", vocabulary.pixel_rows, dim, features=vocabulary.pixel_features)]
        if vocabulary.patch_levels:
            self._tables.append(TableSpec("patch", vocabulary.patch_rows, dim, features=vocabulary.patch_features))
        self._source: Digits | None = None

    @property
    def tables(self) -> list[TableSpec]:
        return self._tables

    def build_model(self) -> nn.Module:
        embeddings = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        features = sum(len(t.looked_up_by) for t in self.tables)
        o = self.options
        return PixelClassifier(embeddings, features, self.cfg.model.embedding_dim, o.hidden, o.dropout)

    def data_source(self) -> Digits:
        if self._source is None:  # reads the bundled file once, when training or estimating
            o = self.options
            self._source = Digits(o.vocabulary, test_share=o.test_share, seed=self.cfg.data.seed)
        return self._source

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(model(batch["ids"]).float(), batch["label"])

    def metrics(self) -> dict[str, Metric]:
        return {
            "accuracy": MulticlassAccuracy(num_classes=CLASSES, average="micro"),
            "macro_f1": MulticlassF1Score(num_classes=CLASSES, average="macro"),
        }

    def eval_step(self, model: nn.Module, batch: Batch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        logits = model(batch["ids"]).float()
        for metric in metrics.values():
            metric.update(logits, batch["label"])
        return F.cross_entropy(logits, batch["label"])

    def table_ids(self, batch: Batch) -> torch.Tensor:
        return batch["ids"]  # [B, features, 1]: feature f's row in its table, as table_sizes lays them out
