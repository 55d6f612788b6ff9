"""`int8`: every row quantized to 8 bits with its own scale and zero point, trained without an fp32 copy.

What the literature calls it: row-wise asymmetric (affine) 8-bit quantization with an integer zero
point, the scheme of Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference" (CVPR 2018) applied per row as in FBGEMM's row-wise embedding
tables (Guan et al., "Post-Training 4-bit Quantization on Embedding Tables", 2019), used here for
training as in Zhang, Yang & Yuen, "Training with Low-precision Embedding Tables" (2018): rows are
dequantized on lookup, updated in fp32 and re-quantized with stochastic rounding.

A row is stored as uint8 codes q, a bf16 scale s and a uint8 zero point z: value = s * (q - z).
The row's range is widened to include 0, so 0.0 is a code (q = z) and round-trips exactly (rows
that train towards zero stay there). The scale is rounded *up* to the next bf16, so the codes 0..255
always cover the row's range; bf16 has fp32's exponent range, so no scale underflows.

Cost: 1 byte per element plus 3 bytes per row (2 for the scale, 1 for the zero point): 19 bytes a
row at dim 16, 0.30x of `full` (fp32 scale and offset would cost 8, 0.38x), plus the row
optimizer's state in fp32 (`rows * state_width * 4`). A touched row is re-quantized against its
new range; the rounding error per element is below one step (`s`, at most ~1% above
`(max - min) / 255` of the widened range), and stochastic rounding makes it zero on average, so
updates smaller than a step still move the row in expectation. There is no fp32 master copy of the
table.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.self_updating import SelfUpdatingEmbedding
from elastune.embeddings.sparse_optim import RowUpdate, state_width

__all__ = ["ROW_METADATA_BYTES", "Int8Embedding", "dequantize_rows", "quantize_rows"]

_LEVELS = 255  # codes 0..255
ROW_METADATA_BYTES = 3  # bf16 scale + uint8 zero point


def _round_up_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """Non-negative finite fp32 -> the smallest bf16 >= x (bf16 is the top half of an fp32's bits)."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0xFFFF) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)


def quantize_rows(
    values: torch.Tensor, noise: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 [n, dim] -> (uint8 codes [n, dim], bf16 scale [n], uint8 zero point [n]).

    value ~ scale * (code - zero_point). `noise` (uniform [0, 1) like `values`) rounds
    stochastically; None rounds to nearest.
    """
    low = values.amin(dim=1).clamp(max=0.0)  # the range includes 0, so 0 is a code
    high = values.amax(dim=1).clamp(min=0.0)
    # The zero point sits at 0's place in [low, high]; of the two integers around it, take the one
    # that needs the smaller step to reach both ends (within ~0.4% of (high - low) / 255).
    place = torch.where(high > low, -low / (high - low), torch.zeros_like(low)) * _LEVELS
    below, above = place.floor(), place.ceil()
    inf = torch.full_like(low, float("inf"))
    # zero point z covers low when z * s >= -low, and high when (255 - z) * s >= high
    step_below = torch.where(below > 0, -low / below.clamp(min=1), torch.where(low < 0, inf, 0.0))
    step_below = torch.maximum(step_below, high / (_LEVELS - below))  # below <= 254 whenever high > 0
    step_above = torch.where(above < _LEVELS, high / (_LEVELS - above).clamp(min=1), torch.where(high > 0, inf, 0.0))
    step_above = torch.maximum(step_above, -low / above.clamp(min=1))
    take_below = step_below <= step_above
    zero_point = torch.where(take_below, below, above)
    scale = _round_up_to_bf16(torch.where(take_below, step_below, step_above))
    step = scale.float()
    inverse = torch.where(step > 0, step.reciprocal(), torch.zeros_like(step))  # an all-zero row: every code z
    steps = values * inverse.unsqueeze(1) + zero_point.unsqueeze(1)
    steps = steps + noise if noise is not None else steps + 0.5
    codes = steps.floor_().clamp_(0, _LEVELS).to(torch.uint8)
    return codes, scale, zero_point.to(torch.uint8)


def dequantize_rows(codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
    return (codes.float() - zero_point.float().unsqueeze(1)) * scale.float().unsqueeze(1)


class Int8Embedding(SelfUpdatingEmbedding):
    """uint8 codes [rows, dim] + bf16 scale and uint8 zero point per row; row optimizer state in fp32."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor
    row_state: torch.Tensor

    def __init__(self, table_sizes: Sequence[int], dim: int, sparse_optimizer: str = "rowwise_adagrad") -> None:
        super().__init__(table_sizes, dim, sparse_optimizer)
        self.register_buffer("codes", torch.empty(self.num_rows, dim, dtype=torch.uint8))
        self.register_buffer("scale", torch.empty(self.num_rows, dtype=torch.bfloat16))
        self.register_buffer("zero_point", torch.empty(self.num_rows, dtype=torch.uint8))
        self.register_buffer("row_state", torch.zeros(self.num_rows, self.state_width))
        with torch.no_grad():
            for first, chunk in self._dlrm_init():
                self._store(slice(first, first + len(chunk)), *quantize_rows(chunk))

    def _store(
        self, where: slice | torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor
    ) -> None:
        if isinstance(where, slice):
            self.codes[where] = codes
            self.scale[where] = scale
            self.zero_point[where] = zero_point
        else:
            self.codes.index_copy_(0, where, codes)
            self.scale.index_copy_(0, where, scale)
            self.zero_point.index_copy_(0, where, zero_point)

    def _gather_rows(self, rows: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        return dequantize_rows(self.codes[rows], self.scale[rows], self.zero_point[rows])

    def _update_rows(self, update: RowUpdate, rows: torch.Tensor, grads: torch.Tensor) -> None:
        weight = self._gather_rows(rows, None)
        state = self.row_state[rows] if self.state_width else None
        update.apply(weight, grads, state)
        self._store(rows, *quantize_rows(weight, self._uniform(weight.shape, weight.device)))
        if state is not None:
            self.row_state.index_copy_(0, rows, state)


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    rows = sum(table_sizes)
    return rows * (dim + ROW_METADATA_BYTES) + rows * state_width(sparse_optimizer, dim) * 4


register(
    StrategySpec(
        name="int8",
        build=lambda sizes, dim, cfg, opt: Int8Embedding(sizes, dim, sparse_optimizer=opt),
        state_bytes=_state_bytes,
        self_updating=True,
    )
)
