"""Live bytes through a fake-tensor trace: a dispatch mode that watches every storage the trace
creates and frees, keeps the high-water mark (the *traced peak*) and what was live at it, and, for
a CUDA prediction, replays each allocation and free through the caching allocator's model.

The breakdown attributes the live bytes at the traced peak to parameters, gradients, optimizer
state and activations (everything else the step holds: activations, temporaries, the batch).

On every device the trace undoes one artifact of fake tensors: where several ops read one tensor,
autograd's engine sums their gradients, in place into the one it holds when nothing else refers to
it, in eager; for a tensor subclass (fake tensors are one) always out of place. Where eager would
sum in place, the sum takes over the held gradient's storage instead of counting a new block
(`_summed_into`).

CUDA replay: every storage's allocation and free goes through the caching allocator's model in the
trace's order, so the prediction holds what the reserved peak owes to that order: blocks cached
for one step's shapes that the next step's tensors do not fit (why an LM under dynamic padding is
traced over the run's own sequence of batch shapes: trace.py). What a CUDA kernel allocates
beyond its outputs (cuda_kernels.py) is replayed around the op. The replay also undoes one trace
artifact: autograd formulas take out-of-place branches for tensor subclasses (fake tensors are
one), where eager CUDA writes into fresh zeros; the result then takes over the zeros' block
instead of allocating its own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from elastune.memory.cuda_allocator import CachingAllocator
from elastune.memory.cuda_kernels import SCATTERS, ZEROS, kernel_buffers
from elastune.training.probe import HEAP_MMAP_THRESHOLD, VIRTUAL_MMAP_THRESHOLD

__all__ = ["PARTS", "LiveBytes"]

PARTS = ("parameters", "gradients", "optimizer_state", "activations", "other")

_ADD = torch.ops.aten.add.Tensor
_ENGINE = torch.autograd.graph._engine_run_backward.__code__  # the Python frame backward runs under
# torch's own frames between an op and the dispatch mode that sees it
_PLUMBING = tuple(
    os.path.join(os.path.dirname(torch.__file__), p)
    for p in ("_dynamo" + os.sep, "_compile.py", "utils" + os.sep + "_python_dispatch.py", "_subclasses" + os.sep)
)


def _called_by_engine() -> bool:
    """The op a dispatch mode sees was called by autograd's engine itself: the first Python frame
    above the mode's, torch's dispatch plumbing aside, is the one backward runs under."""
    frame: FrameType | None = sys._getframe(3)  # above this function, `_summed_into` and `__torch_dispatch__`
    while frame is not None and frame.f_code.co_filename.startswith(_PLUMBING):
        frame = frame.f_back
    return frame is not None and frame.f_code is _ENGINE


def _references(t: torch.Tensor) -> tuple[int, int]:
    """How many references `t`'s TensorImpl and its storage have, as seen from a dispatch mode."""
    return t._use_count(), torch._C._storage_Use_Count(t.untyped_storage()._cdata)  # type: ignore[attr-defined]


class _SoleOwnerProbe(TorchDispatchMode):
    """Sees the reference counts of a gradient the engine sums into when it holds the only
    reference: eager's condition for the sum in place."""

    seen: tuple[int, int] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is _ADD and torch._C._current_graph_task_id() != -1:
            self.seen = _references(args[0])
        return func(*args, **(kwargs or {}))


