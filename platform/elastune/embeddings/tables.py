"""A workload's embedding tables, declared: `TableSpec`s in, modules of the run's strategy out.

A workload says what tables it has (`TableSpec`: name, rows, width, ids per bag, the features that
look it up) and `build_tables` builds them with the run's `embedding` config, so the workload gets
every strategy, the row-wise optimizers and the estimator without knowing any of them.

Two shapes come out:
- one feature per table, every table as wide: one strategy module over all of them (a single
  table-batched lookup: ids [B, F, P] -> [B, F, dim]), what the built-in DLRM uses;
- otherwise (tables shared by several features, or of different widths): `TableSet`, one
  strategy module per table, looked up per feature (ids [B, F, P] -> [B, F, dim] when the widths
  agree, else a dict of feature -> [B, dim]).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import build_embedding

__all__ = ["TableSet", "TableSpec", "build_tables"]


@dataclass(frozen=True)
class TableSpec:
    """One embedding table of a workload."""

    name: str
    rows: int
    dim: int
    pooling: int = 1  # ids per bag in a lookup (summed)
    features: tuple[str, ...] = ()  # the features that look it up; () = one feature named as the table

    def __post_init__(self) -> None:
        if self.rows < 2 or self.dim < 1 or self.pooling < 1:
            raise ValueError(
                f"table {self.name!r}: rows must be >= 2, dim and pooling >= 1 "
                f"(got rows={self.rows}, dim={self.dim}, pooling={self.pooling})"
            )

    @property
    def looked_up_by(self) -> tuple[str, ...]:
        return self.features or (self.name,)


def build_tables(tables: Sequence[TableSpec], cfg: EmbeddingConfig, sparse_optimizer: str = "adam") -> nn.Module:
    """The tables as modules of `cfg.strategy` (see the module docstring for the two shapes).
    Features are in table order; a feature named twice is an error."""
    if not tables:
        raise ValueError("a workload needs at least one table")
    features = [f for t in tables for f in t.looked_up_by]
    repeated = sorted({f for f in features if features.count(f) > 1})
    if repeated:
        raise ValueError(f"features looked up by more than one table: {', '.join(repeated)}")
    dims = {t.dim for t in tables}
    if all(not t.features or t.features == (t.name,) for t in tables) and len(dims) == 1:
        return build_embedding([t.rows for t in tables], dims.pop(), cfg, sparse_optimizer)
    return TableSet(tables, cfg, sparse_optimizer)


class TableSet(nn.Module):
    """One strategy module per table, each feature looked up in its own table."""

    def __init__(self, tables: Sequence[TableSpec], cfg: EmbeddingConfig, sparse_optimizer: str) -> None:
        super().__init__()
        self.specs = tuple(tables)
        # A list in table order, not a dict: table names are the user's (`items` would shadow a method).
        self.tables = nn.ModuleList([build_embedding([t.rows], t.dim, cfg, sparse_optimizer) for t in tables])
        self.features = [f for t in tables for f in t.looked_up_by]
        self.table_sizes = tuple(t.rows for t in tables for _ in t.looked_up_by)  # per feature, as ids arrive

    def forward(self, ids: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """ids [B, F, P], one column per feature in `features` order."""
        outputs: dict[str, torch.Tensor] = {}
        column = 0
        for spec, module in zip(self.specs, self.tables, strict=True):
            k = len(spec.looked_up_by)
            # One table for all its features: their ids are stacked into the batch, one lookup.
            pooled = _lookup(module, spec.dim, ids[:, column : column + k, :])  # [B, k, dim]
            for j, feature in enumerate(spec.looked_up_by):
                outputs[feature] = pooled[:, j, :]
            column += k
        if len({s.dim for s in self.specs}) == 1:
            return torch.stack([outputs[f] for f in self.features], dim=1)
        return outputs


def _lookup(module: nn.Module, dim: int, ids: torch.Tensor) -> torch.Tensor:
    """ids [B, k, P] of k features that read one table -> [B, k, dim]: stacked into the batch."""
    batch, k, pooling = ids.shape
    stacked = ids.transpose(0, 1).reshape(k * batch, 1, pooling)
    out: torch.Tensor = module(stacked)
    return out.reshape(k, batch, dim).transpose(0, 1)
