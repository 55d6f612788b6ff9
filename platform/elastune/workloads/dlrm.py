"""DLRM (Naumov et al. 2019): the recommender shape whose embedding tables outgrow device memory.

dense features -> bottom MLP -> one vector of size `dim`
sparse features -> one pooled embedding bag each -> 26 vectors of size `dim`
pairwise dot products of those 27 vectors (the "interaction") + the bottom output -> top MLP -> logit
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["DLRM", "mlp"]


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
