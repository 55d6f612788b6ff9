"""`int8`: every row quantized to 8 bits with its own scale and offset, trained without an fp32 copy.

What the literature calls it: row-wise (per-row min/max affine) 8-bit quantization, the layout of
FBGEMM's "fused 8-bit rowwise" tables (Guan et al., "Post-Training 4-bit Quantization on Embedding
Tables", 2019, compare row-wise schemes), used here for training as in Zhang, Yang & Yuen,
"Training with Low-precision Embedding Tables" (2018): rows are dequantized on lookup, updated in
fp32 and re-quantized with stochastic rounding.

Cost: 1 byte per element plus 8 bytes per row (fp32 scale and offset), about a quarter of `full`
for dim >= 16, plus the row optimizer's state in fp32 (`rows * state_width * 4`). A touched row is
re-quantized against its new min and max; the rounding error per element is below one step
(`scale = (max - min) / 255`), and stochastic rounding makes it zero on average, so updates smaller
than a step still move the row in expectation. There is no fp32 master copy of the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.self_updating import SelfUpdatingEmbedding
from elastune.embeddings.sparse_optim import RowUpdate, state_width

__all__ = ["Int8Embedding", "dequantize_rows", "quantize_rows"]

_LEVELS = 255  # codes 0..255


def quantize_rows(
    values: torch.Tensor, noise: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 [n, dim] -> (uint8 codes [n, dim], fp32 scale [n], fp32 offset [n]).

    value ~ code * scale + offset with offset = the row's min and scale = (max - min) / 255.
    `noise` (uniform [0, 1) like `values`) rounds stochastically; None rounds to nearest.
    """
    low = values.amin(dim=1)
    high = values.amax(dim=1)
    scale = (high - low) / _LEVELS
    inverse = torch.where(scale > 0, scale.reciprocal(), torch.zeros_like(scale))  # a constant row: all code 0
    steps = (values - low.unsqueeze(1)) * inverse.unsqueeze(1)
    steps = steps + noise if noise is not None else steps + 0.5
    codes = steps.floor_().clamp_(0, _LEVELS).to(torch.uint8)
    return codes, scale, low


def dequantize_rows(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    return codes.float() * scale.unsqueeze(1) + offset.unsqueeze(1)


class Int8Embedding(SelfUpdatingEmbedding):
    """uint8 codes [rows, dim] + fp32 scale and offset per row; row optimizer state in fp32."""

    codes: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor
    row_state: torch.Tensor

    def __init__(self, table_sizes: Sequence[int], dim: int, sparse_optimizer: str = "rowwise_adagrad") -> None:
        super().__init__(table_sizes, dim, sparse_optimizer)
        self.register_buffer("codes", torch.empty(self.num_rows, dim, dtype=torch.uint8))
        self.register_buffer("scale", torch.empty(self.num_rows))
        self.register_buffer("offset", torch.empty(self.num_rows))
        self.register_buffer("row_state", torch.zeros(self.num_rows, self.state_width))
        with torch.no_grad():
            for first, chunk in self._dlrm_init():
                self._store(slice(first, first + len(chunk)), *quantize_rows(chunk))

    def _store(
        self, where: slice | torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
    ) -> None:
        if isinstance(where, slice):
            self.codes[where] = codes
            self.scale[where] = scale
            self.offset[where] = offset
        else:
            self.codes.index_copy_(0, where, codes)
            self.scale.index_copy_(0, where, scale)
            self.offset.index_copy_(0, where, offset)

    def _gather_rows(self, rows: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        return dequantize_rows(self.codes[rows], self.scale[rows], self.offset[rows])

    def _update_rows(self, update: RowUpdate, rows: torch.Tensor, grads: torch.Tensor) -> None:
        weight = self._gather_rows(rows, None)
        state = self.row_state[rows] if self.state_width else None
        update.apply(weight, grads, state)
        self._store(rows, *quantize_rows(weight, self._uniform(weight.shape, weight.device)))
        if state is not None:
            self.row_state.index_copy_(0, rows, state)


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    rows = sum(table_sizes)
    return rows * dim + rows * 8 + rows * state_width(sparse_optimizer, dim) * 4


register(
    StrategySpec(
        name="int8",
        build=lambda sizes, dim, cfg, opt: Int8Embedding(sizes, dim, sparse_optimizer=opt),
        state_bytes=_state_bytes,
        self_updating=True,
    )
)
