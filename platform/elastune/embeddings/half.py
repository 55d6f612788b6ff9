"""`half`: every row stored in fp16 or bf16, updated in fp32 and written back with stochastic rounding.

What the literature calls it: low-precision (half-precision) embedding tables without an fp32
master copy, trained with stochastic rounding (Gupta et al., "Deep Learning with Limited Numerical
Precision", ICML 2015; Zhang, Yang & Yuen, "Training with Low-precision Embedding Tables", 2018).
FBGEMM's table-batched embeddings offer the same (`weights_precision=FP16`, `stochastic_rounding`).

Cost: 2 bytes per element instead of 4 (half of `full`), plus the row optimizer's state in fp32
(`rows * state_width * 4`; 4 bytes per row for rowwise_adagrad). A step gathers the touched rows to
fp32, applies the row optimizer there and rounds them back. Round-to-nearest would lose every update
smaller than half a unit in the last place (2^-11 relative for fp16, 2^-8 for bf16), which is most
late-training updates; stochastic rounding rounds up with probability equal to the remainder, so the
stored value is right *on average* and small updates accumulate as they would in fp32.

The update mechanism it shares with int8 and cached is in self_updating.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.self_updating import SelfUpdatingEmbedding
from elastune.embeddings.sparse_optim import RowUpdate, state_width

__all__ = ["HalfEmbedding", "stochastic_round"]

_HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# (explicit mantissa bits, exponent of the smallest normal) of the storage formats
_SR_FORMATS = {torch.float16: (10, -14), torch.bfloat16: (7, -126)}


def stochastic_round(x: torch.Tensor, dtype: torch.dtype, noise: torch.Tensor) -> torch.Tensor:
    """Round fp32 `x` to `dtype` (fp16 or bf16) down or up at random, so that the expected result is `x`.

    `noise` is uniform [0, 1) shaped like `x`. In fp32: q = the gap between representable values of
    `dtype` around |x| (a power of two, from |x|'s binade, or the subnormal gap below the smallest
    normal), then |x| -> floor(|x| / q + noise) * q, which every step keeps exact; so |x| rounds up
    with probability equal to its remainder. Exact in every range of the target, subnormals
    included; values past the largest finite one saturate instead of becoming inf.
    """
    mantissa_bits, min_exponent = _SR_FORMATS[dtype]
    magnitude = x.abs()
    _, exponent = torch.frexp(magnitude)  # magnitude = m * 2^exponent, m in [0.5, 1)
    gap = torch.exp2((exponent - 1).clamp_(min=min_exponent).sub_(mantissa_bits).float())
    rounded = magnitude.div(gap).add_(noise).floor_().mul_(gap).clamp_(max=torch.finfo(dtype).max)
    return rounded.copysign_(x).to(dtype)


class HalfEmbedding(SelfUpdatingEmbedding):
    """All rows in fp16/bf16; the row optimizer's state in fp32, one row of it per table row."""

    weight: torch.Tensor
    row_state: torch.Tensor

    def __init__(
        self, table_sizes: Sequence[int], dim: int, dtype: str = "fp16", sparse_optimizer: str = "rowwise_adagrad"
    ) -> None:
        super().__init__(table_sizes, dim, sparse_optimizer)
        self.storage_dtype = _HALF_DTYPES[dtype]
        self.register_buffer("weight", torch.empty(self.num_rows, dim, dtype=self.storage_dtype))
        self.register_buffer("row_state", torch.zeros(self.num_rows, self.state_width))
        with torch.no_grad():
            for first, chunk in self._dlrm_init():
                self.weight[first : first + len(chunk)] = chunk.to(self.storage_dtype)

    def _gather_rows(self, rows: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        return self.weight[rows].float()

    def _update_rows(self, update: RowUpdate, rows: torch.Tensor, grads: torch.Tensor) -> None:
        weight = self.weight[rows].float()
        state = self.row_state[rows] if self.state_width else None
        update.apply(weight, grads, state)
        noise = self._uniform(weight.shape, weight.device)
        self.weight.index_copy_(0, rows, stochastic_round(weight, self.storage_dtype, noise))
        if state is not None:
            self.row_state.index_copy_(0, rows, state)


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    rows = sum(table_sizes)
    return rows * dim * 2 + rows * state_width(sparse_optimizer, dim) * 4


register(
    StrategySpec(
        name="half",
        build=lambda sizes, dim, cfg, opt: HalfEmbedding(sizes, dim, dtype=cfg.dtype, sparse_optimizer=opt),
        state_bytes=_state_bytes,
        self_updating=True,
    )
)
