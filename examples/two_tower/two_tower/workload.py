"""A two-tower recommender as an elastune workload, written only against elastune's public API.

A user tower embeds the user's columns (id, age, gender, occupation, zip) and an item tower the
movie's (id, its genres through one shared table, year); each tower's MLP maps them to a vector,
and a user's score for a movie is the dot product. Training is either

* `loss: in_batch` (the default): a softmax over the batch, every other movie in the batch a
  negative (the sampled-softmax recipe of YouTube's and Google's retrieval towers), judged by
  recall@10 among the movies of the held-out set, higher is better; or
* `loss: bce`: labelled watches and non-watches (a share `negatives` of the stream), binary
  cross-entropy, judged by eval log loss, lower is better.

The tables come from `elastune.build_tables`, so every embedding strategy, `embedding.overrides`
(say, hash the user ids only), the row-wise optimizers and the estimator apply unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from elastune import QualityMetric, RunConfig, TableSource, TableSpec, Workload, build_tables, table_layout
from elastune.data import ClickBatch, DataSource
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F

from two_tower.data import (
    AGES,
    DENSE,
    GENDERS,
    GENRES,
    OCCUPATIONS,
    YEARS,
    ZIPS,
    Interactions,
)

__all__ = ["TwoTower", "TwoTowerOptions", "TwoTowerWorkload", "make_workload"]

K = 10  # recall@K


class TwoTowerOptions(BaseModel):
    """`workload_options` of `workload: two_tower`."""

    model_config = ConfigDict(extra="forbid")

    users: int = Field(300_000, ge=2, le=50_000_000, description="Generated data: distinct users (user_id rows).")
    movies: int = Field(10_000, ge=K, le=5_000_000, description="Generated data: distinct movies (movie_id rows).")
    tower: list[int] = Field([128, 64], min_length=1, max_length=8, description="Each tower's MLP widths.")
    loss: Literal["in_batch", "bce"] = "in_batch"
    temperature: float = Field(0.1, gt=0, le=10, description="Softmax temperature of in-batch negatives.")
    negatives: float = Field(0.5, ge=0, lt=1, description="Generated data: share of non-watches under bce.")
    item_columns: list[str] = Field(
        ["movie_id", "genres", "year"],
        min_length=1,
        max_length=64,
        description="data.source: table: the columns (categorical, multi_hot or dense) the item tower reads, the "
        "item's id first (recall@10 ranks by it); every other column of data.schema is the user's.",
    )


@dataclass(frozen=True)
class Towers:
    """Which features (columns of ClickBatch.sparse) and dense columns each tower reads."""

    user: list[int]
    item: list[int]
    user_dense: list[int]
    item_dense: list[int]
    item_id: int  # the feature whose id names the item


GENERATED = Towers(user=[0, 1, 2, 3, 4], item=[5, 6, 7, 8], user_dense=[0], item_dense=[1], item_id=5)


class TwoTower(nn.Module):
    def __init__(self, embeddings: nn.Module, dim: int, tower: list[int], towers: Towers) -> None:
        super().__init__()
        self.embeddings = embeddings
        for name in ("user", "item", "user_dense", "item_dense"):
            self.register_buffer(f"_{name}", torch.tensor(getattr(towers, name), dtype=torch.int64), persistent=False)
        self.user_tower = _mlp([len(towers.user) * dim + len(towers.user_dense), *tower])
        self.item_tower = _mlp([len(towers.item) * dim + len(towers.item_dense), *tower])

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(user vectors, item vectors), each [B, tower[-1]]."""
        vectors = self.embeddings(sparse)  # [B, features, dim]
        return (
            self._side(self.user_tower, vectors, dense, self._user, self._user_dense),
            self._side(self.item_tower, vectors, dense, self._item, self._item_dense),
        )

    @staticmethod
    def _side(
        mlp: nn.Module, vectors: torch.Tensor, dense: torch.Tensor, features: torch.Tensor, columns: torch.Tensor
    ) -> torch.Tensor:
        x = torch.cat([vectors[:, features].flatten(1), dense[:, columns].to(vectors.dtype)], dim=1)
        out: torch.Tensor = mlp(x)
        return out


