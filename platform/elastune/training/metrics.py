"""Quality of a trained model on the held-out stream: the workload's own metrics, checked.

Evaluation is the workload's (`Workload.evaluate`: its eval loss and the torchmetrics metrics it
declares); the loop only moves the batches to the device and checks what comes back: a mapping of
metric names to numbers that holds the workload's declared quality metric (workloads/quality.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from elastune.data.batch import Batch, to_device
from elastune.workloads import Workload

__all__ = ["evaluate_workload"]


def evaluate_workload(
    workload: Workload, model: nn.Module, batches: Iterable[Batch], device: torch.device
) -> dict[str, float]:
    """The eval metrics of `model` over `batches` (moved to `device`, under no_grad). Raises
    ValueError when the result lacks the declared quality metric or is not a mapping of names to
    numbers."""
    with torch.no_grad():
        metrics = _checked(type(workload).__name__, workload.evaluate(model, (to_device(b, device) for b in batches)))
    name = workload.quality.name
    if name not in metrics:
        raise ValueError(
            f"{type(workload).__name__} declares the quality metric {name!r} but its eval metrics are "
            f"{sorted(metrics)}; return it from evaluate() or metrics(), or declare one of those"
        )
    return metrics


def _checked(owner: str, metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, Mapping):
        kind = type(metrics).__name__
        raise ValueError(f"{owner}.evaluate returned a {kind}; return a dict of metric name -> number")
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{owner}.evaluate returned the metric name {name!r}; names are identifiers")
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{owner}.evaluate returned {name}={value!r}; metric values are numbers") from None
    return out
