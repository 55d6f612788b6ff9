"""Quality of a trained model on the held-out stream: log loss and AUC (scikit-learn's)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score

from elastune.workloads.data import Batch

__all__ = ["EvalResult", "evaluate"]


@dataclass(frozen=True)
class EvalResult:
    logloss: float
    auc: float
    # Log loss of always predicting the eval set's positive rate: the bar a model must clear.
    baseline_logloss: float
    samples: int


def evaluate(predict: Callable[[Batch], torch.Tensor], batches: Iterable[Batch], device: torch.device) -> EvalResult:
    probs, labels = [], []
    with torch.no_grad():
        for batch in batches:
            probs.append(predict(batch.to(device)).cpu().double().numpy())
            labels.append(batch.labels.numpy())
    p = np.clip(np.concatenate(probs), 1e-7, 1 - 1e-7)
    y = np.concatenate(labels)
    rate = float(y.mean())
    baseline = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)) if 0 < rate < 1 else 0.0
    auc = float(roc_auc_score(y, p)) if 0 < rate < 1 else float("nan")
    return EvalResult(logloss=float(log_loss(y, p, labels=[0, 1])), auc=auc, baseline_logloss=baseline, samples=len(y))