def _mlp(widths: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers += [nn.Linear(widths[i], widths[i + 1]), nn.ReLU()]
    return nn.Sequential(*layers[:-1])  # no activation on the output vector


class TwoTowerWorkload(Workload):
    """On generated MovieLens-style data (data.source: synthetic, the default) or on your own file
    of interactions through elastune's table source (data.source: table, data.schema), with the
    towers split by `item_columns`."""

    options_model = TwoTowerOptions
    options: TwoTowerOptions

    def __init__(self, cfg: RunConfig, options: TwoTowerOptions) -> None:
        super().__init__(cfg, options)
        self.quality = (
            QualityMetric("recall_at_10", "max") if options.loss == "in_batch" else QualityMetric("logloss", "min")
        )
        dim = cfg.model.embedding_dim
        self._source: DataSource | None = None
        if cfg.data.source == "table":
            self._layout = table_layout(cfg.data)
            self.towers, self.num_dense = _split(cfg, options, self._layout.names)
            self.pooling = self._layout.pooling
            self._tables = [
                TableSpec(name, rows, dim, pooling=self.pooling)
                for name, rows in zip(self._layout.names, self._layout.sizes, strict=True)
            ]
        elif cfg.data.source == "synthetic":
            o = options
            self.towers, self.num_dense, self.pooling = GENERATED, DENSE, 1
            self._tables = [
                TableSpec("user_id", o.users, dim),
                TableSpec("age", AGES, dim),
                TableSpec("gender", GENDERS, dim),
                TableSpec("occupation", OCCUPATIONS, dim),
                TableSpec("zip", ZIPS, dim),
                TableSpec("movie_id", o.movies, dim),
                TableSpec("genres", GENRES, dim, features=("genre_1", "genre_2")),  # one table, two features
                TableSpec("year", YEARS, dim),
            ]
        else:
            raise ValueError(f"data.source={cfg.data.source!r}: the two towers read synthetic or table data")

    @property
    def tables(self) -> list[TableSpec]:
        return self._tables

    def build_model(self) -> nn.Module:
        embeddings = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        return TwoTower(embeddings, self.cfg.model.embedding_dim, self.options.tower, self.towers)

    def data_source(self) -> DataSource:
        if self._source is None:
            if self.cfg.data.source == "table":
                self._source = TableSource(self.cfg.data, eval_samples=self.cfg.eval.samples, layout=self._layout)
            else:
                negatives = self.options.negatives if self.options.loss == "bce" else 0.0
                self._source = Interactions(
                    self.options.users, self.options.movies, seed=self.cfg.data.seed, negatives=negatives
                )
        return self._source

    def loss(self, model: nn.Module, batch: ClickBatch) -> torch.Tensor:
        user, item = model(batch.dense, batch.sparse)
        if self.options.loss == "bce":
            return F.binary_cross_entropy_with_logits((user * item).sum(dim=1).float(), batch.labels)
        logits = (user @ item.T).float() / self.options.temperature  # row i's positive is column i
        if self.cfg.data.source == "synthetic":
            # logQ correction (Yi et al. 2019): a popular movie is every row's negative far more
            # often than a rare one; subtracting the log of its sampling frequency keeps the softmax
            # from learning to rank popular movies down. (Generated data knows each movie's
            # frequency: its popularity column; a table has no such column.)
            logits = logits - (batch.dense[:, 1].float() * 4.0 - math.log(self.options.movies))[None, :]
        # A table may hold non-watches too: they serve as negatives only (weighted out, not masked
        # out: the estimator traces this under fake tensors, where a data-dependent shape cannot be).
        per_row = F.cross_entropy(logits, torch.arange(len(batch), device=logits.device), reduction="none")
        watched = (batch.labels > 0.5).float()
        return (per_row * watched).sum() / watched.sum().clamp(min=1.0)

    def eval_step(self, model: nn.Module, batch: ClickBatch, metrics: object) -> torch.Tensor:
        """What the estimator prices evaluation by (`evaluate` below does the scoring): both towers
        over one eval batch, and the batch's log loss of its dot products."""
        user, item = model(batch.dense, batch.sparse)
        return F.binary_cross_entropy_with_logits((user * item).sum(dim=1).float(), batch.labels)

    def table_ids(self, batch: ClickBatch) -> torch.Tensor:
        return batch.sparse

    def evaluate(self, model: nn.Module, batches: Iterable[ClickBatch]) -> dict[str, float]:
        """recall@10 of each held-out watch among every item of the held-out set (and, under bce,
        eval log loss).

        The estimator traces `eval_step` on one eval batch, not this method, beside what
        `example_eval_state` says this method gathers: two vectors per held-out row (held twice, in
        the lists and concatenated), the rows' ids, and 64 users x the candidates scored at a time."""
        users, items, ids, watched = [], [], [], []
        loss_sum = 0.0
        for batch in batches:
            user, item = model(batch.dense, batch.sparse)
            users.append(user.float())
            items.append(item.float())
            ids.append(batch.sparse[:, self.towers.item_id, 0])
            watched.append(batch.labels > 0.5)
            if self.options.loss == "bce":
                logits = (user * item).sum(dim=1).float()
                loss_sum += float(F.binary_cross_entropy_with_logits(logits, batch.labels, reduction="sum"))
        user_v, item_v, item_id, seen = torch.cat(users), torch.cat(items), torch.cat(ids), torch.cat(watched)
        # The candidates: each distinct item of the held-out set once (its first row's vector).
        distinct, position = torch.unique(item_id, return_inverse=True)
        first = torch.full((len(distinct),), len(item_id), device=item_id.device)
        first = first.scatter_reduce(0, position, torch.arange(len(item_id), device=item_id.device), "amin")
        candidates = item_v[first]
        hits = 0
        for rows in torch.split(torch.nonzero(seen).squeeze(1), 64):
            top = (user_v[rows] @ candidates.T).topk(min(K, len(candidates)), dim=1).indices
            hits += int((top == position[rows, None]).any(dim=1).sum())
        metrics = {"recall_at_10": hits / max(int(seen.sum()), 1)}
        if self.options.loss == "bce":
            metrics["logloss"] = loss_sum / max(len(item_id), 1)
        return metrics

    def example_eval_state(self, samples: int) -> list[torch.Tensor]:
        """What `evaluate` holds once it has gathered `samples` held-out rows: every row's user and
        item vectors twice (each batch's own, kept in the lists, and their concatenation), the
        batches' ids (the item-id column is a view that keeps each batch's whole id tensor), the
        concatenated item ids and their positions among the candidates, and the candidates' vectors."""
        width = self.options.tower[-1]
        candidates = min(samples, self.table_sizes[self.towers.item_id])
        return [
            *(torch.empty(samples, width) for _ in range(4)),
            torch.empty(samples, len(self.table_sizes), self.pooling, dtype=torch.int64),
            *(torch.empty(samples, dtype=torch.int64) for _ in range(2)),
            torch.empty(candidates, width),
        ]

    def example_batch(self, n: int) -> ClickBatch:
        features = len(self.table_sizes)
        return ClickBatch(
            torch.empty(n, self.num_dense), torch.zeros(n, features, self.pooling, dtype=torch.int64), torch.empty(n)
        )


def _split(cfg: RunConfig, options: TwoTowerOptions, features: tuple[str, ...]) -> tuple[Towers, int]:
    """The towers of a table source's columns; a column named in item_columns that the schema does
    not have is an error naming it."""
    schema = cfg.data.table_schema
    assert schema is not None
    dense = list(schema.dense)
    unknown = [c for c in options.item_columns if c not in features and c not in dense]
    if unknown or options.item_columns[0] not in features:
        raise ValueError(
            f"workload_options.item_columns={options.item_columns}: "
            + (f"{', '.join(unknown)} not in data.schema; " if unknown else "")
            + f"the first must be the item's id, a categorical column of data.schema ({', '.join(features)})"
        )
    item = set(options.item_columns)
    towers = Towers(
        user=[i for i, f in enumerate(features) if f not in item],
        item=[i for i, f in enumerate(features) if f in item],
        user_dense=[i for i, c in enumerate(dense) if c not in item],
        item_dense=[i for i, c in enumerate(dense) if c in item],
        item_id=features.index(options.item_columns[0]),
    )
    if not towers.user:
        raise ValueError(f"workload_options.item_columns={options.item_columns}: leaves the user tower no column")
    return towers, len(dense)


def make_workload(cfg: RunConfig, options: TwoTowerOptions) -> TwoTowerWorkload:
    """The factory `workload: two_tower` names (entry point group `elastune.workloads`)."""
    return TwoTowerWorkload(cfg, options)


make_workload.options_model = TwoTowerOptions  # type: ignore[attr-defined]
