"""`qr`: quotient-remainder compositional embeddings.

Paper: Shi, Mudigere, Naumov, Yang 2020, "Compositional Embeddings Using Complementary Partitions
for Memory-Efficient Recommendation Systems" (KDD). Each id of a feature with `rows` ids is split
by a remainder size m into the complementary pair (q, r) = (id // m, id mod m); the feature keeps a
quotient table Q of ceil(rows / m) rows and a remainder table R of m rows, and the id's vector is
combine(Q[q], R[r]). The map id -> (q, r) is injective, so unlike the hashing trick no two ids
of a feature share both rows: every id still gets a distinct vector.

m: `embedding.buckets` (m = min(rows, buckets)), else ceil(rows / `embedding.compression`),
default compression 4 (so Q has about 4 rows and R about rows / 4). A feature is only split when
that stores fewer rows (m + ceil(rows / m) < rows); otherwise (small tables, compression 1) it
keeps its own full table.

`embedding.qr_combine`:
- mult (the paper's default): Q[q] * R[r] elementwise, both dim wide;
- add: Q[q] + R[r], both dim wide;
- concat: [Q[q], R[r]] with Q ceil(dim / 2) and R floor(dim / 2) wide, so the result is dim wide
  without a projection (the paper concatenates two dim-wide vectors and needs a wider MLP input;
  splitting the width keeps the DLRM interaction unchanged and halves the bytes per row). Needs
  dim >= 2.
add and concat are linear, so the pooling sum is taken per table by EmbeddingBag; mult is not, so
each id's product is formed before the sum over the bag (F.embedding, then a sum).

Init, so that starting magnitudes resemble `full`'s (uniform ±b, b = rows^-0.5 per feature):
mult: R ~ U(±b) and Q ~ U(0.5, 1.5) (a multiplicative modulation starting near 1: the product has
about full's spread and R gets full-sized gradients from the start); add: Q, R ~ U(±b / sqrt 2)
(the sum has full's variance); concat: Q, R ~ U(±b) (each element is distributed like full's).

Trade: memory about rows / m + m rows per table instead of rows (about c times less for
compression c; the fewest at m = sqrt(rows)); each id keeps a unique vector, but ids sharing a
quotient or a remainder share half of their parameters, so their vectors are correlated; two
lookups per id (mult also materialises [B, F, P, dim] products instead of pooling in the bag).

Cost (fp32 weights, optimizer state priced by the optimizer), with w_q = w_r = dim (mult, add) or
w_q = ceil(dim / 2), w_r = floor(dim / 2) (concat):
    state_bytes = 4 * (dim * sum_{f full} rows_f + sum_{f split} (w_q * ceil(rows_f / m_f) + w_r * m_f))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.hashed import compressed_rows
from elastune.embeddings.sparse_optim import pooled_sum

__all__ = ["QREmbedding", "QRLayout", "qr_layout"]


@dataclass(frozen=True)
class QRLayout:
    """Where every feature lives (Python ints only, so the estimator can price it without tensors)."""

    full: list[int]  # features that keep their own table
    split: list[int]  # features split into quotient and remainder tables
    remainder: list[int]  # m per split feature
    quotient_rows: list[int]  # ceil(rows / m) per split feature
    q_width: int
    r_width: int

    def elements(self, table_sizes: Sequence[int], dim: int) -> int:
        full = dim * sum(int(table_sizes[f]) for f in self.full)
        return full + self.q_width * sum(self.quotient_rows) + self.r_width * sum(self.remainder)


def qr_layout(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig) -> QRLayout:
    if cfg.qr_combine == "concat":
        if dim < 2:
            raise ValueError(f"embedding.qr_combine=concat splits the width in two: needs dim >= 2, got {dim}")
        q_width, r_width = dim - dim // 2, dim // 2
    else:
        q_width = r_width = dim
    full: list[int] = []
    split: list[int] = []
    remainder: list[int] = []
    quotient: list[int] = []
    for f, n in enumerate(int(n) for n in table_sizes):
        m = compressed_rows(n, cfg)
        q = -(-n // m)
        if m + q < n:
            split.append(f)
            remainder.append(m)
            quotient.append(q)
        else:
            full.append(f)
    return QRLayout(full, split, remainder, quotient, q_width, r_width)


def _starts(rows: Sequence[int]) -> list[int]:
    out, start = [], 0
    for n in rows:
        out.append(start)
        start += n
    return out


def _ints(values: Sequence[int]) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int64)


class QREmbedding(nn.Module):
    """Three concatenated fp32 tables: `full` (features kept whole), `quotient` and `remainder`
    (one segment per split feature). Absent tables (no feature of that kind) are empty [0, w]."""

    full_features: torch.Tensor
    full_starts: torch.Tensor
    split_features: torch.Tensor
    split_m: torch.Tensor
    q_starts: torch.Tensor
    r_starts: torch.Tensor
    order: torch.Tensor

    def __init__(self, table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_grad: bool = False) -> None:
        super().__init__()
        self.table_sizes = tuple(int(n) for n in table_sizes)
        self.dim = dim
        self.combine = cfg.qr_combine
        self.sparse_grad = sparse_grad
        self.layout = lay = qr_layout(self.table_sizes, dim, cfg)
        full_rows = [self.table_sizes[f] for f in lay.full]
        self.register_buffer("full_features", _ints(lay.full), persistent=False)
        self.register_buffer("full_starts", _ints(_starts(full_rows)), persistent=False)
        self.register_buffer("split_features", _ints(lay.split), persistent=False)
        self.register_buffer("split_m", _ints(lay.remainder), persistent=False)
        self.register_buffer("q_starts", _ints(_starts(lay.quotient_rows)), persistent=False)
        self.register_buffer("r_starts", _ints(_starts(lay.remainder)), persistent=False)
        position = {f: i for i, f in enumerate(lay.full + lay.split)}
        self.register_buffer("order", _ints([position[f] for f in range(len(self.table_sizes))]), persistent=False)
        self._ordered = lay.full + lay.split == list(range(len(self.table_sizes)))
        self.full = nn.Parameter(torch.empty(sum(full_rows), dim, dtype=torch.float32))
        self.quotient = nn.Parameter(torch.empty(sum(lay.quotient_rows), lay.q_width, dtype=torch.float32))
        self.remainder = nn.Parameter(torch.empty(sum(lay.remainder), lay.r_width, dtype=torch.float32))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        lay = self.layout
        with torch.no_grad():
            start = 0
            for f in lay.full:
                n = self.table_sizes[f]
                self.full[start : start + n].uniform_(-(n**-0.5), n**-0.5)
                start += n
            qs = rs = 0
            for f, m, q in zip(lay.split, lay.remainder, lay.quotient_rows, strict=True):
                b = self.table_sizes[f] ** -0.5
                quotient, remainder = self.quotient[qs : qs + q], self.remainder[rs : rs + m]
                if self.combine == "mult":
                    quotient.uniform_(0.5, 1.5)
                    remainder.uniform_(-b, b)
                else:
                    scale = b / math.sqrt(2) if self.combine == "add" else b
                    quotient.uniform_(-scale, scale)
                    remainder.uniform_(-scale, scale)
                qs += q
                rs += m

    def split_ids(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids of the split features [B, F_split, P] -> (quotient, remainder) rows within each
        feature's own Q and R tables."""
        m = self.split_m.view(1, -1, 1)
        return torch.div(ids, m, rounding_mode="floor"), ids % m

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, _, pooling = ids.shape
        parts = []
        lay = self.layout
        if lay.full:
            sel = ids.index_select(1, self.full_features) + self.full_starts.view(1, -1, 1)
            parts.append(self._bag(sel.reshape(-1, pooling), self.full).view(batch, len(lay.full), self.dim))
        if lay.split:
            q, r = self.split_ids(ids.index_select(1, self.split_features))
            q = q + self.q_starts.view(1, -1, 1)
            r = r + self.r_starts.view(1, -1, 1)
            n = len(lay.split)
            if self.combine == "mult":
                qv = self._rows(q, self.quotient)  # [B, F_split, P, dim]
                rv = self._rows(r, self.remainder)
                parts.append((qv * rv).sum(dim=2))
            else:
                qb = self._bag(q.reshape(-1, pooling), self.quotient).view(batch, n, lay.q_width)
                rb = self._bag(r.reshape(-1, pooling), self.remainder).view(batch, n, lay.r_width)
                parts.append(qb + rb if self.combine == "add" else torch.cat([qb, rb], dim=2))
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return out if self._ordered else out.index_select(1, self.order)

    def _bag(self, flat: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.sparse_grad:  # for the row optimizers: a gradient of distinct rows, as `full` gives
            return pooled_sum(flat, weight)
        return F.embedding_bag(flat, weight, mode="sum")

    def _rows(self, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The row of each id: [...] -> [..., width]."""
        if self.sparse_grad:
            return pooled_sum(ids.reshape(-1, 1), weight).view(*ids.shape, weight.shape[1])
        return F.embedding(ids, weight)

    def sparse_parameters(self) -> list[nn.Parameter]:
        return [p for p in (self.full, self.quotient, self.remainder) if p.shape[0] > 0]


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    return 4 * qr_layout(table_sizes, dim, cfg).elements(table_sizes, dim)


register(
    StrategySpec(
        name="qr",
        build=lambda sizes, dim, cfg, opt: QREmbedding(sizes, dim, cfg, sparse_grad=opt != "adam"),
        state_bytes=_state_bytes,
    )
)
