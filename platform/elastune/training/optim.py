"""Two optimizers: one for the dense MLPs, one for the embedding tables.

Embedding tables are most of the parameters but each step touches few of their rows, so they get
their own optimizer (`optimizer.sparse`): dense torch Adam (the baseline: its state and its step
cost scale with the whole table) or one of elastune's row-wise optimizers (embeddings/
sparse_optim.py), whose step cost scales with the rows touched. Strategies that store rows in
their own format (half, int8, cached) apply the row-wise update themselves (`SelfUpdating`), and
the fbgemm backend's kernels apply it inside backward (`UpdatesInBackward`): no optimizer here
steps those tables.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from elastune.config import OptimizerConfig
from elastune.embeddings.fbgemm import UpdatesInBackward
from elastune.embeddings.sparse_optim import RowUpdate, SelfUpdating, SparseRowOptimizer
from elastune.embeddings.swap import strategy_modules

__all__ = ["Optimizers"]

_DENSE = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad}


class Optimizers:
    def __init__(self, model: nn.Module, cfg: OptimizerConfig) -> None:
        # The tables: a built-in workload's `model.embeddings`, or those swap_embeddings put
        # anywhere in a user's model.
        tables = list(strategy_modules(model))
        sparse = [p for table in tables for p in table.sparse_parameters()]  # type: ignore[operator]
        sparse_ids = {id(p) for p in sparse}
        for table in tables:
            if isinstance(table, UpdatesInBackward):
                # The kernel updates these tables in backward with the run's row optimizer and rate.
                table.set_row_update(RowUpdate(cfg.sparse, cfg.lr))
                sparse_ids |= {id(p) for p in table.fused_parameters()}
        dense = [p for p in model.parameters() if id(p) not in sparse_ids and p.requires_grad]
        # torch's fused Adagrad runs on CPU only (fused Adam and SGD run on CUDA too): elsewhere
        # Adagrad takes torch's default (foreach) implementation.
        fused = cfg.dense != "adagrad" or all(p.device.type == "cpu" for p in dense)
        self.dense = _DENSE[cfg.dense](dense, lr=cfg.lr, fused=fused or None)
        self.clip, self._clipped = cfg.clip_grad_norm, dense
        self.all: list[torch.optim.Optimizer] = [self.dense]
        self.sparse: torch.optim.Optimizer | None = None
        if sparse:
            if cfg.sparse == "adam":
                self.sparse = torch.optim.Adam(sparse, lr=cfg.lr, fused=True)
            else:
                self.sparse = SparseRowOptimizer(sparse, cfg.sparse, lr=cfg.lr)
            self.all.append(self.sparse)
        # A self-updating strategy holds its rows (and their optimizer state) itself.
        self.self_updating: list[SelfUpdating] = [t for t in tables if isinstance(t, SelfUpdating)]
        self.row_update = RowUpdate(cfg.sparse, cfg.lr) if cfg.sparse != "adam" else None

    def step(self, scaler: torch.amp.GradScaler) -> None:
        rows_ok = True
        scale = float(scaler.get_scale()) if scaler.is_enabled() else 1.0
        for table in self.self_updating:
            assert self.row_update is not None  # RunConfig pairs self-updating strategies with one
            rows_ok = table.sparse_step(self.row_update, scale) and rows_ok  # skips itself on inf/nan
        if self.clip is not None:
            scaler.unscale_(self.dense)  # clip true gradients, not fp16-scaled ones (a no-op unscaled)
            torch.nn.utils.clip_grad_norm_(self._clipped, self.clip)
        for opt in self.all:
            scaler.step(opt)  # unscales first (unless done above), and skips the step if fp16 grads overflowed
        if not rows_ok and scaler.is_enabled():
            # An overflow only the embedding rows saw must still lower the fp16 loss scale.
            scaler.update(scale * scaler.get_backoff_factor())
        else:
            scaler.update()

    def zero_grad(self) -> None:
        for opt in self.all:
            opt.zero_grad(set_to_none=True)  # None, not zeros: the memory is freed between steps
        for table in self.self_updating:
            table.zero_pending()

    def state_dict(self) -> dict[str, Any]:
        # A self-updating strategy's row state is in the model's state_dict (it travels with rows).
        state = {"dense": self.dense.state_dict()}
        if self.sparse is not None:
            state["sparse"] = self.sparse.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dense.load_state_dict(state["dense"])
        if self.sparse is not None:
            self.sparse.load_state_dict(state["sparse"])
