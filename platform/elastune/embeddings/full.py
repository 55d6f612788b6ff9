"""`full`: every row of every table in fp32 (the baseline every other strategy is compared with).

All features share one concatenated table addressed through per-feature offsets, so a lookup is a
single EmbeddingBag call for all 26 features instead of 26 small ones (what TorchRec calls
table-batched embedding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.sparse_optim import pooled_sum

__all__ = ["FullEmbedding", "feature_offsets"]


def feature_offsets(table_sizes: Sequence[int]) -> torch.Tensor:
    """Row where each feature's table starts inside the concatenated table."""
    sizes = torch.tensor(list(table_sizes), dtype=torch.int64)
    return torch.cumsum(sizes, 0) - sizes


class FullEmbedding(nn.Module):
    offsets: torch.Tensor

    def __init__(self, table_sizes: Sequence[int], dim: int, sparse_grad: bool = False) -> None:
        super().__init__()
        self.table_sizes = tuple(int(n) for n in table_sizes)
        self.dim = dim
        self.register_buffer("offsets", feature_offsets(self.table_sizes), persistent=False)
        # sparse_grad: the backward yields only the touched rows (for the row-wise optimizers);
        # otherwise a dense gradient the size of the table (what dense Adam needs).
        self.bag = nn.EmbeddingBag(sum(self.table_sizes), dim, mode="sum", sparse=sparse_grad)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # DLRM's init: uniform in ±sqrt(1/rows) per table, so small tables start with larger rows.
        with torch.no_grad():
            start = 0
            for rows in self.table_sizes:
                bound = rows**-0.5
                self.bag.weight[start : start + rows].uniform_(-bound, bound)
                start += rows

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, features, pooling = ids.shape
        flat = (ids + self.offsets.view(1, -1, 1)).view(batch * features, pooling)
        if self.bag.sparse:  # for the row optimizers: a gradient of distinct rows (sparse_optim.pooled_sum)
            return pooled_sum(flat, self.bag.weight).view(batch, features, self.dim)
        return self.bag(flat).view(batch, features, self.dim)

    def sparse_parameters(self) -> list[nn.Parameter]:
        return [cast(nn.Parameter, self.bag.weight)]


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    return sum(table_sizes) * dim * 4  # optimizer state lives in the optimizer, priced by it


register(
    StrategySpec(
        name="full",
        build=lambda sizes, dim, cfg, opt: FullEmbedding(sizes, dim, sparse_grad=opt != "adam"),
        state_bytes=_state_bytes,
    )
)
