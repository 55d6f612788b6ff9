"""The metrics of a click model that torchmetrics does not have (imported only when evaluating:
torchmetrics brings matplotlib, which writes caches under $HOME)."""

from __future__ import annotations

import torch
from torchmetrics import Metric

__all__ = ["BaselineLogLoss"]


class BaselineLogLoss(Metric):
    """Log loss of always predicting the labels' mean (the eval set's click rate): what a model
    that learned nothing scores. torchmetrics has no such metric; its state is two numbers."""

    full_state_update = False
    positives: torch.Tensor
    count: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.add_state("positives", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, labels: torch.Tensor) -> None:
        self.positives += labels.double().sum()
        self.count += labels.numel()

    def compute(self) -> torch.Tensor:
        rate = self.positives / self.count.clamp(min=1)
        if not 0 < float(rate) < 1:
            return torch.zeros((), dtype=torch.float64)
        return -(rate * torch.log(rate) + (1 - rate) * torch.log1p(-rate))
