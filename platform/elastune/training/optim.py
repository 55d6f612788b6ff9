"""Two optimizers: one for the dense MLPs, one for the embedding tables.

Embedding tables are most of the parameters but each step touches few of their rows, so they get
their own optimizer (`optimizer.sparse`); the MLPs get `optimizer.dense`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from elastune.config import OptimizerConfig

__all__ = ["Optimizers"]

_DENSE = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad}
_SPARSE = {"adam": torch.optim.Adam}


class Optimizers:
    def __init__(self, model: nn.Module, cfg: OptimizerConfig) -> None:
        sparse = list(model.embeddings.sparse_parameters())  # type: ignore[union-attr,operator]
        sparse_ids = {id(p) for p in sparse}
        dense = [p for p in model.parameters() if id(p) not in sparse_ids and p.requires_grad]
        self.dense = _DENSE[cfg.dense](dense, lr=cfg.lr)
        self.sparse = _SPARSE[cfg.sparse](sparse, lr=cfg.lr)
        self.all = [self.dense, self.sparse]

    def step(self, scaler: torch.amp.GradScaler) -> None:
        for opt in self.all:
            scaler.step(opt)  # unscales first, and skips the step if fp16 grads overflowed
        scaler.update()

    def zero_grad(self) -> None:
        for opt in self.all:
            opt.zero_grad(set_to_none=True)  # None, not zeros: the memory is freed between steps

    def state_dict(self) -> dict[str, Any]:
        return {"dense": self.dense.state_dict(), "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dense.load_state_dict(state["dense"])
        self.sparse.load_state_dict(state["sparse"])
