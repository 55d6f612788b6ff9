"""Deprecated: the data types moved to `elastune.data` (this module goes in the next release).

`Batch` here was DLRM's (dense, sparse, labels) triple, now `elastune.data.ClickBatch`; a batch may
be any mapping, sequence or dataclass of tensors (elastune.data.batch). `DataSource` is
`elastune.data.DataSource`.
"""

from __future__ import annotations

import warnings
from typing import Any

_MOVED = {
    "Batch": ("elastune.data.clicks", "ClickBatch", "elastune.data.ClickBatch"),
    "DataSource": ("elastune.data.source", "DataSource", "elastune.data.DataSource"),
    "DataArtifact": ("elastune.data.source", "DataArtifact", "elastune.data.DataArtifact"),
    "NUM_DENSE": ("elastune.data.clicks", "NUM_DENSE", "elastune.data.clicks.NUM_DENSE"),
    "NUM_SPARSE": ("elastune.data.clicks", "NUM_SPARSE", "elastune.data.clicks.NUM_SPARSE"),
    "table_sizes": ("elastune.data.clicks", "table_sizes", "elastune.data.clicks.table_sizes"),
    "concat_batches": ("elastune.data.batch", "concat_batches", "elastune.data.concat_batches"),
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'elastune.workloads.data' has no attribute {name!r}")
    module, attribute, new = _MOVED[name]
    warnings.warn(
        f"elastune.workloads.data.{name} is deprecated and goes in the next release: use {new}",
        DeprecationWarning,
        stacklevel=2,
    )
    import importlib

    return getattr(importlib.import_module(module), attribute)
