"""What a sweep leaves behind: the records (records.py) and their MLflow store (mlflow.py).

The records are imported eagerly (cheap: no mlflow, Ray or torch). The MLflow side is imported on
first use of one of its names, because importing mlflow costs seconds and readers of the records
(the CLI's help, the UI's models) should not pay for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from elastune.tracking.records import SweepRecord, SweepStatus, TrialRecord, TrialStatus, pareto_front

if TYPE_CHECKING:
    from elastune.tracking.mlflow import (
        DEFAULT_EXPERIMENT,
        SweepTracker,
        artifact_path,
        list_sweeps,
        load_sweep,
        mlflow_run_url,
        resolve_tracking_uri,
    )

__all__ = [
    "DEFAULT_EXPERIMENT",
    "SweepRecord",
    "SweepStatus",
    "SweepTracker",
    "TrialRecord",
    "TrialStatus",
    "artifact_path",
    "list_sweeps",
    "load_sweep",
    "mlflow_run_url",
    "pareto_front",
    "resolve_tracking_uri",
]

_LAZY = {
    "DEFAULT_EXPERIMENT",
    "SweepTracker",
    "artifact_path",
    "list_sweeps",
    "load_sweep",
    "mlflow_run_url",
    "resolve_tracking_uri",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("elastune.tracking.mlflow"), name)
    raise AttributeError(f"module 'elastune.tracking' has no attribute {name!r}")
