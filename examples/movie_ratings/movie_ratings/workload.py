"""A star-rating regression as an elastune workload, written only against elastune's public API.

Every column is an id looked up in its own embedding table (the two genre features share one);
the prediction is a learned offset, plus an MLP over all the vectors, plus the dot product of the
user's summed vectors with the movie's (the factorization-machine term that lets a user's columns
meet a movie's). Trained by mean squared error, judged by RMSE on held-out ratings (lower is
better), MAE beside it, both from torchmetrics.

The tables come from `elastune.build_tables`, so every embedding strategy, `embedding.overrides`
(say, hash the user ids only: `match: {name: user_id}`), the row-wise optimizers and the estimator
apply unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import torch
from elastune import QualityMetric, RunConfig, TableSpec, Workload, build_tables
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F
from torchmetrics import MeanAbsoluteError, MeanSquaredError, Metric

from movie_ratings.data import (
    AGES,
    FEATURES,
    GENDERS,
    GENRES,
    OCCUPATIONS,
    USER_FEATURES,
    YEARS,
    ZIPS,
    Batch,
    Ratings,
)

__all__ = ["RatingModel", "RatingsOptions", "RatingsWorkload"]


class RatingsOptions(BaseModel):
    """`workload_options` of `workload: movie_ratings`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    users: int = Field(
        162_541, ge=2, le=50_000_000, description="Distinct users (user_id rows): ml-25m's count; ml-1m has 6,040."
    )
    movies: int = Field(
        62_423, ge=2, le=5_000_000, description="Distinct movies (movie_id rows): ml-25m's count; ml-1m rates 3,706."
    )
    hidden: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        [64], min_length=1, max_length=8, description="The MLP's hidden widths."
    )


class RatingModel(nn.Module):
    """ids [B, 9, 1] -> predicted stars [B]."""

    def __init__(self, embeddings: nn.Module, dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.embeddings = embeddings
        widths = [len(FEATURES) * dim, *hidden]
        layers: list[nn.Module] = []
        for i in range(len(hidden)):
            layers += [nn.Linear(widths[i], widths[i + 1]), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(widths[-1], 1))
        self.offset = nn.Parameter(torch.tensor(3.0))  # the middle of the 1-5 scale: early steps start near it

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        vectors = self.embeddings(ids)  # [B, 9, dim], in FEATURES order
        user = vectors[:, : len(USER_FEATURES)].sum(dim=1)
        movie = vectors[:, len(USER_FEATURES) :].sum(dim=1)
        out: torch.Tensor = self.offset + self.mlp(vectors.flatten(1)).squeeze(1) + (user * movie).sum(dim=1)
        return out


class RatingsWorkload(Workload):
    """`workload: movie_ratings`: generated MovieLens-shaped ratings (data.source stays at its
    default)."""

    options_model = RatingsOptions
    options: RatingsOptions
    quality = QualityMetric("rmse", "min")
    eval_loss_name = "mse"

    def __init__(self, cfg: RunConfig, options: RatingsOptions | None = None) -> None:
        super().__init__(cfg, options or RatingsOptions())
        if cfg.data.source != "synthetic":
            raise ValueError(
                f"data.source={cfg.data.source!r}: the movie_ratings workload generates its own ratings; "
                "leave data.source at its default"
            )
        o, dim = self.options, cfg.model.embedding_dim
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
        self._source: Ratings | None = None

    @property
    def tables(self) -> list[TableSpec]:
        return self._tables

    def build_model(self) -> nn.Module:
        embeddings = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        return RatingModel(embeddings, self.cfg.model.embedding_dim, self.options.hidden)

    def data_source(self) -> Ratings:
        if self._source is None:  # generates the catalogue once, when training or estimating
            self._source = Ratings(self.options.users, self.options.movies, seed=self.cfg.data.seed)
        return self._source

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.mse_loss(model(batch["ids"]).float(), batch["rating"])

    def metrics(self) -> dict[str, Metric]:
        return {"rmse": MeanSquaredError(squared=False), "mae": MeanAbsoluteError()}

    def eval_step(self, model: nn.Module, batch: Batch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        predicted = model(batch["ids"]).float()
        for metric in metrics.values():
            metric.update(predicted, batch["rating"])
        return F.mse_loss(predicted, batch["rating"])

    def table_ids(self, batch: Batch) -> torch.Tensor:
        return batch["ids"]  # [B, 9, 1]: feature f's row in its table, as table_sizes lays them out