@functools.cache
def _sole_owner() -> tuple[int, int] | None:
    """`_references` of a held gradient nothing else refers to, in the trace's stack of modes (fake
    tensors under a dispatch mode): the engine's buffer, and what the call into the mode adds."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), _SoleOwnerProbe() as probe, torch.enable_grad():
        h = torch.empty(4, 4) * torch.ones(4, requires_grad=True)
        ((h @ torch.ones(4, 1)).sum() + (h @ torch.ones(4, 1)).sum()).backward()  # h's gradient: two fresh mm's
    return probe.seen


def _summed_into(func: Any, args: Any, kwargs: Any) -> torch.Tensor | None:
    """The gradient an op sums into where eager autograd would sum in place, else None.

    The engine sums the gradients of a tensor several ops read as `old.add_(new)` when it holds the
    only reference to `old` and its storage (input_buffer.cpp, `can_accumulate_inplace`), else as
    `old + new`; for a tensor subclass, fake tensors included, always the latter. So a trace would
    count a gradient-sized block at every such sum (measured: one activation read by 2-4 layers, a
    trace 33% over eager's peak). Recognised as: `aten.add.Tensor` called by the engine itself (no
    Python frame between it and backward: not a custom Function's backward) with grad mode off (on,
    backward is recomputing a checkpointed forward), two dense tensors of one shape and dtype, and
    `old` referenced as a sole owner's gradient is (`_sole_owner`): a gradient also passed on to
    another input (`h + h`) or sharing its storage with a view is summed out of place in eager too.
    """
    if func is not _ADD or kwargs or len(args) != 2 or torch.is_grad_enabled():
        return None
    if torch._C._current_graph_task_id() == -1 or not _called_by_engine():
        return None
    old, new = args
    if not all(isinstance(t, torch.Tensor) and t.layout == torch.strided for t in (old, new)):
        return None
    if old.shape != new.shape or old.dtype != new.dtype or not old.is_contiguous():
        return None
    return old if _references(old) == _sole_owner() else None


class LiveBytes(TorchDispatchMode):
    """Tracks the bytes of live storages through a trace, and what was live at the peak."""

    def __init__(self, round_cuda: bool = False) -> None:
        super().__init__()
        _sole_owner()  # measured once, before any trace's modes are entered
        # round_cuda: also replay every allocation through the CUDA caching allocator's model
        self.cuda = CachingAllocator() if round_cuda else None
        self._cuda_workspace = False  # the cuBLASLt workspace is allocated (CUDA replay)
        self._fresh_zeros: int | None = None  # storage made by the last op if it made zeros (CUDA replay)
        self.current = self.peak = 0
        # which part of the run the trace is in ("build", "training", "evaluation": trace.py sets
        # it), and the part the peak was reached in; `train_peak` below counts "training" alone
        self.phase = self.peak_phase = "build"
        self._live: dict[int, tuple[int, int]] = {}  # storage address -> (serial, bytes)
        self._serial = 0
        self.transient_peak = self._transient_base = self._transient_top = 0
        # the training steps alone (model and optimizers built): where the CPU heap model looks
        self.train_peak = 0
        self._at_train_peak: dict[int, int] = {}
        self.heap_grad_bytes = 0  # one step's dense gradients, each under the CPU heap's mmap threshold
        # the training steps' churn of small blocks: the bytes of every storage under the virtual
        # device's mmap threshold they made (those come from glibc's heap there), and the steps
        self._stepping = False
        self._small_blocks = 0
        self.train_steps = 0
        self._update_serials: set[int] = set()  # storages made inside an optimizer step
        self._at_peak: dict[int, int] = {}  # serial -> bytes, live at the peak
        self._roles: dict[int, str] = {}  # serial -> parameters | gradients | optimizer_state
        # CUDA replay: storages in host memory (made under `on_host` and not moved to the device)
        self._host = False
        self._host_live: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        into = _summed_into(func, args, kwargs)
        out = func(*args, **(kwargs or {}))
        if into is not None and self._adopt(into, out):
            return out
        if self.cuda is None or self._host:
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self._track(t)
            return out
        self._replay_cuda(self.cuda, func, args, kwargs, out)
        return out

    def _replay_cuda(self, cuda: CachingAllocator, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """Track `out`, replaying the op's allocations as CUDA would make them."""
        name = getattr(func, "__name__", "")
        buffers = kernel_buffers(func, args, kwargs)
        if buffers.workspace and not self._cuda_workspace:
            cuda.malloc(buffers.workspace)  # allocated once, never freed
            self._cuda_workspace = True
        held = [cuda.malloc(n) for n in buffers.held]
        for key in [cuda.malloc(n) for n in buffers.scratch]:
            cuda.free(key)
        leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        # Autograd formulas such as index's backward, `zeros_like(self).index_put_(...)`, take an
        # out-of-place branch for tensor subclasses (fake tensors are one); eager CUDA writes into
        # the fresh zeros. So the result takes over that block instead of allocating its own.
        into = args[0] if name in SCATTERS and args and isinstance(args[0], torch.Tensor) else None
        zeros = self._fresh_zeros
        if into is not None and zeros is not None and into.untyped_storage()._cdata == zeros and len(leaves) == 1:
            self._track(leaves[0], 0)
            cuda.rekey(zeros, leaves[0].untyped_storage()._cdata)
        else:
            for i, t in enumerate(leaves):
                self._track(t, buffers.sizes.get(i))
        self._fresh_zeros = leaves[0].untyped_storage()._cdata if name in ZEROS and len(leaves) == 1 else None
        for key in reversed(held + [cuda.malloc(n) for n in buffers.after]):
            cuda.free(key)

    def _track(self, t: torch.Tensor, cuda_bytes: int | None = None) -> None:
        if t.is_sparse:  # a COO gradient: its memory is its indices and values
            self._track(t._indices())
            self._track(t._values())
            return
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._live or key in self._host_live:
            return  # already tracked (a view, an in-place result), or host memory
        if self._host:
            self._host_live.add(key)
            weakref.finalize(storage, self._host_live.discard, key)
            return
        size = storage.nbytes()
        if self._stepping and size < VIRTUAL_MMAP_THRESHOLD:
            self._small_blocks += size
        self._serial += 1
        self._live[key] = (self._serial, size)
        if self.cuda is not None:
            self.cuda.malloc(size if cuda_bytes is None else cuda_bytes, key)
        self.current += size
        self._transient_top = max(self._transient_top, self.current)
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.phase
            self._at_peak = dict(self._live.values())
        if self.phase == "training" and self.current > self.train_peak:
            self.train_peak = self.current
            self._at_train_peak = dict(self._live.values())
        weakref.finalize(storage, self._free, key)

    def _adopt(self, into: torch.Tensor, out: torch.Tensor) -> bool:
        """`out` takes over the storage of `into`, as eager autograd sums a gradient into the one it
        holds: no bytes are added. False where `into` is not tracked."""
        old, new = into.untyped_storage()._cdata, out.untyped_storage()._cdata
        if old not in self._live or new in self._live:
            return False
        self._live[new] = self._live.pop(old)
        if self.cuda is not None:
            self.cuda.rekey(old, new)
        self._fresh_zeros = None
        weakref.finalize(out.untyped_storage(), self._free, new)
        return True

    def _free(self, key: int) -> None:
        _, size = self._live.pop(key, (0, 0))
        self.current -= size
        if self.cuda is not None:
            self.cuda.free(key)

    @contextlib.contextmanager
    def on_host(self) -> Iterator[None]:
        """CUDA replay: what is made inside lives in host memory until `to_device` moves it."""
        self._host = True
        try:
            yield
        finally:
            self._host = False

    def to_device(self, t: torch.Tensor) -> None:
        """Count host tensor `t` as copied to the device."""
        self._host_live.discard(t.untyped_storage()._cdata)
        self._track(t)

    def begin_transient(self) -> None:
        """Start watching how far live bytes rise above their level now (forward and backward)."""
        self._transient_base = self.current
        self._transient_top = self.current

    def end_transient(self) -> None:
        self.transient_peak = max(self.transient_peak, self._transient_top - self._transient_base)

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        """Note the storages made inside (an optimizer step's temporaries and its new state)."""
        first = self._serial
        yield
        self._update_serials.update(range(first + 1, self._serial + 1))

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """One training step (forward, backward, optimizer step): counted for `small_block_churn`."""
        self._stepping = True
        try:
            yield
        finally:
            self._stepping = False
            self.train_steps += 1

    def small_block_churn(self) -> int:
        """Bytes of storages under the virtual device's mmap threshold made per training step
        (forward, backward and optimizer step), a mean over the traced steps."""
        return self._small_blocks // max(1, self.train_steps)

    def train_activations(self, *, heap_only: bool = False) -> int:
        """Bytes live at the training steps' peak that are neither parameters, gradients nor
        optimizer state, nor an optimizer step's temporaries: the forward/backward activations.
        `heap_only`: only the blocks under the pinned CPU heap's mmap threshold (larger ones are
        mapped and returned on free)."""
        return sum(
            n
            for k, n in self._at_train_peak.items()
            if k not in self._roles and k not in self._update_serials and (not heap_only or n < HEAP_MMAP_THRESHOLD)
        )

    def mark(self, model: torch.nn.Module, opts: Any) -> None:
        """Record which live storages are parameters, gradients and optimizer state."""
        # dense gradients small enough for the pinned CPU heap, each under its mmap threshold
        self.heap_grad_bytes = sum(
            g.untyped_storage().nbytes()
            for g in (p.grad for p in model.parameters())
            if g is not None and not g.is_sparse and g.untyped_storage().nbytes() < HEAP_MMAP_THRESHOLD
        )
        for p in model.parameters():
            self._role(p, "parameters")
            if p.grad is not None:
                self._role(p.grad, "gradients")
        for b in model.buffers():
            self._role(b, "parameters")
        for opt in opts.all:
            for state in opt.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        self._role(value, "optimizer_state")

    def _role(self, t: torch.Tensor, role: str) -> None:
        if t.is_sparse:
            self._role(t._indices(), role)
            self._role(t._values(), role)
            return
        entry = self._live.get(t.untyped_storage()._cdata)
        if entry is not None:
            self._roles.setdefault(entry[0], role)

    def classify(self) -> dict[str, int]:
        parts = dict.fromkeys(PARTS[:-1], 0)
        for serial, size in self._at_peak.items():
            parts[self._roles.get(serial, "activations")] += size
        return parts
