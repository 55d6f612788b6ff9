"""Predict a configuration's peak memory before it runs.

How: build the model and run two full training steps (forward and backward over every
micro-batch, then the optimizer step), then one evaluation batch, all under `FakeTensorMode`.
Fake tensors carry shapes and dtypes but no data, so nothing is allocated and even the real-size
Criteo tables (tens of GB) trace in about a second. A dispatch mode watches every storage the
trace creates and frees and keeps the high-water mark of live bytes: the *traced peak*. Two steps,
because optimizer state is created lazily in the first and is resident through the second.

The traced peak counts tensors only. What a device really holds is more, and differs per device;
the overhead model below adds it and is calibrated against measured peaks (bench/estimator.py,
figures in bench/RESULTS.md):

- CPU (`cpu_rss_hwm`, resident-set high-water mark): glibc serves blocks under an adaptive
  threshold (at most 32 MiB) from heap arenas that it does not hand back at once, and larger ones
  with mmap, returned on free. So the resident peak exceeds the traced peak by a fixed amount
  (runtime, autograd bookkeeping, the data stream's chunk cache, heap slack), about the step's
  activations again (their freed heap blocks stay resident), and, in fp32 runs, about one more
  copy of the largest block when it is small enough for the heap (a table under 32 MiB: its
  gradient and optimizer temporaries leave holes). The three coefficients are a least-squares fit
  to the highest of three fresh 50-step runs per config (bench/estimator.py). Tables over 32 MiB
  dominate large configs and are predicted within a few percent by the trace alone; small configs
  carry the model's error and the run-to-run spread of the resident peak (up to ±15% between
  identical ~150 MiB runs; see bench/RESULTS.md).
- CUDA (`cuda_reserved`, the caching allocator's reserved peak): the allocator rounds every block
  up (512 B; 2 MiB segments for blocks over 1 MiB) and keeps freed blocks cached, which is modelled
  by rounding each traced allocation and a share of fragmentation. Not yet calibrated on a GPU.

The breakdown attributes the live bytes at the traced peak to parameters, gradients, optimizer
state and activations (everything else the step holds: activations, temporaries, the batch);
`other` is the overhead model, so the parts sum to `peak_bytes`.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from elastune.config import RunConfig
from elastune.training.precision import autocast_for, resolve_device
from elastune.workloads import build_workload
from elastune.workloads.data import NUM_DENSE, Batch

__all__ = ["PARTS", "Estimate", "estimate"]

PARTS = ("parameters", "gradients", "optimizer_state", "activations", "other")

# -- the overhead model (least squares over bench/estimator.py's configs; see bench/RESULTS.md) --
_MiB = 2**20
# glibc (64-bit) serves a block from the heap once its adaptive mmap threshold has risen past the
# block's size, which it does up to this cap; larger blocks are always mmapped and returned on free.
_GLIBC_MMAP_MAX = 32 * _MiB
_CPU_FIXED = 47.5 * _MiB  # runtime, autograd bookkeeping, the data stream's chunk cache, heap slack
_CPU_ACTIVATION_SHARE = 1.12  # heap blocks of freed activations that glibc keeps resident
_CPU_HEAP_BLOCK_SHARE = 0.88  # fp32 runs: one more copy of the largest block when it is heap-sized
_CUDA_SHARE = 0.05  # cached, fragmented blocks (uncalibrated: no GPU measured yet)
_CUDA_FIXED = 8 * _MiB


@dataclass(frozen=True)
class Estimate:
    peak_bytes: int  # the prediction of the measured peak of `kind`
    kind: str  # which measured figure it predicts: "cpu_rss_hwm" or "cuda_reserved"
    breakdown: dict[str, int]  # PARTS -> bytes; sums to peak_bytes
    traced_peak_bytes: int  # live tensor bytes at the traced high-water mark
    transient_peak_bytes: int  # most bytes forward + backward hold at once beyond the model's
    seconds: float  # how long the estimate took

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimated_peak_bytes": self.peak_bytes,
            "kind": self.kind,
            "traced_peak_bytes": self.traced_peak_bytes,
            "breakdown": dict(self.breakdown),
            "seconds": round(self.seconds, 3),
        }


def estimate(cfg: RunConfig, device: torch.device | None = None) -> Estimate:
    """Predicted peak memory of training `cfg` (as `elastune train` would measure it)."""
    started = time.perf_counter()
    device = device or resolve_device(cfg.device)
    cuda = device.type == "cuda"
    tracker = trace(cfg, cuda)
    parts = tracker.classify()
    traced = tracker.peak
    if cuda:
        other = int(traced * _CUDA_SHARE) + _CUDA_FIXED + (tracker.rounded_peak - traced)
    else:
        activations = max(0, tracker.transient_peak - tracker.grad_bytes)
        heap_block = tracker.largest_block if tracker.largest_block < _GLIBC_MMAP_MAX else 0
        if cfg.precision != "fp32":
            heap_block = 0  # measured: low-precision runs keep their heap compact
        other = int(_CPU_FIXED + _CPU_ACTIVATION_SHARE * activations + _CPU_HEAP_BLOCK_SHARE * heap_block)
    breakdown = {**parts, "other": other}
    return Estimate(
        peak_bytes=sum(breakdown.values()),
        kind="cuda_reserved" if cuda else "cpu_rss_hwm",
        breakdown=breakdown,
        traced_peak_bytes=traced,
        transient_peak_bytes=tracker.transient_peak,
        seconds=time.perf_counter() - started,
    )


def trace(cfg: RunConfig, cuda: bool = False) -> _LiveBytes:
    """Run the fake-tensor trace of `cfg` and return the tracker with its figures."""
    tracker = _LiveBytes(round_cuda=cuda)
    # The trace runs on CPU fake tensors whatever the device: sizes and dtypes are the same, and
    # it needs no GPU (a driver can estimate for a cluster it is not part of).
    with FakeTensorMode(allow_non_fake_inputs=False), tracker:
        _trace_training(cfg, tracker)
    return tracker


def _trace_training(cfg: RunConfig, tracker: _LiveBytes) -> None:
    """What `training.loop.train` allocates, step for step, on fake tensors."""
    from elastune.training.loop import forward_backward  # the loop imports this module lazily
    from elastune.training.optim import Optimizers

    workload = build_workload(cfg)
    model = workload.build_model()
    opts = Optimizers(model, cfg.optimizer)
    autocast = autocast_for(cfg.precision, torch.device("cpu"))
    scaler = torch.amp.GradScaler("cpu", enabled=False)  # unscaling is in place: no extra bytes
    model.train()
    for _ in range(2):
        batch = _fake_batch(cfg.batch.effective, cfg.data.pooling, len(workload.table_sizes))
        tracker.begin_transient()
        forward_backward(model, workload, batch, cfg.batch.micro, autocast, scaler)
        tracker.end_transient()
        opts.step(scaler)
        tracker.mark(model, opts)  # grads and state are all alive here
        opts.zero_grad()
        del batch
    model.eval()
    with torch.no_grad(), autocast():
        eval_batch = _fake_batch(cfg.eval.batch or cfg.batch.micro, cfg.data.pooling, len(workload.table_sizes))
        workload.predict(model, eval_batch)


def _fake_batch(n: int, pooling: int, num_sparse: int) -> Batch:
    return Batch(
        torch.empty(n, NUM_DENSE),
        torch.zeros(n, num_sparse, pooling, dtype=torch.int64),
        torch.empty(n),
    )


class _LiveBytes(TorchDispatchMode):
    """Tracks the bytes of live storages through a trace, and what was live at the peak."""

    def __init__(self, round_cuda: bool = False) -> None:
        super().__init__()
        self.round_cuda = round_cuda
        self.current = self.peak = 0
        self.rounded_current = self.rounded_peak = 0
        self._live: dict[int, tuple[int, int, int]] = {}  # storage address -> (serial, bytes, rounded)
        self._serial = 0
        self.transient_peak = self._transient_base = self._transient_top = 0
        self.grad_bytes = 0  # bytes of all gradients of one step (set by `mark`)
        self.largest_block = 0  # the largest single allocation of the trace
        self._at_peak: dict[int, int] = {}  # serial -> bytes, live at the peak
        self._roles: dict[int, str] = {}  # serial -> parameters | gradients | optimizer_state

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        if t.is_sparse:  # a COO gradient: its memory is its indices and values
            self._track(t._indices())
            self._track(t._values())
            return
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._live:
            return
        size = storage.nbytes()
        rounded = _cuda_block(size) if self.round_cuda else size
        self._serial += 1
        self._live[key] = (self._serial, size, rounded)
        self.current += size
        self.rounded_current += rounded
        self.rounded_peak = max(self.rounded_peak, self.rounded_current)
        self.largest_block = max(self.largest_block, size)
        self._transient_top = max(self._transient_top, self.current)
        if self.current > self.peak:
            self.peak = self.current
            self._at_peak = {serial: n for serial, n, _ in self._live.values()}
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        _, size, rounded = self._live.pop(key, (0, 0, 0))
        self.current -= size
        self.rounded_current -= rounded

    def begin_transient(self) -> None:
        """Start watching how far live bytes rise above their level now (forward and backward)."""
        self._transient_base = self.current
        self._transient_top = self.current

    def end_transient(self) -> None:
        self.transient_peak = max(self.transient_peak, self._transient_top - self._transient_base)

    def mark(self, model: torch.nn.Module, opts: Any) -> None:
        """Record which live storages are parameters, gradients and optimizer state."""
        self.grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
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


def _cuda_block(size: int) -> int:
    """Bytes the CUDA caching allocator reserves for one allocation of `size` bytes."""
    if size <= 2**20:
        return max(512, -(-size // 512) * 512)
    return -(-size // (2 * 2**20)) * (2 * 2**20)
