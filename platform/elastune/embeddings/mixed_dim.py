"""`mixed_dim`: mixed-dimension embeddings, rows in blocks of decreasing width projected to `dim`.

Paper: Ginart, Naumov, Mudigere, Yang, Zou 2021, "Mixed Dimension Embeddings with Application to
Memory-Efficient Recommendation Systems" (ISIT). Rows are partitioned into blocks; block i stores
d_i-wide rows and a (d_i x dim) projection (no bias) brings them to the common `dim`. The paper
sorts rows by access frequency so that the few hot rows get wide vectors and the long cold tail
narrow ones, spending parameters where the data is.

Here, per feature, `embedding.mixed_blocks` = n blocks with widths d_i = max(mixed_min_dim,
dim >> i) (dim, dim/2, ...; never above dim); consecutive blocks of equal width are merged (they
would only duplicate a projection). Block sizes grow geometrically: block i holds a share
2^i / (2^n - 1) of the rows (4 blocks: 1/15, 2/15, 4/15, 8/15), so the widest block is the
smallest. The block of an id is given by its *rank*, rank = (a * id + b) mod rows (a coprime with
rows, so this is a bijection), block i holding ranks [start_i, start_i + n_i).

Honest caveat, block assignment: elastune has no frequency statistics when it builds a table (the
synthetic generator scatters its hot ids by a fixed, seeded permutation, and real Criteo ids
carry no order), so by default (a, b) is a fixed pseudo-random bijection derived from the feature
index: the wide block holds a *random* subset of the ids, not the hot ones. Memory falls exactly as
in the paper, but quality is that of a random partition, below the paper's frequency-sorted one.
Callers that know the order can pass `rank_maps` [(a_f, b_f) per feature, rank 0 = hottest]; for
the synthetic source, which draws id = (a' * rank + b') mod N, the inverse a = a'^-1 mod N,
b = -a'^-1 * b' mod N gives the exact frequency order.

Tables with fewer than MIN_ROWS rows, or whose blocks and projections would not store fewer
floats than a full table, keep a full-width table (a 3-row table gains nothing).

Trade: memory of a table drops from rows * dim to sum_i n_i * d_i (+ projections); with 4 blocks
and dim 16, min dim 2, about (1*16 + 2*8 + 4*4 + 8*2) / 15 = 4.3 floats per row instead of 16.
Rows in narrow blocks can only express d_i directions of the dim-wide space, and each lookup
takes one bag per distinct width (ids of other blocks point at a padding row that the bag skips,
so shapes stay static and the estimator's fake tensors trace it) plus a small batched matmul per
width. Each block table carries that one padding row (d_i floats, counted below).

Cost (fp32 weights incl. projections, optimizer state priced by the optimizer):
    state_bytes = 4 * (dim * sum_{f full} rows_f
                       + sum_{f mixed} sum_i (n_{f,i} * d_i + [d_i < dim] * d_i * dim)
                       + [any f mixed] * sum_i d_i)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.hashed import hash_seed
from elastune.embeddings.sparse_optim import pooled_sum

__all__ = ["MIN_ROWS", "MixedDimEmbedding", "MixedLayout", "block_widths", "mixed_layout"]

MIN_ROWS = 256  # smaller tables keep full width
_MAX_ROWS = 1 << 31  # a * id + b < 2^62: int64 arithmetic cannot overflow


def block_widths(dim: int, cfg: EmbeddingConfig) -> list[int]:
    """Width of each block after merging equal neighbours: dim, dim/2, ... >= mixed_min_dim."""
    low = min(dim, cfg.mixed_min_dim)
    widths: list[int] = []
    for i in range(cfg.mixed_blocks):
        d = max(low, dim >> i)
        if not widths or widths[-1] != d:
            widths.append(d)
    return widths


def _block_shares(cfg: EmbeddingConfig, dim: int) -> list[int]:
    """Geometric weight of each merged block: block i of the unmerged n has weight 2^i."""
    low = min(dim, cfg.mixed_min_dim)
    weights: list[int] = []
    last = -1
    for i in range(cfg.mixed_blocks):
        d = max(low, dim >> i)
        if d == last:
            weights[-1] += 1 << i
        else:
            weights.append(1 << i)
        last = d
    return weights


def _block_rows(rows: int, weights: Sequence[int]) -> list[int]:
    """Split `rows` in proportion to `weights` with integer boundaries (each block >= 1 row when
    rows >= sum(weights))."""
    total = sum(weights)
    bounds, acc = [0], 0
    for w in weights:
        acc += w
        bounds.append(rows * acc // total)
    return [b - a for a, b in itertools.pairwise(bounds)]


def default_rank_map(feature: int, rows: int) -> tuple[int, int]:
    """A fixed pseudo-random bijection id -> (a * id + b) mod rows (Python ints only)."""
    if rows <= 2:
        return 1, 0
    a = hash_seed(feature, 101) % rows or 1
    while math.gcd(a, rows) != 1:
        a = a % (rows - 1) + 1
    return a, hash_seed(feature, 102) % rows


@dataclass(frozen=True)
class MixedLayout:
    widths: list[int]  # block widths (merged), widths[0] <= dim
    full: list[int]  # features that keep a full table
    mixed: list[int]  # features split in blocks
    block_rows: list[list[int]]  # per mixed feature, rows per block

    def elements(self, table_sizes: Sequence[int], dim: int) -> int:
        total = dim * sum(int(table_sizes[f]) for f in self.full)
        for rows in self.block_rows:
            for n, d in zip(rows, self.widths, strict=True):
                total += n * d + (d * dim if d < dim else 0)
        if self.block_rows:  # one padding row per block table (see MixedDimEmbedding)
            total += sum(self.widths)
        return total


def mixed_layout(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig) -> MixedLayout:
    widths = block_widths(dim, cfg)
    weights = _block_shares(cfg, dim)
    full: list[int] = []
    mixed: list[int] = []
    blocks: list[list[int]] = []
    for f, n in enumerate(int(n) for n in table_sizes):
        rows = _block_rows(n, weights)
        cost = sum(r * d + (d * dim if d < dim else 0) for r, d in zip(rows, widths, strict=True))
        if len(widths) > 1 and n >= max(MIN_ROWS, sum(weights)) and cost < n * dim:
            if n >= _MAX_ROWS:
                raise ValueError(f"mixed_dim: table {f} has {n} rows; at most {_MAX_ROWS - 1} are supported")
            mixed.append(f)
            blocks.append(rows)
        else:
            full.append(f)
    return MixedLayout(widths, full, mixed, blocks)


def _ints(values: Sequence[int]) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.int64)


class MixedDimEmbedding(nn.Module):
    """`full`: one concatenated dim-wide table for the features kept whole; for the mixed
    features, per block width i a concatenated table `blocks.i` [sum_f n_{f,i}, d_i] and a
    projection `projections.i` [F_mixed, d_i, dim] (absent where d_i == dim)."""

    full_features: torch.Tensor
    full_starts: torch.Tensor
    mixed_features: torch.Tensor
    rank_a: torch.Tensor
    rank_b: torch.Tensor
    mixed_rows: torch.Tensor
    bounds: torch.Tensor  # [F_mixed, num_blocks + 1] rank where each block starts (and the end)
    block_starts: torch.Tensor  # [F_mixed, num_blocks] row of each feature's segment in its block table
    order: torch.Tensor

    def __init__(
        self,
        table_sizes: Sequence[int],
        dim: int,
        cfg: EmbeddingConfig,
        sparse_grad: bool = False,
        rank_maps: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        super().__init__()
        self.table_sizes = tuple(int(n) for n in table_sizes)
        self.dim = dim
        self.sparse_grad = sparse_grad
        self.layout = lay = mixed_layout(self.table_sizes, dim, cfg)
        if rank_maps is not None and len(rank_maps) != len(self.table_sizes):
            raise ValueError(f"rank_maps: need one (a, b) per feature ({len(self.table_sizes)}), got {len(rank_maps)}")
        maps = [
            (rank_maps[f] if rank_maps is not None else default_rank_map(f, self.table_sizes[f])) for f in lay.mixed
        ]
        for f, (a, _) in zip(lay.mixed, maps, strict=True):
            if math.gcd(a, self.table_sizes[f]) != 1:
                raise ValueError(f"rank_maps[{f}]: a={a} must be coprime with the table's {self.table_sizes[f]} rows")
        full_rows = [self.table_sizes[f] for f in lay.full]
        self.register_buffer("full_features", _ints(lay.full), persistent=False)
        self.register_buffer("full_starts", _ints(_cumstarts(full_rows)), persistent=False)
        self.register_buffer("mixed_features", _ints(lay.mixed), persistent=False)
        self.register_buffer(
            "rank_a", _ints([a % self.table_sizes[f] for f, (a, _) in zip(lay.mixed, maps, strict=True)]), False
        )
        self.register_buffer(
            "rank_b", _ints([b % self.table_sizes[f] for f, (_, b) in zip(lay.mixed, maps, strict=True)]), False
        )
        self.register_buffer("mixed_rows", _ints([self.table_sizes[f] for f in lay.mixed]), persistent=False)
        nb = len(lay.widths)
        bounds = [[*_cumstarts(rows), sum(rows)] for rows in lay.block_rows]
        starts = [_cumstarts([rows[i] for rows in lay.block_rows]) for i in range(nb)]  # [nb][F_mixed]
        self.register_buffer(
            "bounds", torch.tensor(bounds, dtype=torch.int64).view(len(lay.mixed), nb + 1), persistent=False
        )
        self.register_buffer(
            "block_starts",
            torch.tensor([[starts[i][j] for i in range(nb)] for j in range(len(lay.mixed))], dtype=torch.int64).view(
                len(lay.mixed), nb
            ),
            persistent=False,
        )
        position = {f: i for i, f in enumerate(lay.full + lay.mixed)}
        self.register_buffer("order", _ints([position[f] for f in range(len(self.table_sizes))]), persistent=False)
        self._ordered = lay.full + lay.mixed == list(range(len(self.table_sizes)))
        self.full = nn.Parameter(torch.empty(sum(full_rows), dim, dtype=torch.float32))
        self.blocks = nn.ParameterList()
        self.projections = nn.ParameterList()
        self._projected: list[bool] = []
        self._padding: list[int] = []
        if lay.mixed:
            for i, d in enumerate(lay.widths):
                rows = sum(r[i] for r in lay.block_rows)
                self._padding.append(rows)  # the extra last row: ids of other blocks point there
                self.blocks.append(nn.Parameter(torch.empty(rows + 1, d, dtype=torch.float32)))
                self._projected.append(d < dim)
                if d < dim:
                    self.projections.append(nn.Parameter(torch.empty(len(lay.mixed), d, dim, dtype=torch.float32)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # full's init (uniform ±rows^-0.5 per feature) for every table; projections uniform
        # ±sqrt(3 / d_i) (variance 1 / d_i), so a projected row starts with full's variance.
        lay = self.layout
        with torch.no_grad():
            start = 0
            for f in lay.full:
                n = self.table_sizes[f]
                self.full[start : start + n].uniform_(-(n**-0.5), n**-0.5)
                start += n
            for i, table in enumerate(self.blocks):
                start = 0
                for f, rows in zip(lay.mixed, lay.block_rows, strict=True):
                    b = self.table_sizes[f] ** -0.5
                    table[start : start + rows[i]].uniform_(-b, b)
                    start += rows[i]
                table[start:].zero_()  # the padding row: never read, never updated
            for p in self.projections:
                bound = math.sqrt(3.0 / p.shape[1])
                p.uniform_(-bound, bound)

    def ranks(self, ids: torch.Tensor) -> torch.Tensor:
        """ids of the mixed features [B, F_mixed, P] -> their ranks (rank 0 = first row of the
        widest block)."""
        return (ids * self.rank_a.view(1, -1, 1) + self.rank_b.view(1, -1, 1)) % self.mixed_rows.view(1, -1, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, _, pooling = ids.shape
        parts = []
        lay = self.layout
        if lay.full:
            sel = ids.index_select(1, self.full_features) + self.full_starts.view(1, -1, 1)
            flat = sel.reshape(-1, pooling)
            # row optimizers: a gradient of distinct rows, as `full` gives
            bag = pooled_sum(flat, self.full) if self.sparse_grad else F.embedding_bag(flat, self.full, mode="sum")
            parts.append(bag.view(batch, len(lay.full), self.dim))
        if lay.mixed:
            n = len(lay.mixed)
            rank = self.ranks(ids.index_select(1, self.mixed_features))  # [B, n, P]
            out: torch.Tensor | None = None
            proj = iter(self.projections)
            for i, table in enumerate(self.blocks):
                lo = self.bounds[:, i].view(1, -1, 1)
                hi = self.bounds[:, i + 1].view(1, -1, 1)
                inside = (rank >= lo) & (rank < hi)
                # ids of other blocks point at the padding row, which the bag skips (no value, no
                # gradient): shapes stay static, so fake tensors (the estimator) trace it.
                local = rank - lo + self.block_starts[:, i].view(1, -1, 1)
                local = torch.where(inside, local, torch.full_like(local, self._padding[i]))
                bag = F.embedding_bag(
                    local.reshape(-1, pooling), table, mode="sum", sparse=self.sparse_grad, padding_idx=self._padding[i]
                ).view(batch, n, -1)
                if self._projected[i]:
                    bag = torch.einsum("bfd,fde->bfe", bag, next(proj))
                out = bag if out is None else out + bag
            assert out is not None
            parts.append(out.float())
        result = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return result if self._ordered else result.index_select(1, self.order)

    def sparse_parameters(self) -> list[nn.Parameter]:
        """The tables (row updates); the projections are dense and go to the dense optimizer."""
        tables = [self.full, *self.blocks]
        return [p for p in tables if p.shape[0] > 0]


def _cumstarts(rows: Sequence[int]) -> list[int]:
    out, start = [], 0
    for n in rows:
        out.append(start)
        start += n
    return out


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    return 4 * mixed_layout(table_sizes, dim, cfg).elements(table_sizes, dim)


register(
    StrategySpec(
        name="mixed_dim",
        build=lambda sizes, dim, cfg, opt: MixedDimEmbedding(sizes, dim, cfg, sparse_grad=opt != "adam"),
        state_bytes=_state_bytes,
    )
)
