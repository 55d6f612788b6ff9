"""How a workload of the old protocol was scored: as a binary classifier from its `predict`.

Log loss and AUC (scikit-learn's) and the log loss of always predicting the eval set's positive
rate. New workloads declare torchmetrics metrics instead (`Workload.metrics`, `eval_step`); this
stays for workloads/legacy.py until the old protocol goes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score

from elastune.data.batch import Batch

__all__ = ["predicted_metrics"]


def predicted_metrics(predict: Callable[[Batch], torch.Tensor], batches: Iterable[Batch]) -> dict[str, float]:
    """logloss, auc and baseline_logloss of `predict`'s probabilities over `batches` (each with
    `labels`, the old click batch's field)."""
    predictions, labels = [], []
    for batch in batches:
        predictions.append(predict(batch).float().cpu().double().numpy())  # bf16 has no numpy dtype
        labels.append(batch.labels.float().cpu().numpy())
    p = np.clip(np.concatenate(predictions), 1e-7, 1 - 1e-7)
    y = np.concatenate(labels)
    rate = float(y.mean())
    baseline = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)) if 0 < rate < 1 else 0.0
    auc = float(roc_auc_score(y, p)) if 0 < rate < 1 else float("nan")
    return {"logloss": float(log_loss(y, p, labels=[0, 1])), "auc": auc, "baseline_logloss": baseline}
