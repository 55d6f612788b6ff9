"""The mechanism shared by strategies that update their own rows (half, int8, cached).

Their storage is not an fp32 autograd parameter (fp16/bf16 rows, int8 codes, a host table behind
a device cache), so torch optimizers cannot update it. Instead, each forward gathers the batch's
distinct rows into an fp32 leaf tensor that autograd fills with row gradients; at the optimizer
step `sparse_step` sums the pending gradients of all micro-batches, applies one of the row-wise
optimizers (embeddings/sparse_optim.py) in fp32 and writes the rows back in the strategy's format.
The rows' optimizer state lives in the module's buffers, so it is checkpointed with the rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake
from torch.nn import functional as F

from elastune.embeddings.full import feature_offsets
from elastune.embeddings.sparse_optim import ROW_KINDS, RowUpdate, coalesce_rows, state_width, traced_rows

__all__ = ["SelfUpdatingEmbedding"]

_INIT_CHUNK_ROWS = 1 << 16  # rows initialised at a time: bounds the fp32 scratch of a build


@dataclass
class _Pending:
    """One forward's rows, waiting for the optimizer step."""

    rows: torch.Tensor  # int64 [n] distinct global rows (on the ids' device)
    values: torch.Tensor  # fp32 [n, dim] leaf; autograd puts the rows' gradients in .grad
    counts: torch.Tensor | None  # int64 [n] how often each row occurred (strategies that count)


