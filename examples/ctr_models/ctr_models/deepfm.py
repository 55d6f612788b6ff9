"""`workload: deepfm`: DeepFM (Guo et al., "DeepFM: A Factorization-Machine based Neural Network for
CTR Prediction", IJCAI 2017).

Every field, categorical or dense, is one `dim`-wide vector: a categorical field's pooled embedding,
a dense field's own learned vector scaled by its value (as the paper embeds continuous fields). The
same vectors feed both parts, with no pre-training:

    FM:    first-order sum_i w_i + second-order s * sum_{i<j} <v_i, v_j>   (s learned, see below)
    deep:  MLP over the concatenated vectors
    logit = FM + deep

The second-order term is the sum over pairs computed in O(F * dim) as 0.5 * ((sum v)^2 - sum v^2).
"""

from __future__ import annotations

import torch
from elastune import WorkloadOptions
from pydantic import Field
from torch import nn

from ctr_models.click import ClickWorkload, Width, field_vectors, mlp

__all__ = ["DeepFM", "DeepFMOptions", "DeepFMWorkload"]


class DeepFMOptions(WorkloadOptions):
    """`workload_options` of `workload: deepfm` (the field vectors' width is `model.embedding_dim`)."""

    deep_mlp: list[Width] = Field(
        default_factory=lambda: [128, 64],
        min_length=1,
        max_length=16,
        description="Hidden widths of the deep part's MLP over all field vectors; a last layer maps to 1 logit.",
    )


class DeepFM(nn.Module):
    """dense [B, D], ids [B, F, P] -> logits [B]."""

    def __init__(self, num_dense: int, embeddings: nn.Module, num_fields: int, dim: int, deep: list[int]) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.dense_vectors = nn.Parameter(torch.randn(num_dense, dim) * 0.01)
        self.dense_weights = nn.Linear(num_dense, 1)  # first order of the dense fields, and the global bias
        # The first-order weight of a categorical id is a learned projection of its embedding (one
        # per field), not the paper's second, 1-wide table per field: that would double the tables
        # the strategies store, and embedding.backend=fbgemm takes only widths that are multiples of 4.
        self.id_weights = nn.Parameter(torch.zeros(num_fields, dim))
        # A learned scale on the second-order term, starting small: s <v_i, v_j> is <sqrt(s) v_i,
        # sqrt(s) v_j>, the same model for s > 0, but the tables start at their strategy's init
        # (±sqrt(1/rows): large rows in the small tables), where the unscaled sum over ~700 pairs
        # starts the logits at a std of ~3.7 and costs AUC (0.788 against 0.803 after 300 steps).
        self.second_scale = nn.Parameter(torch.tensor(0.01))
        self.deep = mlp([(num_dense + num_fields) * dim, *deep, 1], last_activation=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        ids = field_vectors(self.embeddings, dense, sparse)  # [B, F, dim]
        vectors = torch.cat([dense.unsqueeze(2) * self.dense_vectors, ids], dim=1)  # [B, D + F, dim]
        first = self.dense_weights(dense).squeeze(1) + (ids * self.id_weights).sum(dim=(1, 2))
        second = 0.5 * (vectors.sum(dim=1).square() - vectors.square().sum(dim=1)).sum(dim=1)
        out: torch.Tensor = first + self.second_scale * second + self.deep(vectors.flatten(1)).squeeze(1)
        return out


class DeepFMWorkload(ClickWorkload):
    """DeepFM on elastune's click-log data (all but the model is `workload: dlrm`'s: ctr_models/click.py)."""

    options_model = DeepFMOptions
    options: DeepFMOptions

    def make_model(self, embeddings: nn.Module) -> nn.Module:
        dim = self.cfg.model.embedding_dim
        return DeepFM(self.num_dense, embeddings, len(self.tables), dim, self.options.deep_mlp)
