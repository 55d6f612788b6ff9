"""elastune: find, then run, the fastest way to train an embedding-heavy model in a memory ceiling.

The public API for your own models is importable from here; it loads lazily (torch is imported on
first use, so `import elastune` stays cheap for the command line).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "ClickBatch",
    "DataSource",
    "DatasetSource",
    "EmbeddingConfig",
    "QualityMetric",
    "Ragged",
    "RunConfig",
    "TableSource",
    "TableSpec",
    "Workload",
    "WorkloadOptions",
    "__version__",
    "build_tables",
    "estimate",
    "swap_embeddings",
    "table_layout",
    "train",
]

_LAZY = {
    "EmbeddingConfig": "elastune.config",
    "RunConfig": "elastune.config",
    "swap_embeddings": "elastune.embeddings.swap",
    "TableSpec": "elastune.embeddings.tables",
    "build_tables": "elastune.embeddings.tables",
    "Workload": "elastune.workloads.base",
    "WorkloadOptions": "elastune.workloads.options",
    "QualityMetric": "elastune.workloads.quality",
    "TableSource": "elastune.data.table",
    "table_layout": "elastune.data.table",
    "Batch": "elastune.data.batch",
    "Ragged": "elastune.data.batch",
    "ClickBatch": "elastune.data.clicks",
    "DataSource": "elastune.data.source",
    "DatasetSource": "elastune.data.dataset",
    "train": "elastune.training.loop",
    "estimate": "elastune.memory.estimate",
}

if TYPE_CHECKING:
    from elastune.config import EmbeddingConfig, RunConfig
    from elastune.data.batch import Batch, Ragged
    from elastune.data.clicks import ClickBatch
    from elastune.data.dataset import DatasetSource
    from elastune.data.source import DataSource
    from elastune.data.table import TableSource, table_layout
    from elastune.embeddings.swap import swap_embeddings
    from elastune.embeddings.tables import TableSpec, build_tables
    from elastune.memory.estimate import estimate
    from elastune.training.loop import train
    from elastune.workloads.base import Workload
    from elastune.workloads.options import WorkloadOptions
    from elastune.workloads.quality import QualityMetric


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'elastune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
