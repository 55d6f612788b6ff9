"""What every data source shares: the `DataSource` protocol, its range check, the typed arrays
sources build batches from, and the `DataArtifact` a file source keeps beside the weights.

The one property everything else leans on is that a source is a *pure function of position*:
`read(start, n)` returns training samples `[start, start + n)` of an endless stream, and the same
samples whatever way the range is split into calls. That is what makes gradient accumulation
(one batch read as k micro-batches), OOM retries (re-read a batch at a smaller micro-batch) and
checkpoint resume (continue at sample `step * batch_size`) exact rather than approximate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from elastune.data.batch import Batch

__all__ = ["F32", "F64", "I64", "U32", "DataArtifact", "DataSource", "Mask", "check_range"]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
Mask = npt.NDArray[np.bool_]


@runtime_checkable
class DataSource(Protocol):
    """Where training and evaluation samples come from (see the module docstring)."""

    table_sizes: tuple[int, ...]
    pooling: int

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start+n) of the stream.

        Deterministic: read(s, a+b) == concat(read(s, a), read(s+a, b)) exactly, whatever the
        split. This is what makes micro-batch x accumulation, OOM retries and checkpoint resume
        exact.
        """
        ...

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        """The held-out eval set: n samples, disjoint from training, the same every call."""
        ...


def check_range(start: int, n: int) -> None:
    if start < 0 or n < 0:
        raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")


@dataclass(frozen=True)
class DataArtifact:
    """What turned a file source's data into the ids a model trained on: a table source's
    vocabulary, a text source's tokenizer. The weights' rows mean nothing without it, so
    training/checkpoint.py writes it beside a checkpoint (`<checkpoint><suffix>`) and refuses a
    resume whose data now gives other ids, and tracking/mlflow.py logs it on a sweep's parent run."""

    name: str  # what it is, in messages: "vocabulary", "tokenizer"
    text: str  # its JSON
    suffix: str  # the file beside a checkpoint: <checkpoint.path><suffix>
    mlflow_path: str  # the artifact on a sweep's MLflow parent run
    changed: str  # what a resume is told when the data now gives other ids
    ids: Callable[[Any], Any]  # what of the parsed JSON must be equal for the ids to be the same
