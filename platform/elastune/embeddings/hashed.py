"""`hashed`: the hashing trick, with k hash functions per id (feature hashing).

Papers: Weinberger et al. 2009, "Feature Hashing for Large Scale Multitask Learning" (one hash
into B buckets); Tito Svenstrup et al. 2017, "Hash Embeddings for Efficient Word Representations"
(k hashes per id, the k rows summed, so two ids only share their whole vector if all k of their
buckets collide).

Per feature with `rows` ids the table has B buckets:
- `embedding.buckets`: B = min(rows, buckets);
- `embedding.compression` c: B = ceil(rows / c);
- neither: c = 4 (DEFAULT_COMPRESSION).
A feature with rows <= B keeps its own collision-free table addressed by the id (identity, one row
per id); any other feature looks up k = `embedding.num_hashes` rows h_1(id) .. h_k(id) in [0, B)
and sums them (then the bag sums over the pooling as usual).

The hash functions are seed-stable: fixed arithmetic on int64 tensors (murmur3's 32-bit
finaliser, a bijection of [0, 2^32), applied to the id xor a per-(feature, hash) constant derived
from the feature and hash index), never Python's salted `hash()`, so the same id lands in the same
buckets in every process, on every device, and after a checkpoint is reloaded. The arithmetic keeps
every intermediate below 2^63, so no int64 ever overflows.

Trade: memory falls by about c (rows * dim -> B * dim floats per table) and nothing is stored per
id, but unrelated ids share rows: with k = 1 two ids collide completely with probability 1/B; with
k hashes a complete collision needs all k buckets to match (~k!/B^k), so ids keep distinguishable
vectors, at the price of k lookups per id and gradients spread over k rows.

Cost (fp32 weights, optimizer state priced by the optimizer):
    state_bytes = 4 * dim * sum_f min(rows_f, B_f)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.sparse_optim import pooled_sum

__all__ = [
    "DEFAULT_COMPRESSION",
    "HashedEmbedding",
    "bucket_ids",
    "compressed_rows",
    "fmix32",
    "hash_seed",
    "hashed_rows",
]

DEFAULT_COMPRESSION = 4.0
MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B1  # 2^32 / golden ratio, odd
_PRIME2 = 0x85EBCA77  # xxhash32's second prime, odd
_PRIME3 = 0xC2B2AE3D  # xxhash32's third prime, odd
_FMIX1 = 0x85EBCA6B  # murmur3 fmix32 constants (odd: multiplication by them is a bijection mod 2^32)
_FMIX2 = 0xC2B2AE35


def compressed_rows(rows: int, cfg: EmbeddingConfig, default_compression: float = DEFAULT_COMPRESSION) -> int:
    """Rows a compressed table keeps for a feature of `rows` ids: the buckets cap, or
    ceil(rows / compression) (compression defaulting to `default_compression`); at least 1."""
    if cfg.buckets is not None:
        return max(1, min(rows, cfg.buckets))
    c = cfg.compression if cfg.compression is not None else default_compression
    # rounded like workloads.data.table_sizes, so float error cannot add a row
    return max(1, min(rows, math.ceil(round(rows / c, 9))))


# -- the hash: plain Python ints (to derive constants, and as a reference) and int64 tensors ------


def _fmix32_int(x: int) -> int:
    x &= MASK32
    x ^= x >> 16
    x = (x * _FMIX1) & MASK32
    x ^= x >> 13
    x = (x * _FMIX2) & MASK32
    x ^= x >> 16
    return x


def hash_seed(feature: int, index: int) -> int:
    """The 32-bit constant of hash function `index` of feature `feature` (Python ints only)."""
    return _fmix32_int(feature * _GOLDEN + index * _PRIME2 + _PRIME3)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32) without overflowing int64: split x into 16-bit halves
    (x_lo * c < 2^48, x_hi * c < 2^48)."""
    lo = x & 0xFFFF
    hi = x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & MASK32


def fmix32(x: torch.Tensor) -> torch.Tensor:
    """murmur3's 32-bit finaliser on int64 tensors holding values in [0, 2^32): a bijection of
    [0, 2^32) that mixes every input bit into every output bit."""
    x = x ^ (x >> 16)
    x = _mul32(x, _FMIX1)
    x = x ^ (x >> 13)
    x = _mul32(x, _FMIX2)
    return x ^ (x >> 16)


def _fold32(ids: torch.Tensor) -> torch.Tensor:
    """Non-negative int64 ids -> [0, 2^32) (ids below 2^32, all real tables, are unchanged)."""
    return (ids ^ (ids >> 32)) & MASK32


