"""A workload written the way a user would write one, outside the library: an `elastune.Workload`
with two embedding towers (user, item) over its own columns and its own batch (a nested dict), its
own options, a plain nn.Module whose nn.Embeddings `elastune.swap_embeddings` turns into the run's
strategy, and its metrics from torchmetrics. Used by tests/unit/test_workload_plugins.py
(as an import path, and as a plugin registered under the `elastune.workloads` entry-point group)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from elastune import QualityMetric, RunConfig, TableSpec, Workload, swap_embeddings
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F
from torchmetrics import Metric
from torchmetrics.classification import BinaryAUROC

USERS, ITEMS, DENSE = 500, 300, 4
Batch = dict[str, Any]  # {"features": {"dense": [B, 4], "user": [B], "items": [B, 2]}, "label": [B]}


class TowerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: int = Field(16, ge=1, le=1024)


class Towers(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.user = nn.Embedding(USERS, dim)
        self.item = nn.EmbeddingBag(ITEMS, dim, mode="mean")
        self.dense = nn.Sequential(nn.Linear(DENSE, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def vectors(self, features: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.user(features["user"]) + self.dense(features["dense"]), self.item(features["items"])

    def forward(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        u, i = self.vectors(features)
        return (u * i).sum(dim=1)


class Source:
    """Samples as a pure function of their position: read(s, a + b) == read(s, a) ++ read(s + a, b).
    A batch is a nested dict, as a user's own collate function might make it."""

    pooling = 2

    def read(self, start: int, n: int) -> Batch:
        index = torch.arange(start, start + n, dtype=torch.int64)
        user = (index * 7919) % USERS
        items = torch.stack([(index * 104729 + k * 31) % ITEMS for k in range(self.pooling)], dim=1)
        dense = torch.stack([((index * (k + 3)) % 11).float() / 11 for k in range(DENSE)], dim=1)
        labels = ((user // 7 + items[:, 0]) % 2).float()  # learnable from the two ids
        return {"features": {"dense": dense, "user": user, "items": items}, "label": labels}

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        for start in range(0, n, batch_size):
            yield self.read(10**9 + start, min(batch_size, n - start))


class TowerWorkload(Workload):
    """A click model judged by its eval loss (the default quality metric) and AUC."""

    options_model = TowerOptions
    options: TowerOptions

    def build_model(self) -> nn.Module:
        model = Towers(self.cfg.model.embedding_dim, self.options.hidden)
        swap_embeddings(model, self.cfg.embedding, self.cfg.optimizer.sparse)
        return model

    def data_source(self) -> Source:
        return Source()

    @property
    def tables(self) -> list[TableSpec]:
        """Declared for `elastune estimate`'s breakdown and the estimator's distinct-row count."""
        dim = self.cfg.model.embedding_dim
        return [TableSpec("user", USERS, dim), TableSpec("items", ITEMS, dim, pooling=Source.pooling)]

    def table_ids(self, batch: Batch) -> torch.Tensor:
        features = batch["features"]
        user = features["user"][:, None].expand(-1, Source.pooling)
        return torch.stack([user, features["items"]], dim=1)  # [B, tables, ids per bag]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(model(batch["features"]).float(), batch["label"])

    def metrics(self) -> dict[str, Metric]:
        return {"auc": BinaryAUROC(validate_args=False)}

    def eval_step(self, model: nn.Module, batch: Batch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        logits = model(batch["features"]).float()
        metrics["auc"].update(torch.sigmoid(logits), batch["label"].long())
        return F.binary_cross_entropy_with_logits(logits, batch["label"])


def make_workload(cfg: RunConfig, options: TowerOptions) -> TowerWorkload:
    return TowerWorkload(cfg, options)


make_workload.options_model = TowerOptions  # type: ignore[attr-defined]


class RankedTowers(TowerWorkload):
    """The towers judged by their own metric: the share of eval samples whose score ranks its own
    item above every other item of the batch (higher is better), not log loss."""

    quality = QualityMetric("hit_rate", "max")

    def evaluate(self, model: nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
        hits = total = 0
        for batch in batches:
            user, item = model.vectors(batch["features"])
            scores = user @ item.T  # every user against every item of the batch
            n = len(batch["label"])
            hits += int((scores.argmax(dim=1) == torch.arange(n)).sum())
            total += n
        return {"hit_rate": hits / max(total, 1), "batches_seen": float(total)}


def make_ranked(cfg: RunConfig, options: TowerOptions) -> RankedTowers:
    return RankedTowers(cfg, options)


make_ranked.options_model = TowerOptions  # type: ignore[attr-defined]


class WrongMetric(RankedTowers):
    quality = QualityMetric("recall_at_10", "max")  # evaluate() does not compute it


def wrong_metric(cfg: RunConfig, options: Any) -> WrongMetric:
    return WrongMetric(cfg, TowerOptions())


class UntypedMetric(TowerWorkload):
    quality = ("logloss", "min")


def untyped_metric(cfg: RunConfig, options: Any) -> UntypedMetric:
    return UntypedMetric(cfg, TowerOptions())


def raising(cfg: RunConfig, options: Any) -> TowerWorkload:
    raise RuntimeError("the towers need a GPU cluster")


def not_a_workload(cfg: RunConfig, options: Any) -> dict[str, Any]:
    return {"model": "towers"}


NOT_CALLABLE = 42
