"""A workload's embedding tables, declared: `TableSpec`s in, modules of the run's strategy out.

A workload says what tables it has (`TableSpec`: name, rows, width, ids per bag, the features that
look it up) and `build_tables` builds them with the run's `embedding` config, so the workload gets
every strategy, the row-wise optimizers and the estimator without knowing any of them.

Two shapes come out:
- one feature per table, every table as wide: one strategy module over all of them (a single
  table-batched lookup: ids [B, F, P] -> [B, F, dim]), what the built-in DLRM uses;
- otherwise (tables shared by several features, of different widths, or stored differently
  through `embedding.overrides`): `TableSet`, one strategy module per group of tables that share a
  config and a width, looked up per feature (ids [B, F, P] -> [B, F, dim] when the widths agree,
  else a dict of feature -> [B, dim]).
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
    """The tables as modules of the run's strategy, each table with `cfg.overrides` applied to it
    (see the module docstring for the two shapes). Features are in table order; a feature named
    twice is an error."""
    if not tables:
        raise ValueError("a workload needs at least one table")
    features = [f for t in tables for f in t.looked_up_by]
    repeated = sorted({f for f in features if features.count(f) > 1})
    if repeated:
        raise ValueError(f"features looked up by more than one table: {', '.join(repeated)}")
    configs = [cfg.for_table(t.name, t.rows) for t in tables]
    dims = {t.dim for t in tables}
    one_each = all(not t.features or t.features == (t.name,) for t in tables)
    if one_each and len(dims) == 1 and len({c.model_dump_json() for c in configs}) == 1:
        return build_embedding([t.rows for t in tables], dims.pop(), configs[0], sparse_optimizer)
    return TableSet(tables, configs, sparse_optimizer)


class TableSet(nn.Module):
    """Tables that cannot be one module: one module per group of one-feature tables that share a
    config and a width (a table-batched lookup each), and one per table read by several features."""

    def __init__(self, tables: Sequence[TableSpec], configs: Sequence[EmbeddingConfig], sparse_optimizer: str) -> None:
        super().__init__()
        self.specs = tuple(tables)
        self.features = [f for t in tables for f in t.looked_up_by]
        self.table_sizes = tuple(t.rows for t in tables for _ in t.looked_up_by)  # per feature, as ids arrive
        self.dims = {f: t.dim for t in tables for f in t.looked_up_by}
        column = {f: i for i, f in enumerate(self.features)}
        units: dict[str, list[int]] = {}  # one-feature tables by (config, width): a table-batched module each
        shared: list[int] = []
        for i, (t, c) in enumerate(zip(tables, configs, strict=True)):
            if len(t.looked_up_by) > 1:
                shared.append(i)
            else:
                units.setdefault(f"{t.dim}/{c.model_dump_json()}", []).append(i)
        modules: list[nn.Module] = []
        self._reads: list[tuple[list[int], list[str], bool, int]] = []  # columns, features, shared, width
        for members in units.values():
            spec = [tables[i] for i in members]
            modules.append(build_embedding([t.rows for t in spec], spec[0].dim, configs[members[0]], sparse_optimizer))
            names = [t.looked_up_by[0] for t in spec]
            self._reads.append(([column[f] for f in names], names, False, spec[0].dim))
        for i in shared:
            t = tables[i]
            modules.append(build_embedding([t.rows], t.dim, configs[i], sparse_optimizer))
            self._reads.append(([column[f] for f in t.looked_up_by], list(t.looked_up_by), True, t.dim))
        # A list, not a dict keyed by table name: names are the user's (`items` would shadow a method).
        self.tables = nn.ModuleList(modules)

    def forward(self, ids: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """ids [B, F, P], one column per feature in `features` order."""
        outputs: dict[str, torch.Tensor] = {}
        for module, (columns, names, is_shared, dim) in zip(self.tables, self._reads, strict=True):
            part = ids[:, columns, :]
            # A shared table: its features' ids stacked into the batch, one lookup of one table.
            pooled = _lookup(module, dim, part) if is_shared else module(part)  # [B, k, dim]
            # unbind, not pooled[:, j] per feature: the backward of k selects writes k zero-filled
            # copies of the whole [B, k, dim] (quadratic in k); unbind's stacks the k gradients once.
            outputs.update(zip(names, pooled.unbind(1), strict=True))
        if len(set(self.dims.values())) == 1:
            return torch.stack([outputs[f] for f in self.features], dim=1)
        return outputs


def _lookup(module: nn.Module, dim: int, ids: torch.Tensor) -> torch.Tensor:
    """ids [B, k, P] of k features that read one table -> [B, k, dim]: stacked into the batch."""
    batch, k, pooling = ids.shape
    stacked = ids.transpose(0, 1).reshape(k * batch, 1, pooling)
    out: torch.Tensor = module(stacked)
    return out.reshape(k, batch, dim).transpose(0, 1)
