"""Row-wise sparse optimizers for embedding tables: the cost of a step grows with the rows it
touched, not with the size of the table.

`optimizer.sparse` picks one: `sgd`, `adagrad` (one accumulator per element, like torch's) or
`rowwise_adagrad` (one accumulator per row: the mean of the squared gradient over the row, as in
FBGEMM's and TorchRec's EXACT_ROWWISE_ADAGRAD; it keeps 1/dim of Adagrad's state).

The math lives in `RowUpdate.apply`, used two ways:
- `SparseRowOptimizer`, a torch Optimizer for fp32 tables that receive sparse (COO) gradients
  (`nn.EmbeddingBag(sparse=True)`, or `pooled_sum`); it works with GradScaler and state_dict like
  any optimizer.
- strategies that store rows in another form (half, int8, cached) gather the touched rows to fp32,
  call `apply`, and write them back in their own format (see `SelfUpdating`).

Why `pooled_sum` and not `nn.EmbeddingBag(sparse=True)`: torch's sparse backward emits one
gradient row per *lookup*, uncoalesced (4096 x 26 Zipf lookups hit ~23k distinct rows: 4-5x more
rows than the update needs), and coalescing that COO tensor in the step was most of the update's
time. `pooled_sum`'s backward sums the lookups of each distinct row once (one stable sort, then
`embedding_bag` over the output gradient: `_sum_by_row`) and hands autograd a gradient with one
row per distinct row, which the step takes as it is. `full`, `hashed`, `qr` and `mixed_dim`'s
unhashed tables look up through it; on CUDA `_sum_by_row` sums with `index_add_` instead (see there).

Under the memory estimator's fake tensors ids have no values, so nothing can be deduplicated:
`traced_rows(n)` says how many distinct rows to trace for a batch of n lookups. By default every
lookup is its own row (the worst case); the estimator measures the run's own data and sets the
real counts with `traced_distinct_rows` (memory/trace.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.nn import functional as F

__all__ = [
    "RowUpdate",
    "SelfUpdating",
    "SparseRowOptimizer",
    "coalesce_rows",
    "pooled_sum",
    "state_width",
    "traced_distinct_rows",
    "traced_rows",
    "write_rows",
]

ROW_KINDS = ("sgd", "adagrad", "rowwise_adagrad")
ROW_OPTIMIZERS: frozenset[str] = frozenset(ROW_KINDS)  # optimizer.sparse values a self-updating strategy takes


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


# lookups in a batch -> distinct rows among them, for fake-tensor traces (see the module docstring)
_TRACED_DISTINCT: ContextVar[Mapping[int, int] | None] = ContextVar("traced_distinct", default=None)


@contextmanager
def traced_distinct_rows(rows_by_lookups: Mapping[int, int]) -> Iterator[None]:
    """Within: a fake-tensor trace takes a batch of n lookups to hold `rows_by_lookups[n]` distinct
    rows; a batch of any other size, n (every lookup its own row)."""
    token = _TRACED_DISTINCT.set(dict(rows_by_lookups))
    try:
        yield
    finally:
        _TRACED_DISTINCT.reset(token)


def traced_rows(lookups: int) -> int:
    """Distinct rows a fake-tensor trace takes a batch of `lookups` lookups to hold."""
    counts = _TRACED_DISTINCT.get()
    return lookups if counts is None else min(lookups, counts.get(lookups, lookups))


def coalesce_rows(rows: torch.Tensor, grads: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum the gradients of repeated rows: (rows [m], grads [m, d]) -> (unique rows [n], grads [n, d])."""
    return _sum_by_row(rows, grads, per_source=1)


