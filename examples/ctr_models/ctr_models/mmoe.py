"""`workload: mmoe`: Multi-gate Mixture-of-Experts (Ma et al., "Modeling Task Relationships in
Multi-task Learning with Multi-gate Mixture-of-Experts", KDD 2018), for two tasks: click, and click
and convert (ctr_models/conversions.py adds that label to the click logs).

x = the dense features and every categorical field's pooled embedding, concatenated. E experts
(MLPs) read x; each task k has a softmax gate g_k(x) over the experts and a tower over its mixture:

    logit_k = tower_k( sum_e softmax(G_k x)_e * expert_e(x) )

Loss: BCE(click) + conversion_weight * BCE(conversion). Judged by `mean_auc`, the mean of the two
tasks' eval AUCs (higher is better); each task's AUC is reported beside it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from elastune import QualityMetric, Workload, WorkloadOptions
from elastune.data import DataSource
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from ctr_models.click import ClickWorkload, Width, field_vectors, mlp
from ctr_models.conversions import ConversionBatch, WithConversions

if TYPE_CHECKING:
    from torchmetrics import Metric

__all__ = ["MMoE", "MMoEOptions", "MMoEWorkload"]

TASKS = ("click", "conversion")


class MMoEOptions(WorkloadOptions):
    """`workload_options` of `workload: mmoe` (the embeddings' width is `model.embedding_dim`)."""

    experts: int = Field(4, ge=1, le=64, description="Experts shared by the two tasks.")
    expert_mlp: list[Width] = Field(
        default_factory=lambda: [64, 32],
        min_length=1,
        max_length=16,
        description="Each expert's layer widths; the last is its output's width (a tower's input).",
    )
    tower_mlp: list[Width] = Field(
        default_factory=lambda: [16],
        max_length=16,
        description="Hidden widths of each task's tower; a last layer maps to 1 logit.",
    )
    conversion_weight: float = Field(1.0, ge=0, le=100, description="The conversion task's share of the loss.")


class MMoE(nn.Module):
    """dense [B, D], ids [B, F, P] -> logits [B, 2] (click, conversion)."""

    def __init__(self, num_dense: int, embeddings: nn.Module, num_fields: int, dim: int, options: MMoEOptions) -> None:
        super().__init__()
        self.embeddings = embeddings
        width = num_dense + num_fields * dim
        self.experts = nn.ModuleList(
            mlp([width, *options.expert_mlp], last_activation=True) for _ in range(options.experts)
        )
        self.gates = nn.ModuleList(nn.Linear(width, options.experts) for _ in TASKS)
        self.towers = nn.ModuleList(
            mlp([options.expert_mlp[-1], *options.tower_mlp, 1], last_activation=False) for _ in TASKS
        )

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = torch.cat([dense, field_vectors(self.embeddings, dense, sparse).flatten(1)], dim=1)
        experts = torch.stack([expert(x) for expert in self.experts], dim=1)  # [B, E, width]
        logits = []
        for gate, tower in zip(self.gates, self.towers, strict=True):
            mixture = (gate(x).softmax(dim=1).unsqueeze(2) * experts).sum(dim=1)  # [B, width]
            logits.append(tower(mixture))
        return torch.cat(logits, dim=1)


class MMoEWorkload(ClickWorkload):
    """MMoE on `workload: dlrm`'s click logs with a conversion label added: DLRM's data and tables
    (ctr_models/click.py); the model, its loss and its metrics are its own."""

    options_model = MMoEOptions
    options: MMoEOptions
    quality = QualityMetric("mean_auc", "max")
    eval_loss_name = "loss"  # the weighted sum of the two tasks' BCE

    def make_model(self, embeddings: nn.Module) -> nn.Module:
        return MMoE(self.num_dense, embeddings, len(self.tables), self.cfg.model.embedding_dim, self.options)

    def data_source(self) -> DataSource:
        return WithConversions(super().data_source())

    def _loss(self, logits: torch.Tensor, batch: ConversionBatch) -> torch.Tensor:
        # BCE in fp32: under autocast the logits may be fp16/bf16 (as DLRM's loss says)
        logits = logits.float()
        click = F.binary_cross_entropy_with_logits(logits[:, 0], batch.labels)
        conversion = F.binary_cross_entropy_with_logits(logits[:, 1], batch.conversions)
        return click + self.options.conversion_weight * conversion

    def loss(self, model: nn.Module, batch: ConversionBatch) -> torch.Tensor:
        return self._loss(model(batch.dense, batch.sparse), batch)

    def metrics(self) -> dict[str, Metric]:
        from elastune.workloads.click_metrics import BaselineLogLoss
        from torchmetrics.classification import BinaryAUROC

        found: dict[str, Metric] = {}
        for task in TASKS:  # validate_args=False: no host sync per batch (as DLRM's metrics)
            found[f"{task}_auc"] = BinaryAUROC(validate_args=False)
            found[f"{task}_baseline_logloss"] = BaselineLogLoss()  # 0 when the eval set has one class
        return found

    def eval_step(self, model: nn.Module, batch: ConversionBatch, metrics: Mapping[str, Metric]) -> torch.Tensor:
        logits = model(batch.dense, batch.sparse).float()
        for k, (task, labels) in enumerate(zip(TASKS, (batch.labels, batch.conversions), strict=True)):
            metrics[f"{task}_auc"].update(torch.sigmoid(logits[:, k]), labels.long())
            metrics[f"{task}_baseline_logloss"].update(labels)
        return self._loss(logits, batch)

    def evaluate(self, model: nn.Module, batches: Iterable[Any]) -> dict[str, float]:
        with warnings.catch_warnings():  # one class only: said below as a NaN AUC, not a warning
            warnings.filterwarnings("ignore", "No (positive|negative) samples in targets", UserWarning)
            out = Workload.evaluate(self, model, batches)  # the generic one: DLRM's scores one task
        for task in TASKS:
            if out[f"{task}_baseline_logloss"] == 0.0:
                out[f"{task}_auc"] = math.nan
        out["mean_auc"] = sum(out[f"{task}_auc"] for task in TASKS) / len(TASKS)
        return out

    def example_batch(self, n: int) -> ConversionBatch:
        click = super().example_batch(n)
        return ConversionBatch(click.dense, click.sparse, click.labels, torch.empty(n))
