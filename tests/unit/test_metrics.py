"""Eval metrics: log loss and AUC over batches, filled into arrays sized up front."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from elastune.data.clicks import NUM_DENSE, Batch
from elastune.training.metrics import binary_metrics as evaluate
from sklearn.metrics import log_loss, roc_auc_score

CPU = torch.device("cpu")


def _batches(labels: np.ndarray, size: int) -> list[Batch]:
    n = len(labels)
    dense = torch.arange(n, dtype=torch.float32).repeat(NUM_DENSE, 1).T.contiguous()
    whole = Batch(dense, torch.zeros(n, 2, 1, dtype=torch.int64), torch.from_numpy(labels))
    return [whole.slice(i, min(i + size, n)) for i in range(0, n, size)]


def _predict(probs: np.ndarray):  # the sample's index travels in its first dense feature
    return lambda batch: torch.from_numpy(probs[batch.dense[:, 0].long().numpy()]).to(torch.bfloat16)


def test_metrics_equal_sklearn_over_the_concatenated_batches() -> None:
    rng = np.random.default_rng(0)
    labels = (rng.random(1000) < 0.3).astype(np.float32)
    probs = np.clip(0.3 + 0.4 * (labels - 0.5) + 0.2 * rng.standard_normal(1000), 0.01, 0.99)
    result = evaluate(_predict(probs), _batches(labels, 96), CPU, samples=1000)
    expected = probs.astype(np.float32)  # what the model returns here, cast through bf16
    expected = torch.from_numpy(expected).to(torch.bfloat16).double().numpy()
    assert result.samples == 1000
    assert result.auc == pytest.approx(roc_auc_score(labels, expected))
    assert result.logloss == pytest.approx(log_loss(labels, expected))


def test_a_shorter_eval_stream_is_scored_on_what_it_holds() -> None:
    labels = np.array([0, 1, 0, 1, 1, 0], dtype=np.float32)
    probs = np.array([0.2, 0.8, 0.3, 0.6, 0.9, 0.1])
    result = evaluate(_predict(probs), _batches(labels, 4), CPU, samples=100)
    assert result.samples == 6
    assert result.auc == pytest.approx(1.0)


def test_more_eval_samples_than_asked_for_is_an_error() -> None:
    labels = np.zeros(10, dtype=np.float32)
    with pytest.raises(ValueError, match="more than the 8 samples"):
        evaluate(_predict(np.full(10, 0.5)), _batches(labels, 5), CPU, samples=8)
