"""Row-wise sparse optimizers for embedding tables: the cost of a step grows with the rows it
touched, not with the size of the table.

`optimizer.sparse` picks one: `sgd`, `adagrad` (one accumulator per element, like torch's) or
`rowwise_adagrad` (one accumulator per row: the mean of the squared gradient over the row, as in
FBGEMM's and TorchRec's EXACT_ROWWISE_ADAGRAD; it keeps 1/dim of Adagrad's state).

The math lives in `RowUpdate.apply`, used two ways:
- `SparseRowOptimizer`, a torch Optimizer for fp32 tables that receive sparse (COO) gradients
  (`nn.EmbeddingBag(sparse=True)`); it works with GradScaler and state_dict like any optimizer.
- strategies that store rows in another form (half, int8, cached) gather the touched rows to fp32,
  call `apply`, and write them back in their own format (see `SelfUpdating`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["RowUpdate", "SelfUpdating", "SparseRowOptimizer", "coalesce_rows", "state_width"]

ROW_KINDS = ("sgd", "adagrad", "rowwise_adagrad")


def state_width(kind: str, dim: int) -> int:
    """Floats of optimizer state per row."""
    return {"sgd": 0, "adagrad": dim, "rowwise_adagrad": 1}[kind]


@dataclass(frozen=True)
class RowUpdate:
    kind: str  # sgd | adagrad | rowwise_adagrad
    lr: float
    eps: float = 1e-10  # torch.optim.Adagrad's default

    def __post_init__(self) -> None:
        if self.kind not in ROW_KINDS:
            raise ValueError(f"unknown row optimizer {self.kind!r}; known: {', '.join(ROW_KINDS)}")

    def apply(self, weight: torch.Tensor, grad: torch.Tensor, state: torch.Tensor | None) -> None:
        """Update `weight` [n, dim] (fp32) in place from `grad` [n, dim]; rows must be distinct.
        `state` is [n, state_width] (fp32), updated in place; None for sgd."""
        if self.kind == "sgd":
            weight.add_(grad, alpha=-self.lr)
            return
        assert state is not None
        if self.kind == "adagrad":
            state.addcmul_(grad, grad)
            weight.addcdiv_(grad, state.sqrt().add_(self.eps), value=-self.lr)
        else:  # rowwise_adagrad: one accumulator per row, the mean squared gradient of the row
            state.add_(grad.square().mean(dim=1, keepdim=True))
            weight.addcdiv_(grad, state.sqrt().add_(self.eps), value=-self.lr)


def coalesce_rows(rows: torch.Tensor, grads: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum the gradients of repeated rows: (rows [m], grads [m, d]) -> (unique rows [n], grads [n, d])."""
    unique, inverse = torch.unique(rows, return_inverse=True)
    summed = torch.zeros(unique.numel(), grads.shape[1], dtype=grads.dtype, device=grads.device)
    summed.index_add_(0, inverse, grads)
    return unique, summed


@runtime_checkable
class SelfUpdating(Protocol):
    """A strategy whose storage is not an autograd parameter: it keeps the gradients of the rows
    each backward touched and applies them itself at the optimizer step."""

    def sparse_step(self, update: RowUpdate, grad_scale: float) -> bool:
        """Apply the pending row gradients divided by `grad_scale` (the fp16 loss scale), then
        drop them. Returns False, changing nothing, if any gradient is inf or nan."""
        ...

    def zero_pending(self) -> None:
        """Drop pending row gradients without applying them (an OOM retry, a skipped step)."""
        ...


class SparseRowOptimizer(torch.optim.Optimizer):
    """`RowUpdate` as a torch Optimizer, for fp32 tables with sparse gradients.

    State per parameter: `sum` [rows, width] (absent for sgd). Dense gradients are accepted too
    (then every row with a non-zero gradient is updated), so small dense tables can share it.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], kind: str, lr: float, eps: float = 1e-10) -> None:
        self.update = RowUpdate(kind, lr, eps)
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            update = RowUpdate(self.update.kind, group["lr"], group["eps"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                rows, grads = _touched_rows(p.grad)
                width = state_width(update.kind, p.shape[1])
                state = self.state[p]
                if width and "sum" not in state:
                    state["sum"] = torch.zeros(p.shape[0], width, dtype=torch.float32, device=p.device)
                acc = state["sum"][rows] if width else None
                weight = p[rows].float()
                update.apply(weight, grads.float(), acc)
                p.index_copy_(0, rows, weight.to(p.dtype))
                if acc is not None:
                    state["sum"].index_copy_(0, rows, acc)


def _touched_rows(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if grad.is_sparse:
        g = grad.coalesce()
        return g.indices()[0], g.values()
    rows = grad.abs().sum(dim=1).nonzero().squeeze(1)
    return rows, grad[rows]
