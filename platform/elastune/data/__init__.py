"""Where training samples come from, apart from what a model does with them.

A batch is any mapping, sequence or dataclass of tensors with a leading batch dimension
(data/batch.py); a source is a pure function of position (data/source.py). The sources:

* `SyntheticCriteo` (synthetic.py) needs no files. It draws Zipf-skewed ids (the access pattern
  that makes embedding tables interesting: a few hot rows, a long cold tail) and labels from a
  hidden "teacher" model, so a learner has a real signal to find and a known ceiling
  (`teacher_auc`). It is generated chunk by chunk from seeds, never materialised, so the full-size
  Criteo tables (10M rows) cost no memory.
* `CriteoTSV` reads the Criteo text format; `CriteoParquet` reads the same columns from Parquet
  (both in criteo.py).
* `TableSource` (table.py) reads a CSV or Parquet file of the user's own columns
  (`data.source: table`, `data.schema`): its own dense width, one table per categorical column.
* `TextSource` (text.py) reads the user's documents (`data.source: text`), tokenized by a BPE
  trained on them.
* `DatasetSource` (dataset.py) reads a user's own map-style `torch.utils.data.Dataset` (what
  `Workload.dataset()` returns), shuffled per epoch and still a pure function of position.

The file sources read a user's file, untrusted input, through files.py: a line over
`data.max_document_bytes` is refused by its number before it is read whole, and a .gz is inflated
as it is read. This package knows nothing of workloads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Batch",
    "ClickBatch",
    "CriteoParquet",
    "CriteoTSV",
    "DataArtifact",
    "DataSource",
    "DatasetSource",
    "Ragged",
    "SyntheticCriteo",
    "SyntheticText",
    "TableSource",
    "TextSource",
    "TokenBatch",
    "batch_size",
    "concat_batches",
    "slice_batch",
    "table_layout",
    "to_device",
]

# Loaded on first use: the file sources import pyarrow and tokenizers, which a user of the batch
# helpers alone should not pay for.
_LAZY = {
    "Batch": "elastune.data.batch",
    "Ragged": "elastune.data.batch",
    "batch_size": "elastune.data.batch",
    "concat_batches": "elastune.data.batch",
    "slice_batch": "elastune.data.batch",
    "to_device": "elastune.data.batch",
    "ClickBatch": "elastune.data.clicks",
    "DataArtifact": "elastune.data.source",
    "DataSource": "elastune.data.source",
    "DatasetSource": "elastune.data.dataset",
    "SyntheticCriteo": "elastune.data.synthetic",
    "CriteoParquet": "elastune.data.criteo",
    "CriteoTSV": "elastune.data.criteo",
    "TableSource": "elastune.data.table",
    "table_layout": "elastune.data.table",
    "SyntheticText": "elastune.data.text",
    "TextSource": "elastune.data.text",
    "TokenBatch": "elastune.data.text",
}

if TYPE_CHECKING:
    from elastune.data.batch import Batch, Ragged, batch_size, concat_batches, slice_batch, to_device
    from elastune.data.clicks import ClickBatch
    from elastune.data.criteo import CriteoParquet, CriteoTSV
    from elastune.data.dataset import DatasetSource
    from elastune.data.source import DataArtifact, DataSource
    from elastune.data.synthetic import SyntheticCriteo
    from elastune.data.table import TableSource, table_layout
    from elastune.data.text import SyntheticText, TextSource, TokenBatch


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'elastune.data' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
