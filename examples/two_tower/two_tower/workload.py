"""A two-tower recommender as an elastune workload, written only against elastune's public API.

A user tower embeds the user's columns (id, age, gender, occupation, zip) and an item tower the
movie's (id, its genres through one shared table, year); each tower's MLP maps them to a vector,
and a user's score for a movie is the dot product. Training is either

* `loss: in_batch` (the default): a softmax over the batch, every other movie in the batch a
  negative (the sampled-softmax recipe of YouTube's and Google's retrieval towers), judged by
  recall@10 over the whole catalogue, higher is better; or
* `loss: bce`: labelled watches and non-watches (a share `negatives` of the stream), binary
  cross-entropy, judged by eval log loss, lower is better.

The tables come from `elastune.build_tables`, so every embedding strategy, `embedding.overrides`
(say, hash the user ids only), the row-wise optimizers and the estimator apply unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import torch
from elastune import QualityMetric, RunConfig, TableSpec, build_tables
from elastune.workloads.data import Batch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F

from two_tower.data import (
    AGES,
    DENSE,
    FEATURES,
    GENDERS,
    GENRES,
    OCCUPATIONS,
    USER_FEATURES,
    YEARS,
    ZIPS,
    Interactions,
)

__all__ = ["TwoTower", "TwoTowerOptions", "TwoTowerWorkload", "make_workload"]

K = 10  # recall@K


class TwoTowerOptions(BaseModel):
    """`workload_options` of `workload: two_tower`."""

    model_config = ConfigDict(extra="forbid")

    users: int = Field(300_000, ge=2, le=50_000_000, description="Distinct users (rows of the user_id table).")
    movies: int = Field(10_000, ge=K, le=5_000_000, description="Distinct movies (rows of the movie_id table).")
    tower: list[int] = Field([128, 64], min_length=1, max_length=8, description="Each tower's MLP widths.")
    loss: Literal["in_batch", "bce"] = "in_batch"
    temperature: float = Field(0.1, gt=0, le=10, description="Softmax temperature of in-batch negatives.")
    negatives: float = Field(0.5, ge=0, lt=1, description="Share of non-watches in the stream under bce.")


class TwoTower(nn.Module):
    def __init__(self, embeddings: nn.Module, dim: int, tower: list[int]) -> None:
        super().__init__()
        self.embeddings = embeddings
        users, items = len(USER_FEATURES), len(FEATURES) - len(USER_FEATURES)
        self.user_tower = _mlp([users * dim + 1, *tower])
        self.item_tower = _mlp([items * dim + 1, *tower])

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(user vectors, movie vectors), each [B, tower[-1]]."""
        vectors = self.embeddings(sparse)  # [B, features, dim]
        split = len(USER_FEATURES)
        return self.user(vectors[:, :split], dense), self.item(vectors[:, split:], dense)

    def user(self, vectors: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        return self.user_tower(torch.cat([vectors.flatten(1), dense[:, :1].to(vectors.dtype)], dim=1))

    def item(self, vectors: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        return self.item_tower(torch.cat([vectors.flatten(1), dense[:, 1:].to(vectors.dtype)], dim=1))


def _mlp(widths: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers += [nn.Linear(widths[i], widths[i + 1]), nn.ReLU()]
    return nn.Sequential(*layers[:-1])  # no activation on the output vector


class TwoTowerWorkload:
    def __init__(self, cfg: RunConfig, options: TwoTowerOptions) -> None:
        self.cfg, self.options = cfg, options
        self.quality = (
            QualityMetric("recall_at_10", "max") if options.loss == "in_batch" else QualityMetric("logloss", "min")
        )
        o = options
        self.table_sizes = (o.users, AGES, GENDERS, OCCUPATIONS, ZIPS, o.movies, GENRES, GENRES, YEARS)
        self._source: Interactions | None = None

    @property
    def tables(self) -> list[TableSpec]:
        dim = self.cfg.model.embedding_dim
        return [
            TableSpec("user_id", self.options.users, dim),
            TableSpec("age", AGES, dim),
            TableSpec("gender", GENDERS, dim),
            TableSpec("occupation", OCCUPATIONS, dim),
            TableSpec("zip", ZIPS, dim),
            TableSpec("movie_id", self.options.movies, dim),
            TableSpec("genres", GENRES, dim, features=("genre_1", "genre_2")),  # one table, two features
            TableSpec("year", YEARS, dim),
        ]

    def build_model(self) -> nn.Module:
        embeddings = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        return TwoTower(embeddings, self.cfg.model.embedding_dim, self.options.tower)

    def data_source(self) -> Interactions:
        if self._source is None:
            negatives = self.options.negatives if self.options.loss == "bce" else 0.0
            self._source = Interactions(
                self.options.users, self.options.movies, seed=self.cfg.data.seed, negatives=negatives
            )
        return self._source

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        user, item = model(batch.dense, batch.sparse)
        if self.options.loss == "bce":
            return F.binary_cross_entropy_with_logits((user * item).sum(dim=1).float(), batch.labels)
        logits = (user @ item.T).float() / self.options.temperature  # row i's positive is column i
        # logQ correction (Yi et al. 2019): a popular movie is every row's negative far more often
        # than a rare one; subtracting the log of its sampling frequency keeps the softmax from
        # learning to rank popular movies down.
        logits = logits - self._log_frequency(batch)[None, :]
        return F.cross_entropy(logits, torch.arange(len(batch), device=logits.device))

    def _log_frequency(self, batch: Batch) -> torch.Tensor:
        """log of each batch movie's share of watches, from its popularity column (data.py: dense)."""
        return batch.dense[:, 1].float() * 4.0 - math.log(self.options.movies)

    def predict(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        user, item = model(batch.dense, batch.sparse)
        return torch.sigmoid((user * item).sum(dim=1).float())

    def evaluate(self, model: nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
        """recall@10 of each watch against the whole catalogue (and, under bce, eval log loss).

        The estimator prices evaluation by tracing `predict` on one eval batch, not this method, so
        it works in slices (64 users x the catalogue, 1024 movies at a time) whose memory stays
        below a training step's: a run's peak stays the training step's, which is what is priced."""
        catalogue = None
        hits = watches = 0
        loss_sum, seen = 0.0, 0
        for batch in batches:
            if catalogue is None:
                catalogue = self._catalogue_vectors(model, batch.sparse.device)
            user, item = model(batch.dense, batch.sparse)
            if self.options.loss == "bce":
                logits = (user * item).sum(dim=1).float()
                loss_sum += float(F.binary_cross_entropy_with_logits(logits, batch.labels, reduction="sum"))
                seen += len(batch)
            watched = batch.labels > 0.5
            movie = batch.sparse[:, len(USER_FEATURES), 0]
            for rows in torch.split(torch.nonzero(watched).squeeze(1), 64):  # small score matrices (see below)
                top = (user[rows].float() @ catalogue.T).topk(K, dim=1).indices
                hits += int((top == movie[rows, None]).any(dim=1).sum())
                watches += len(rows)
        metrics = {"recall_at_10": hits / max(watches, 1)}
        if self.options.loss == "bce":
            metrics["logloss"] = loss_sum / max(seen, 1)
        return metrics

    def _catalogue_vectors(self, model: nn.Module, device: torch.device) -> torch.Tensor:
        """Every movie's item-tower vector, [movies, tower[-1]] in fp32."""
        c = self.data_source().catalogue
        movies = torch.arange(self.options.movies)
        columns = torch.from_numpy(c.movies)
        ids = torch.cat([movies[:, None], columns], dim=1)[:, :, None].to(device)  # [M, 4, 1]
        user_ids = torch.zeros(len(movies), len(USER_FEATURES), 1, dtype=torch.int64, device=device)
        dense = torch.from_numpy(c.dense(torch.zeros(len(movies), dtype=torch.int64).numpy(), movies.numpy()))
        vectors = [
            model(d, torch.cat([u, i], dim=1))[1].float()
            for d, u, i in zip(dense.to(device).split(1024), user_ids.split(1024), ids.split(1024), strict=True)
        ]
        return torch.cat(vectors)

    def example_batch(self, n: int) -> Batch:
        return Batch(torch.empty(n, DENSE), torch.zeros(n, len(FEATURES), 1, dtype=torch.int64), torch.empty(n))


def make_workload(cfg: RunConfig, options: TwoTowerOptions) -> TwoTowerWorkload:
    """The factory `workload: two_tower` names (entry point group `elastune.workloads`)."""
    return TwoTowerWorkload(cfg, options)


make_workload.options_model = TwoTowerOptions  # type: ignore[attr-defined]