class SelfUpdatingEmbedding(nn.Module):
    """Base of strategies whose storage is not an autograd parameter (see `sparse_optim.SelfUpdating`).

    forward: ids -> global rows -> distinct rows -> `_gather_rows` (fp32 copies, an autograd leaf)
    -> embedding_bag over the remapped ids. sparse_step: the leaves' gradients, coalesced over the
    micro-batches and unscaled, go to `_update_rows`, which applies the row optimizer and stores
    the result in the subclass's format.

    Under FakeTensorMode (the memory estimator) ids have no values: a batch holds as many distinct
    rows as `sparse_optim.traced_rows` says (by default every id its own row, the worst case), and
    nothing branches on data.
    """

    offsets: torch.Tensor
    step_count: torch.Tensor
    rounding_seed: torch.Tensor
    count_accesses = False  # subclasses that need per-row access counts set this
    # The device whose kernels forward picks (None: its tensors' own). The estimator's CUDA trace
    # runs on CPU fake tensors and sets it, so it traces what a CUDA run does.
    kernel_device: str | None = None

    def __init__(self, table_sizes: Sequence[int], dim: int, sparse_optimizer: str) -> None:
        super().__init__()
        if sparse_optimizer not in ROW_KINDS:
            raise ValueError(
                f"{type(self).__name__} updates its own rows and needs a row-wise sparse optimizer "
                f"({', '.join(ROW_KINDS)}), not {sparse_optimizer!r}"
            )
        self.table_sizes = tuple(int(n) for n in table_sizes)
        self.dim = dim
        self.num_rows = sum(self.table_sizes)
        self.row_optimizer = sparse_optimizer
        self.state_width = state_width(sparse_optimizer, dim)
        self.register_buffer("offsets", feature_offsets(self.table_sizes), persistent=False)
        # Optimizer steps applied; in the state_dict so warm-up and rounding noise resume exactly.
        self.register_buffer("step_count", torch.zeros((), dtype=torch.int64))
        # Seed of the stochastic rounding noise: the run's seed, so runs are reproducible; saved, so
        # a loaded module continues the noise sequence of the one that saved it.
        self.seed = torch.initial_seed() % 2**63
        self.register_buffer("rounding_seed", torch.tensor(self.seed, dtype=torch.int64))
        # The same as Python ints: no device sync (nor fake tensor) to read them.
        self._steps = 0
        self._pending: list[_Pending] = []
        self._generators: dict[str, tuple[torch.Generator, int]] = {}
        self.register_load_state_dict_post_hook(_after_load)

    # -- what subclasses provide

    def _gather_rows(self, rows: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        """Current values of `rows` (distinct global rows) as a new fp32 tensor [n, dim]."""
        raise NotImplementedError

    def _update_rows(self, update: RowUpdate, rows: torch.Tensor, grads: torch.Tensor) -> None:
        """Apply `update` to distinct `rows` with fp32 `grads` [n, dim] and store the result."""
        raise NotImplementedError

    def _after_step(self, pending: list[_Pending]) -> None:
        """Called after each applied step with the step's forwards (the cache counts and admits)."""

    def _loaded(self) -> None:
        """Called after load_state_dict."""
        self._steps = int(self.step_count)
        self.seed = int(self.rounding_seed)
        self._generators.clear()

    # -- the strategy interface

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        batch, features, pooling = ids.shape
        flat = (ids + self.offsets.view(1, -1, 1)).reshape(-1)
        rows, inverse, counts = self._distinct(flat)
        with torch.no_grad():
            values = self._gather_rows(rows, counts)
        if self.training and torch.is_grad_enabled():
            values.requires_grad_(True)
            self._pending.append(_Pending(rows, values, counts))
        ids_of_bags = inverse.view(batch * features, pooling)
        if (self.kernel_device or values.device.type) == "cpu":
            bags = _BagSum.apply(values, ids_of_bags)
        else:  # CUDA's embedding_bag backward is fast, and deterministic where index_add_ is not
            bags = F.embedding_bag(ids_of_bags, values, mode="sum")
        return bags.view(batch, features, self.dim)

    def sparse_parameters(self) -> list[nn.Parameter]:
        return []  # the storage is updated by sparse_step, not by a torch optimizer

    def sparse_step(self, update: RowUpdate, grad_scale: float) -> bool:
        pending, self._pending = self._pending, []
        # sgd keeps no state, so it applies to any module; other optimizers need the state built for them.
        if update.kind != "sgd" and state_width(update.kind, self.dim) != self.state_width:
            raise ValueError(
                f"{type(self).__name__} was built for row optimizer {self.row_optimizer!r} and cannot "
                f"apply {update.kind!r}: build it with the optimizer.sparse the run uses"
            )
        used = [(p.rows, p.values.grad) for p in pending if p.values.grad is not None]
        if used:
            if len(used) == 1:  # one forward's rows are distinct already
                rows, grads = used[0]
            else:
                rows = torch.cat([r for r, _ in used])
                grads = torch.cat([g for _, g in used])
            fake = is_fake(grads)
            if len(used) > 1 and not fake:  # (`cached` keeps its rows on the host)
                rows, grads = coalesce_rows(rows.to(grads.device), grads, self.num_rows)
            if grad_scale != 1.0:
                grads = grads / grad_scale
            if not fake and not bool(torch.isfinite(grads).all()):
                return False
            with torch.no_grad():
                self._update_rows(update, rows, grads)
        self._steps += 1
        self.step_count.fill_(self._steps)
        with torch.no_grad():
            self._after_step(pending)
        return True

    def zero_pending(self) -> None:
        self._pending = []

    # -- helpers for subclasses

    def _distinct(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(distinct rows, index of each id among them, occurrences of each row or None)."""
        if is_fake(flat):  # no values to deduplicate: as many rows as the trace is told (`traced_rows`)
            n = traced_rows(flat.numel())
            rows = flat if n == flat.numel() else flat.new_empty(n)
            ones = torch.ones_like(rows) if self.count_accesses else None
            return rows, torch.arange(flat.numel(), device=flat.device), ones
        if self.count_accesses:
            rows, inverse, counts = torch.unique(flat, return_inverse=True, return_counts=True)
            return rows, inverse, counts
        rows, inverse = torch.unique(flat, return_inverse=True)
        return rows, inverse, None

    def _uniform(self, shape: Sequence[int], device: torch.device) -> torch.Tensor:
        """Uniform [0, 1) noise for stochastic rounding, from a generator seeded by (seed, step):
        the same run draws the same noise, and a resumed run continues the same sequence."""
        key = str(device)
        gen, seeded_at = self._generators.get(key, (None, -1))
        if gen is None:
            gen = torch.Generator(device=device)
        if seeded_at != self._steps:
            gen.manual_seed((self.seed * 6364136223846793005 + self._steps * 1442695040888963407 + 1) % 2**63)
        self._generators[key] = (gen, self._steps)
        return torch.rand(tuple(shape), generator=gen, device=device)

    def _dlrm_init(self) -> Iterator[tuple[int, torch.Tensor]]:
        """DLRM's init, uniform in ±rows^-0.5 per table, as (first row, fp32 chunk) pairs so the
        fp32 scratch stays small whatever the table size."""
        start = 0
        for rows in self.table_sizes:
            bound = rows**-0.5
            for first in range(0, rows, _INIT_CHUNK_ROWS):
                n = min(_INIT_CHUNK_ROWS, rows - first)
                chunk = torch.empty(n, self.dim).uniform_(-bound, bound)
                yield start + first, chunk
                if is_fake(chunk):
                    # The memory estimator: no values to set, and every chunk makes the same scratch
                    # as the first (the real-size int8 tables took 16 s to build chunk by chunk).
                    break
            start += rows


class _BagSum(torch.autograd.Function):
    """`F.embedding_bag(ids, values, mode="sum")` whose backward adds each bag's gradient to its
    rows with one index_add_, in lookup order: on CPU ~10x faster than embedding_bag's own dense
    backward (which sorts the ids) for a batch's distinct rows, and as deterministic."""

    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.rows = values.shape[0]
        return F.embedding_bag(ids, values, mode="sum")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (ids,) = ctx.saved_tensors
        pooling = ids.shape[1]
        per_lookup = grad.repeat_interleave(pooling, dim=0) if pooling > 1 else grad
        return grad.new_zeros(ctx.rows, grad.shape[1]).index_add_(0, ids.reshape(-1), per_lookup), None


def _after_load(module: nn.Module, incompatible: Any) -> None:
    if isinstance(module, SelfUpdatingEmbedding):
        module._loaded()
