"""SASRec (Kang & McAuley, "Self-Attentive Sequential Recommendation", ICDM 2018).

An item's vector comes from the item table; a history is its items' vectors (scaled by sqrt(dim),
as the paper does) plus a learned vector per position, through a few blocks of causal
self-attention; the output at each position scores every item by a dot product with the same item
table (the paper's shared item embedding).

The item table is the run's embedding strategy (`elastune.build_tables`): full fp32 rows, half,
int8, hashed, QR, mixed widths, cached... Not all of them store a matrix a full-catalogue matmul
could take (int8 codes, hashed or QR rows), so the catalogue's vectors are *looked up* through the
table like any history item, in the same call as the history (`forward`): every strategy scores
the whole catalogue, its gradient reaches the table through the strategy's own lookup (row-wise
optimizers and self-updating rows included), and the table is read once per forward.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Block", "SASRec"]


class Block(nn.Module):
    """Pre-norm block: causal self-attention, then SASRec's point-wise feed-forward (two linear
    layers as wide as the model, ReLU), each with dropout and a residual."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ffn = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Dropout(dropout), nn.Linear(width, width))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x [B, L, width]; mask [B, 1, L, L], True where a position may attend."""
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        x = x + self.drop(self.proj(attended.transpose(1, 2).reshape(b, t, w)))
        return x + self.drop(self.ffn(self.norm2(x)))


class SASRec(nn.Module):
    catalogue: torch.Tensor

    def __init__(
        self, table: nn.Module, items: int, width: int, max_len: int, blocks: int, heads: int, dropout: float
    ) -> None:
        super().__init__()
        self.table = table  # rows 0..items: 0 is the padding
        self.width = width
        self.positions = nn.Parameter(torch.randn(max_len, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(blocks))
        self.norm = nn.LayerNorm(width)
        self.drop = nn.Dropout(dropout)
        # the catalogue, items 1..items (column j of the scores is item j + 1); not saved: it is arange
        self.register_buffer("catalogue", torch.arange(1, items + 1), persistent=False)

    def forward(
        self, history: torch.Tensor, candidates: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """history [B, L] (0: padding, on the left) -> (the output at each position [B, L, width],
        the vectors of `candidates` [*candidates.shape, width], or of the whole catalogue [items, width]).

        History and candidates are looked up in one call of the table: one gather, one backward
        into it, and the estimator prices one lookup of known size (`SASRecWorkload.table_ids`)."""
        b, length = history.shape
        wanted = self.catalogue if candidates is None else candidates.reshape(-1)
        ids = torch.cat([history.reshape(-1), wanted])
        vectors = self.table(ids.view(-1, 1, 1)).view(len(ids), self.width)
        seq, others = vectors[: b * length].view(b, length, self.width), vectors[b * length :]
        if candidates is not None:
            others = others.view(*candidates.shape, self.width)

        real = history != 0
        x = seq * math.sqrt(self.width) + self.positions[:length]
        x = self.drop(x) * real[..., None]  # padding stays zero (the paper's timeline mask)
        # Causal, and never onto padding; a position may always see itself, so a padded row is not
        # all -inf (its output is discarded: it has no target).
        causal = torch.ones(length, length, dtype=torch.bool, device=history.device).tril()
        eye = torch.eye(length, dtype=torch.bool, device=history.device)
        mask = ((causal & real[:, None, :]) | eye)[:, None]
        for block in self.blocks:
            x = block(x, mask) * real[..., None]
        return self.norm(x), others
