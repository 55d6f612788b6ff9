"""Predict a configuration's peak memory before it runs: `estimate(cfg)`.

The prediction is the peak of a fake-tensor trace of the loop's own step (trace.py, live_bytes.py),
plus what the device holds beyond the traced tensors (overhead.py: a calibrated model on CPU, a
replay through the caching allocator's model on CUDA). How close it comes is measured by
bench/estimator.py (figures in bench/RESULTS.md).

The breakdown attributes the live bytes at the traced peak to parameters, gradients, optimizer
state and activations; `other` is the overhead model, so the parts sum to `peak_bytes`, and
`overhead` names its terms (runtime, heap holes and rounding, the allocator: overhead.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from elastune.config import RunConfig
from elastune.memory.live_bytes import PARTS
from elastune.memory.overhead import other_parts
from elastune.memory.trace import distinct_rows, trace
from elastune.training.precision import resolve_device

__all__ = ["PARTS", "Estimate", "distinct_rows", "estimate", "trace"]


@dataclass(frozen=True)
class Estimate:
    peak_bytes: int  # the prediction of the measured peak of `kind`
    kind: str  # which measured figure it predicts: "cpu_rss_hwm" or "cuda_reserved"
    breakdown: dict[str, int]  # PARTS -> bytes; sums to peak_bytes
    traced_peak_bytes: int  # live tensor bytes at the traced high-water mark
    transient_peak_bytes: int  # most bytes forward + backward hold at once beyond the model's
    seconds: float  # how long the estimate took
    overhead: dict[str, int]  # breakdown["other"] by its named terms (memory/overhead.py `other_parts`)

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimated_peak_bytes": self.peak_bytes,
            "kind": self.kind,
            "traced_peak_bytes": self.traced_peak_bytes,
            "breakdown": dict(self.breakdown),
            "overhead": dict(self.overhead),
            "seconds": round(self.seconds, 3),
        }


def estimate(cfg: RunConfig, device: torch.device | None = None, *, virtual: bool = False) -> Estimate:
    """Predicted peak memory of training `cfg` (as `elastune train` would measure it; with
    `virtual`, on CPU, as EDO's virtual device measures it)."""
    started = time.perf_counter()
    device = device or resolve_device(cfg.device)
    cuda = device.type == "cuda"
    tracker = trace(cfg, cuda)
    parts = tracker.classify()
    traced = tracker.peak
    overhead = other_parts(cfg, tracker, cuda=cuda, virtual=virtual)
    breakdown = {**parts, "other": sum(overhead.values())}
    return Estimate(
        peak_bytes=sum(breakdown.values()),
        kind="cuda_reserved" if cuda else "cpu_rss_hwm",
        breakdown=breakdown,
        traced_peak_bytes=traced,
        transient_peak_bytes=tracker.transient_peak,
        seconds=time.perf_counter() - started,
        overhead=overhead,
    )
