"""`workload: dcn_v2`: DCN-V2 (Wang et al., "DCN V2: Improved Deep & Cross Network and Practical
Lessons for Web-scale Learning to Rank Systems", WWW 2021).

x0 = the dense features and every categorical field's pooled embedding, concatenated (d wide). A
cross layer adds one degree of explicit feature interaction:

    x_{l+1} = x0 * (W_l x_l + b_l) + x_l        (W_l full-rank d x d, or U_l V_l^T of rank r)

Stacked (the default): x0 -> cross layers -> deep MLP -> logit. Parallel: the cross layers and the
MLP both read x0, and one linear layer reads their outputs side by side.
"""

from __future__ import annotations

from typing import Literal

import torch
from elastune import WorkloadOptions
from pydantic import Field
from torch import nn

from ctr_models.click import ClickWorkload, Width, field_vectors, mlp

__all__ = ["CrossLayer", "DCNv2", "DCNv2Options", "DCNv2Workload"]


class DCNv2Options(WorkloadOptions):
    """`workload_options` of `workload: dcn_v2` (the embeddings' width is `model.embedding_dim`)."""

    cross_layers: int = Field(3, ge=0, le=16, description="Cross layers (0: the deep MLP alone).")
    cross_rank: int = Field(
        0, ge=0, le=65536, description="0: full-rank cross weights (d x d); r > 0: the paper's low-rank U V^T."
    )
    deep_mlp: list[Width] = Field(
        default_factory=lambda: [128, 64],
        min_length=1,
        max_length=16,
        description="Hidden widths of the deep MLP; a last layer maps to 1 logit.",
    )
    structure: Literal["stacked", "parallel"] = Field(
        "stacked", description="stacked: cross layers, then the MLP; parallel: both over x0, outputs concatenated."
    )


class CrossLayer(nn.Module):
    """x0 * (W x + b) + x, W full-rank (rank 0) or U V^T."""

    def __init__(self, width: int, rank: int) -> None:
        super().__init__()
        self.weight: nn.Module = nn.Linear(width, width)
        if 0 < rank < width:  # a rank of d or more would be no saving over the full matrix
            self.weight = nn.Sequential(nn.Linear(width, rank, bias=False), nn.Linear(rank, width))

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x0 * self.weight(x) + x
        return out


class DCNv2(nn.Module):
    """dense [B, D], ids [B, F, P] -> logits [B]."""

    def __init__(self, num_dense: int, embeddings: nn.Module, num_fields: int, dim: int, options: DCNv2Options) -> None:
        super().__init__()
        self.embeddings = embeddings
        width = num_dense + num_fields * dim
        self.cross = nn.ModuleList(CrossLayer(width, options.cross_rank) for _ in range(options.cross_layers))
        self.parallel = options.structure == "parallel"
        self.deep = mlp([width, *options.deep_mlp], last_activation=True)
        self.out = nn.Linear(options.deep_mlp[-1] + (width if self.parallel else 0), 1)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x0 = torch.cat([dense, field_vectors(self.embeddings, dense, sparse).flatten(1)], dim=1)  # [B, d]
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        top = torch.cat([x, self.deep(x0)], dim=1) if self.parallel else self.deep(x)
        out: torch.Tensor = self.out(top).squeeze(1)
        return out


class DCNv2Workload(ClickWorkload):
    """DCN-V2 on elastune's click-log data (all but the model is `workload: dlrm`'s: ctr_models/click.py)."""

    options_model = DCNv2Options
    options: DCNv2Options

    def make_model(self, embeddings: nn.Module) -> nn.Module:
        return DCNv2(self.num_dense, embeddings, len(self.tables), self.cfg.model.embedding_dim, self.options)