def bucket_ids(ids: torch.Tensor, seeds: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
    """Bucket of each id under each hash: ids int64 [...], seeds int64 broadcastable to ids,
    buckets int64 broadcastable to ids -> fmix32(fold(id) ^ seed) mod buckets, int64."""
    return fmix32(_fold32(ids) ^ seeds) % buckets


# -- the layout: which features hash, and where each table starts (Python ints only) -------------


def hashed_rows(table_sizes: Sequence[int], cfg: EmbeddingConfig) -> list[int]:
    """Rows of each feature's table: rows (identity) where rows <= B, else B buckets."""
    return [min(int(n), compressed_rows(int(n), cfg)) for n in table_sizes]


def _starts(rows: Sequence[int]) -> list[int]:
    out, start = [], 0
    for n in rows:
        out.append(start)
        start += n
    return out


class HashedEmbedding(nn.Module):
    """One concatenated fp32 table: a segment of `rows` rows per identity feature and of B bucket
    rows per hashed feature.

    Lookup is at most two EmbeddingBag calls over the same weight: one for the identity features
    (P ids per bag) and one for the hashed features (k * P bucket rows per bag), then the feature
    order is restored."""

    ident_features: torch.Tensor
    ident_starts: torch.Tensor
    hash_features: torch.Tensor
    hash_starts: torch.Tensor
    hash_buckets: torch.Tensor
    hash_seeds: torch.Tensor
    order: torch.Tensor

    def __init__(self, table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_grad: bool = False) -> None:
        super().__init__()
        self.table_sizes = tuple(int(n) for n in table_sizes)
        self.dim = dim
        self.num_hashes = cfg.num_hashes
        self.sparse_grad = sparse_grad
        self.rows = hashed_rows(self.table_sizes, cfg)
        starts = _starts(self.rows)
        ident = [f for f, (n, b) in enumerate(zip(self.table_sizes, self.rows, strict=True)) if n <= b]
        hashed = [f for f in range(len(self.table_sizes)) if f not in set(ident)]
        self.ident = ident
        self.hashed = hashed

        def ints(values: Sequence[int]) -> torch.Tensor:
            return torch.tensor(list(values), dtype=torch.int64)

        self.register_buffer("ident_features", ints(ident), persistent=False)
        self.register_buffer("ident_starts", ints([starts[f] for f in ident]), persistent=False)
        self.register_buffer("hash_features", ints(hashed), persistent=False)
        self.register_buffer("hash_starts", ints([starts[f] for f in hashed]), persistent=False)
        self.register_buffer("hash_buckets", ints([self.rows[f] for f in hashed]), persistent=False)
        seeds = [[hash_seed(f, j) for f in hashed] for j in range(self.num_hashes)]
        self.register_buffer("hash_seeds", torch.tensor(seeds, dtype=torch.int64), persistent=False)
        # output position of each feature after concatenating [identity features, hashed features]
        position = {f: i for i, f in enumerate(ident + hashed)}
        self.register_buffer("order", ints([position[f] for f in range(len(self.table_sizes))]), persistent=False)
        self._ordered = ident + hashed == list(range(len(self.table_sizes)))
        self.weight = nn.Parameter(torch.empty(sum(self.rows), dim, dtype=torch.float32))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # full's DLRM init (uniform ±rows^-0.5, rows of the original table), divided by sqrt(k) for
        # hashed features so the sum of k rows starts with the spread of one row of `full`.
        with torch.no_grad():
            start = 0
            for f, (n, b) in enumerate(zip(self.table_sizes, self.rows, strict=True)):
                bound = n**-0.5 / (1.0 if f in self.ident else math.sqrt(self.num_hashes))
                self.weight[start : start + b].uniform_(-bound, bound)
                start += b

    def buckets(self, ids: torch.Tensor) -> torch.Tensor:
        """Bucket rows (within each feature's table) of the hashed features' ids:
        ids int64 [B, F_hashed, P] -> [k, B, F_hashed, P]."""
        seeds = self.hash_seeds.view(self.num_hashes, 1, -1, 1)
        return bucket_ids(ids.unsqueeze(0), seeds, self.hash_buckets.view(1, 1, -1, 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, _, pooling = ids.shape
        parts = []
        if self.ident:
            sel = ids.index_select(1, self.ident_features) + self.ident_starts.view(1, -1, 1)
            parts.append(self._bag(sel.reshape(-1, pooling)).view(batch, len(self.ident), self.dim))
        if self.hashed:
            rows = self.buckets(ids.index_select(1, self.hash_features)) + self.hash_starts.view(1, 1, -1, 1)
            flat = rows.permute(1, 2, 0, 3).reshape(batch * len(self.hashed), self.num_hashes * pooling)
            parts.append(self._bag(flat).view(batch, len(self.hashed), self.dim))
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return out if self._ordered else out.index_select(1, self.order)

    def _bag(self, flat: torch.Tensor) -> torch.Tensor:
        if self.sparse_grad:  # for the row optimizers: a gradient of distinct rows, as `full` gives
            return pooled_sum(flat, self.weight)
        return F.embedding_bag(flat, self.weight, mode="sum")

    def sparse_parameters(self) -> list[nn.Parameter]:
        return [self.weight]


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    return 4 * dim * sum(hashed_rows(table_sizes, cfg))


register(
    StrategySpec(
        name="hashed",
        build=lambda sizes, dim, cfg, opt: HashedEmbedding(sizes, dim, cfg, sparse_grad=opt != "adam"),
        state_bytes=_state_bytes,
    )
)
