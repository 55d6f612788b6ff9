"""Workloads written against the protocol before `elastune.Workload`: still run, for one release.

That protocol was duck-typed: an object with `table_sizes`, `build_model`, `data_source`, `loss`,
`predict` (binary probabilities, scored as log loss and AUC) and `example_batch`, and optional
`quality`, `evaluate`, `loss_weight`, `arrange_step`, `units` / `count_units` and `context`. Such
an object is wrapped here in a `Workload` that forwards every hook it defines, and warned about
once per type (DeprecationWarning naming the hooks that replace it).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from elastune.data.batch import Batch, batch_size
from elastune.data.source import DataSource
from elastune.embeddings.tables import TableSpec
from elastune.workloads.base import Workload
from elastune.workloads.quality import quality_of

__all__ = ["REQUIRED", "LegacyWorkload", "adopt"]

REQUIRED = ("table_sizes", "build_model", "data_source", "loss", "predict", "example_batch")
_WARNED: set[type] = set()


def adopt(obj: Any) -> Workload | None:
    """`obj` as a Workload: itself if it is one, wrapped if it follows the old protocol (with a
    DeprecationWarning, once per type), None if it is neither."""
    if isinstance(obj, Workload):
        return obj
    if not all(hasattr(obj, name) for name in REQUIRED):
        return None
    kind = type(obj)
    if kind not in _WARNED:
        _WARNED.add(kind)
        warnings.warn(
            f"{kind.__module__}.{kind.__qualname__} follows the old workload protocol, which goes in the next "
            "release: subclass elastune.Workload; predict() gives way to metrics() and eval_step() (or "
            "evaluate()), and a batch may be any mapping or dataclass of tensors (docs/workloads.md)",
            DeprecationWarning,
            stacklevel=3,
        )
    return LegacyWorkload(obj)


class LegacyWorkload(Workload):
    """An old-protocol workload behind the new hooks."""

    def __init__(self, inner: Any) -> None:
        super().__init__(getattr(inner, "cfg", None), getattr(inner, "options", None))  # type: ignore[arg-type]
        self.inner = inner
        self.quality = quality_of(inner)
        self.units = getattr(inner, "units", None)
        self.context = getattr(inner, "context", None)

    def build_model(self) -> nn.Module:
        model: nn.Module = self.inner.build_model()
        return model

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        loss: torch.Tensor = self.inner.loss(model, batch)
        return loss

    def data_source(self) -> DataSource:
        source: DataSource = self.inner.data_source()
        return source

    def evaluate(self, model: nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
        own = getattr(self.inner, "evaluate", None)
        if own is not None:
            metrics: dict[str, float] = own(model, batches)
            return metrics
        from elastune.workloads.binary import predicted_metrics  # scikit-learn: imported when used

        return predicted_metrics(lambda b: self.inner.predict(model, b), batches)

    def eval_step(self, model: nn.Module, batch: Batch, metrics: Any) -> torch.Tensor:
        self.inner.predict(model, batch)  # what the old protocol evaluated with (the estimator traces it)
        return torch.zeros(())

    def loss_weight(self, batch: Batch) -> torch.Tensor | float:
        own = getattr(self.inner, "loss_weight", None)
        weight: torch.Tensor | float = own(batch) if own is not None else batch_size(batch)
        return weight

    def arrange_step(self, batch: Batch) -> Batch:
        own = getattr(self.inner, "arrange_step", None)
        return own(batch) if own is not None else batch

    def count_units(self, batch: Batch) -> int:
        own = getattr(self.inner, "count_units", None)
        return int(own(batch)) if own is not None else 0

    @property
    def tables(self) -> list[TableSpec]:
        tables: list[TableSpec] = list(getattr(self.inner, "tables", None) or [])
        return tables

    @property
    def table_sizes(self) -> tuple[int, ...]:
        return tuple(self.inner.table_sizes)

    def table_ids(self, batch: Batch) -> torch.Tensor | None:
        sparse = getattr(batch, "sparse", None)  # the old protocol's batch: the click triple
        return sparse if isinstance(sparse, torch.Tensor) else None

    def example_batch(self, n: int) -> Batch:
        return self.inner.example_batch(n)
