"""Eval metrics: a workload's own (torchmetrics) checked against scikit-learn on the same numbers,
the eval loss weighted by `loss_weight`, and the old protocol's scorer from `predict`."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from elastune.config import RunConfig
from elastune.data.clicks import NUM_DENSE, ClickBatch
from elastune.training.metrics import evaluate_workload
from elastune.workloads.binary import predicted_metrics
from elastune.workloads.dlrm import DLRMWorkload
from sklearn.metrics import log_loss, roc_auc_score
from torch import nn

CPU = torch.device("cpu")


def _batches(labels: np.ndarray, size: int) -> list[ClickBatch]:
    n = len(labels)
    dense = torch.arange(n, dtype=torch.float32).repeat(NUM_DENSE, 1).T.contiguous()
    whole = ClickBatch(dense, torch.zeros(n, 2, 1, dtype=torch.int64), torch.from_numpy(labels))
    return [whole.slice(i, min(i + size, n)) for i in range(0, n, size)]


class _Logits(nn.Module):
    """A 'model' whose logit for sample i (its index travels in the first dense feature) is given."""

    def __init__(self, logits: np.ndarray) -> None:
        super().__init__()
        self.logits = torch.from_numpy(logits).float()

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        return self.logits[dense[:, 0].long()]


def _scores(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.float32)
    logits = 1.5 * (labels - 0.5) + rng.standard_normal(n)
    return labels, logits


def test_dlrm_metrics_equal_sklearn_over_the_concatenated_batches() -> None:
    labels, logits = _scores(1000, seed=0)
    workload = DLRMWorkload(RunConfig.model_validate({"data": {"rows_scale": 0.0005}}))
    got = evaluate_workload(workload, _Logits(logits), _batches(labels, 96), CPU)
    probs = 1 / (1 + np.exp(-logits.astype(np.float64)))
    rate = labels.mean()
    assert got["auc"] == pytest.approx(roc_auc_score(labels, probs), abs=1e-6)
    assert got["logloss"] == pytest.approx(log_loss(labels, probs), rel=1e-5)  # batches of 96, 96, ..., 40 weighted
    assert got["baseline_logloss"] == pytest.approx(-(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)))


def test_dlrm_auc_is_nan_when_the_eval_set_has_one_class() -> None:
    labels = np.zeros(50, dtype=np.float32)
    workload = DLRMWorkload(RunConfig.model_validate({"data": {"rows_scale": 0.0005}}))
    got = evaluate_workload(workload, _Logits(np.linspace(-1, 1, 50)), _batches(labels, 16), CPU)
    assert math.isnan(got["auc"]) and got["baseline_logloss"] == 0.0


def test_the_old_protocols_scorer_equals_sklearn() -> None:
    labels, logits = _scores(500, seed=1)
    probs = 1 / (1 + np.exp(-logits))

    def predict(batch: ClickBatch) -> torch.Tensor:
        return torch.from_numpy(probs[batch.dense[:, 0].long().numpy()]).to(torch.bfloat16)

    got = predicted_metrics(predict, _batches(labels, 64))
    cast = torch.from_numpy(probs).to(torch.bfloat16).double().numpy()  # what the model returned
    assert got["auc"] == pytest.approx(roc_auc_score(labels, cast))
    assert got["logloss"] == pytest.approx(log_loss(labels, np.clip(cast, 1e-7, 1 - 1e-7)))


class _Declares:
    """A workload whose evaluate returns `out` and which declares `quality_name`."""

    def __init__(self, out: Any, quality_name: str) -> None:
        from elastune.workloads.quality import QualityMetric

        self.out, self.quality = out, QualityMetric(quality_name)

    def evaluate(self, model: nn.Module, batches: Any) -> Any:
        list(batches)
        return self.out


@pytest.mark.parametrize(
    ("out", "quality", "message"),
    [
        ({"rmse": 1.0}, "mae", "declares the quality metric 'mae'"),
        ([1.0], "rmse", "returned a list"),
        ({"r m s e": 1.0}, "rmse", "names are identifiers"),
        ({"rmse": "low"}, "rmse", "metric values are numbers"),
    ],
)
def test_what_a_workload_returns_from_evaluate_is_checked(out: Any, quality: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate_workload(_Declares(out, quality), nn.Identity(), [], CPU)  # type: ignore[arg-type]


def test_checking_a_config_imports_no_metrics_library(tmp_path: Path) -> None:
    """torchmetrics imports matplotlib, which writes its caches under $HOME: a config check (which
    builds the workload) must not import it, so that refused input writes nothing."""
    script = (
        "import sys\n"
        "from elastune.validate import load_run_config\n"
        "from elastune.workloads import build_workload\n"
        "for workload in ('dlrm', 'lm'):\n"
        "    build_workload(load_run_config(None, [f'workload={workload}']))\n"
        "print('torchmetrics' in sys.modules, 'matplotlib' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"] and list(tmp_path.iterdir()) == []
