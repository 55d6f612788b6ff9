"""A workload written against the protocol before `elastune.Workload`, exactly as a user would have
(tests/unit/plugin_workload/tower.py as it was in that release): the click triple `Batch` from
`elastune.workloads.data`, `predict`, no base class. tests/unit/test_workload_compat.py checks that
it still trains and is estimated, with DeprecationWarnings naming what replaces each part."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from elastune import QualityMetric, RunConfig, swap_embeddings
from elastune.workloads.data import Batch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F

USERS, ITEMS, DENSE = 500, 300, 4


class TowerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: int = Field(16, ge=1, le=1024)


class Towers(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.user = nn.Embedding(USERS, dim)
        self.item = nn.EmbeddingBag(ITEMS, dim, mode="mean")
        self.dense = nn.Sequential(nn.Linear(DENSE, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        u = self.user(sparse[:, 0, 0]) + self.dense(dense)
        i = self.item(sparse[:, 1, :])
        return (u * i).sum(dim=1)


class Source:
    """Samples as a pure function of their position: read(s, a + b) == read(s, a) ++ read(s + a, b)."""

    table_sizes = (USERS, ITEMS)
    pooling = 2

    def read(self, start: int, n: int) -> Batch:
        index = torch.arange(start, start + n, dtype=torch.int64)
        user = (index * 7919) % USERS
        items = torch.stack([(index * 104729 + k * 31) % ITEMS for k in range(self.pooling)], dim=1)
        sparse = torch.stack([user.repeat_interleave(self.pooling).view(n, self.pooling), items], dim=1)
        dense = torch.stack([((index * (k + 3)) % 11).float() / 11 for k in range(DENSE)], dim=1)
        labels = ((user // 7 + items[:, 0]) % 2).float()  # learnable from the two ids
        return Batch(dense, sparse, labels)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        for start in range(0, n, batch_size):
            yield self.read(10**9 + start, min(batch_size, n - start))


class TowerWorkload:
    def __init__(self, cfg: RunConfig, options: TowerOptions) -> None:
        self.cfg, self.options = cfg, options
        self.table_sizes = Source.table_sizes

    def build_model(self) -> nn.Module:
        model = Towers(self.cfg.model.embedding_dim, self.options.hidden)
        swap_embeddings(model, self.cfg.embedding, self.cfg.optimizer.sparse)
        return model

    def data_source(self) -> Source:
        return Source()

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(model(batch.dense, batch.sparse).float(), batch.labels)

    def predict(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return torch.sigmoid(model(batch.dense, batch.sparse).float())

    def example_batch(self, n: int) -> Batch:
        return Batch(torch.empty(n, DENSE), torch.zeros(n, 2, Source.pooling, dtype=torch.int64), torch.empty(n))


def make_workload(cfg: RunConfig, options: TowerOptions) -> TowerWorkload:
    return TowerWorkload(cfg, options)


make_workload.options_model = TowerOptions  # type: ignore[attr-defined]


class RankedTowers(TowerWorkload):
    """The towers judged by their own metric: the share of eval samples whose score ranks its own
    item above every other item of the batch (higher is better), not log loss."""

    quality = QualityMetric("hit_rate", "max")

    def evaluate(self, model: nn.Module, batches: Iterator[Batch]) -> dict[str, float]:
        hits = total = 0
        for batch in batches:
            user = model.user(batch.sparse[:, 0, 0]) + model.dense(batch.dense)
            item = model.item(batch.sparse[:, 1, :])
            scores = user @ item.T  # every user against every item of the batch
            hits += int((scores.argmax(dim=1) == torch.arange(len(batch))).sum())
            total += len(batch)
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