def _sum_by_row(rows: torch.Tensor, source: torch.Tensor, per_source: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(distinct `rows` in increasing order, for each the sum of source[i // per_source] over the
    positions i where it occurs). `rows` [m * per_source], `source` [m, d]."""
    if source.is_cuda:
        # On CUDA, embedding_bag gives each bag to one thread block, and a Zipf-hot row's bag holds
        # thousands of lookups: one bag then takes milliseconds (measured on an H100: 3 ms of a
        # 106k-lookup step, 95% of its GPU time). index_add_ spreads the adds over the GPU (atomic
        # adds: the order of a row's float sum may differ run to run, by rounding).
        distinct, inverse = torch.unique(rows, return_inverse=True)
        per_row = source.repeat_interleave(per_source, dim=0) if per_source > 1 else source
        return distinct, source.new_zeros(distinct.numel(), source.shape[1]).index_add_(0, inverse, per_row)
    # CPU: group the positions by row with one sort (stable: each row sums in position order, so the
    # result does not depend on the sort's threads), then sum each group with embedding_bag over
    # `source`: row r's bag holds the sources that name r. A scatter (index_add_) is several times
    # slower on CPU: it sorts its index again internally and adds element by element.
    ordered, order = rows.sort(stable=True)
    distinct, counts = torch.unique_consecutive(ordered, return_counts=True)
    starts = counts.cumsum(0).sub_(counts)
    sources = order.div(per_source, rounding_mode="floor") if per_source > 1 else order
    return distinct, F.embedding_bag(sources, source.contiguous(), starts, mode="sum")


def pooled_sum(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`F.embedding_bag(ids, weight, mode="sum")` (ids [bags, pooling]) whose gradient for `weight`
    is a sparse tensor with one row per distinct id, in increasing row order: the lookups of a row
    are summed in the backward, so the optimizer step has nothing left to coalesce."""
    return _PooledSum.apply(weight, ids)


class _PooledSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.table_shape = weight.shape
        return F.embedding_bag(ids, weight, mode="sum")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (ids,) = ctx.saved_tensors
        pooling = ids.shape[1]
        flat = ids.reshape(-1)
        fake = is_fake(flat)
        if not fake:  # lookup i is in bag i // pooling, whose output gradient it adds to its row
            rows, summed = _sum_by_row(flat, grad, per_source=pooling)
        elif (distinct := traced_rows(flat.numel())) == flat.numel():  # the worst case: a row per lookup
            rows, summed = flat, grad.repeat_interleave(pooling, dim=0)
        else:  # the memory estimator: the real path's sort, and its results' sizes (`traced_rows`)
            flat.sort(stable=True)
            rows, summed = flat.new_empty(distinct), grad.new_empty(distinct, grad.shape[1])
        table_grad = torch.sparse_coo_tensor(
            rows.unsqueeze(0), summed, ctx.table_shape, is_coalesced=not fake, check_invariants=False
        )
        return table_grad, None


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
                acc = state["sum"].index_select(0, rows) if width else None
                weight = p.index_select(0, rows).float()
                update.apply(weight, grads.float(), acc)
                write_rows(p, rows, weight.to(p.dtype))
                if acc is not None:
                    write_rows(state["sum"], rows, acc)


def write_rows(table: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> None:
    """`table.index_copy_(0, rows, values)`, faster for rows of a multiple of 16 bytes: index_copy_
    copies element by element, so the rows are copied as 16-byte elements (complex128, a bit
    pattern copied, never read as a number), which halves the time of the update's write-back
    on CPU."""
    wide = table.dim() == 2 and (table.shape[1] * table.element_size()) % 16 == 0
    if wide and table.is_contiguous() and values.is_contiguous() and values.dtype == table.dtype:
        table.view(torch.complex128).index_copy_(0, rows, values.view(torch.complex128))
    else:
        table.index_copy_(0, rows, values)


def _touched_rows(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if grad.is_sparse:
        # autograd drops the "coalesced" flag of the gradient `pooled_sum` emits when it stores it
        # in .grad; strictly increasing rows are coalesced all the same, so coalesce() is skipped
        # (a micro-batch-accumulated gradient repeats rows and fails the check: it is coalesced).
        rows = grad._indices()[0]
        if not grad.is_coalesced() and not is_fake(rows) and bool((rows[1:] > rows[:-1]).all()):
            return rows, grad._values()
        g = grad.coalesce()
        return g.indices()[0], g.values()
    rows = grad.abs().sum(dim=1).nonzero().squeeze(1)
    return rows, grad[rows]
