"""`shared`: groups of features share one table.

Idea: parameter sharing across categorical features, as in the shared-table variants of
multi-feature hashing (Weinberger et al. 2009 hash every feature into one space) and TorchRec's
shared embedding tables (several features, one `EmbeddingBagConfig`). Features of similar size
that share a table pay for one table instead of several.

Groups: `embedding.groups`, a list of lists of feature indices; every feature must be in exactly
one group. Default (groups unset): features are sorted by table size (largest first, ties by
index) and consecutive ones paired, so each table serves two features of similar size (the
largest with the second largest, ...; an odd one out keeps its own table). Pairing similar sizes
wastes the fewest rows: a pair costs the larger of its two tables.

Rows of group g's table: R_g = max(len(g), min(max_rows_g, cap)), where max_rows_g is its largest
feature's rows and cap is `embedding.buckets`, or ceil(max_rows_g / `embedding.compression`) (no
cap when neither is set: sharing alone already saves memory). Feature j of the group (its j-th
member) reads row (id + o_j) mod R_g with o_j = j * R_g // len(g): the features start at evenly
spread offsets, so the same raw id of two features of a group never lands on the same row
(o_j differ since R_g >= len(g)), and their low ids (often the frequent ones) are far apart.
Collisions remain, between id x of one feature and id x + o_j - o_i of another, and within a
feature wherever rows_f > R_g (ids wrap around, as in the hashing trick).

Init: uniform ±max_rows_g^-0.5 (full's DLRM init for the group's largest table).

Trade: memory of a group falls from sum of its rows to R_g; ids of different features share rows
and their gradients, which costs quality where the shared rows are both hot.

Cost (fp32 weights, optimizer state priced by the optimizer):
    state_bytes = 4 * dim * sum_g R_g
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.sparse_optim import pooled_sum

__all__ = ["SharedEmbedding", "SharedLayout", "default_groups", "shared_layout", "validate_groups"]


def default_groups(table_sizes: Sequence[int]) -> list[list[int]]:
    """Features paired by size: sorted largest first, consecutive ones share a table."""
    by_size = sorted(range(len(table_sizes)), key=lambda f: (-int(table_sizes[f]), f))
    return [by_size[i : i + 2] for i in range(0, len(by_size), 2)]


def validate_groups(groups: Sequence[Sequence[int]], num_features: int) -> None:
    """Every feature in exactly one non-empty group, every index in [0, num_features)."""
    seen: dict[int, int] = {}
    for g, group in enumerate(groups):
        if not group:
            raise ValueError(f"embedding.groups[{g}] is empty: every group needs at least one feature")
        for f in group:
            if not isinstance(f, int) or isinstance(f, bool) or not 0 <= f < num_features:
                raise ValueError(
                    f"embedding.groups[{g}] has feature {f!r}: feature indices must be in [0, {num_features})"
                )
            if f in seen:
                raise ValueError(f"embedding.groups: feature {f} is in group {seen[f]} and group {g}; one group each")
            seen[f] = g
    missing = [f for f in range(num_features) if f not in seen]
    if missing:
        raise ValueError(f"embedding.groups: features {missing} are in no group; every feature needs one")


@dataclass(frozen=True)
class SharedLayout:
    groups: list[list[int]]
    rows: list[int]  # R_g per group
    max_rows: list[int]  # largest member's rows per group

    @property
    def elements_per_dim(self) -> int:
        return sum(self.rows)


def _cap(rows: int, cfg: EmbeddingConfig) -> int:
    if cfg.buckets is not None:
        return min(rows, cfg.buckets)
    if cfg.compression is not None:
        return min(rows, math.ceil(round(rows / cfg.compression, 9)))
    return rows


def shared_layout(table_sizes: Sequence[int], cfg: EmbeddingConfig) -> SharedLayout:
    sizes = [int(n) for n in table_sizes]
    groups = [list(g) for g in cfg.groups] if cfg.groups is not None else default_groups(sizes)
    validate_groups(groups, len(sizes))
    max_rows = [max(sizes[f] for f in g) for g in groups]
    rows = [max(len(g), _cap(m, cfg)) for g, m in zip(groups, max_rows, strict=True)]
    return SharedLayout(groups, rows, max_rows)


class SharedEmbedding(nn.Module):
    """One concatenated fp32 table (one segment per group), one EmbeddingBag call for all features."""

    starts: torch.Tensor  # [F] first row of the feature's group table
    shifts: torch.Tensor  # [F] o_j of the feature within its group
    modulus: torch.Tensor  # [F] R_g of the feature's group

    def __init__(self, table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_grad: bool = False) -> None:
        super().__init__()
        self.table_sizes = tuple(int(n) for n in table_sizes)
        self.dim = dim
        self.layout = lay = shared_layout(self.table_sizes, cfg)
        num = len(self.table_sizes)
        starts, shifts, modulus = [0] * num, [0] * num, [0] * num
        start = 0
        for group, rows in zip(lay.groups, lay.rows, strict=True):
            for j, f in enumerate(group):
                starts[f], shifts[f], modulus[f] = start, j * rows // len(group), rows
            start += rows
        self.register_buffer("starts", torch.tensor(starts, dtype=torch.int64), persistent=False)
        self.register_buffer("shifts", torch.tensor(shifts, dtype=torch.int64), persistent=False)
        self.register_buffer("modulus", torch.tensor(modulus, dtype=torch.int64), persistent=False)
        self.bag = nn.EmbeddingBag(sum(lay.rows), dim, mode="sum", sparse=sparse_grad)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            start = 0
            for rows, biggest in zip(self.layout.rows, self.layout.max_rows, strict=True):
                bound = biggest**-0.5
                self.bag.weight[start : start + rows].uniform_(-bound, bound)
                start += rows

    def rows_of(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, F, P] -> rows of the concatenated table."""
        view = (1, -1, 1)
        return (ids + self.shifts.view(view)) % self.modulus.view(view) + self.starts.view(view)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, features, pooling = ids.shape
        flat = self.rows_of(ids).view(batch * features, pooling)
        if self.bag.sparse:  # for the row optimizers: a gradient of distinct rows, as `full` gives
            return pooled_sum(flat, self.bag.weight).view(batch, features, self.dim)
        return self.bag(flat).view(batch, features, self.dim)

    def sparse_parameters(self) -> list[nn.Parameter]:
        return [cast(nn.Parameter, self.bag.weight)]


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    return 4 * dim * shared_layout(table_sizes, cfg).elements_per_dim


register(
    StrategySpec(
        name="shared",
        build=lambda sizes, dim, cfg, opt: SharedEmbedding(sizes, dim, cfg, sparse_grad=opt != "adam"),
        state_bytes=_state_bytes,
    )
)
