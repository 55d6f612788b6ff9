"""Live bytes through a fake-tensor trace: a dispatch mode that watches every storage the trace
creates and frees, keeps the high-water mark (the *traced peak*) and what was live at it, and, for
a CUDA prediction, replays each allocation and free through the caching allocator's model.

The breakdown attributes the live bytes at the traced peak to parameters, gradients, optimizer
state and activations (everything else the step holds: activations, temporaries, the batch).

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
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from elastune.memory.cuda_allocator import CachingAllocator
from elastune.memory.cuda_kernels import SCATTERS, ZEROS, kernel_buffers
from elastune.training.probe import HEAP_MMAP_THRESHOLD

__all__ = ["PARTS", "LiveBytes"]

PARTS = ("parameters", "gradients", "optimizer_state", "activations", "other")


class LiveBytes(TorchDispatchMode):
    """Tracks the bytes of live storages through a trace, and what was live at the peak."""

    def __init__(self, round_cuda: bool = False) -> None:
        super().__init__()
        # round_cuda: also replay every allocation through the CUDA caching allocator's model
        self.cuda = CachingAllocator() if round_cuda else None
        self._cuda_workspace = False  # the cuBLASLt workspace is allocated (CUDA replay)
        self._fresh_zeros: int | None = None  # storage made by the last op if it made zeros (CUDA replay)
        self.current = self.peak = 0
        self._live: dict[int, tuple[int, int]] = {}  # storage address -> (serial, bytes)
        self._serial = 0
        self.transient_peak = self._transient_base = self._transient_top = 0
        # the training steps alone (model and optimizers built): where the CPU heap model looks
        self.training = False
        self.train_peak = 0
        self._at_train_peak: dict[int, int] = {}
        self.heap_grad_bytes = 0  # one step's dense gradients, each under the CPU heap's mmap threshold
        self._update_serials: set[int] = set()  # storages made inside an optimizer step
        self._at_peak: dict[int, int] = {}  # serial -> bytes, live at the peak
        self._roles: dict[int, str] = {}  # serial -> parameters | gradients | optimizer_state
        # CUDA replay: storages in host memory (made under `on_host` and not moved to the device)
        self._host = False
        self._host_live: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
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
        self._serial += 1
        self._live[key] = (self._serial, size)
        if self.cuda is not None:
            self.cuda.malloc(size if cuda_bytes is None else cuda_bytes, key)
        self.current += size
        self._transient_top = max(self._transient_top, self.current)
        if self.current > self.peak:
            self.peak = self.current
            self._at_peak = dict(self._live.values())
        if self.training and self.current > self.train_peak:
            self.train_peak = self.current
            self._at_train_peak = dict(self._live.values())
        weakref.finalize(storage, self._free, key)

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
