"""Predict a configuration's peak memory before it runs: `estimate(cfg)`.

The prediction is the peak of a fake-tensor trace of the loop's own step (trace.py, live_bytes.py),
plus what the device holds beyond the traced tensors (overhead.py: a calibrated model on CPU, a
replay through the caching allocator's model on CUDA). How close it comes is measured by
bench/estimator.py (figures in bench/RESULTS.md).

The breakdown attributes the live bytes at the traced peak to parameters, gradients, optimizer
state and activations; `other` is the overhead model, so the parts sum to `peak_bytes`, and
`overhead` names its terms (runtime, heap holes and rounding, the allocator: overhead.py).

How far off to expect it: `expected_error` is what the estimator scored on the benchmark's held-out
workloads (models no constant was fitted on), and `upper_bound_bytes` pads the prediction by the
worst under-prediction on the fit set: sweeps screen with the bound (overhead.py `SCREEN_MARGIN`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from elastune.config import RunConfig
from elastune.memory.live_bytes import PARTS
from elastune.memory.overhead import HELD_OUT, SCREEN_MARGIN, HeldOutError, other_parts
from elastune.memory.trace import distinct_rows, trace
from elastune.training.precision import resolve_device

__all__ = ["PARTS", "Estimate", "distinct_rows", "estimate", "trace"]


@dataclass(frozen=True)
class Estimate:
    peak_bytes: int  # the prediction of the measured peak of `kind`
    kind: str  # which measured figure it predicts: "cpu_rss_hwm" or "cuda_reserved"
    breakdown: dict[str, int]  # PARTS -> bytes; sums to peak_bytes
    traced_peak_bytes: int  # live tensor bytes at the traced high-water mark
    peak_phase: str  # where the trace reached that mark: "build", "training" or "evaluation"
    transient_peak_bytes: int  # most bytes forward + backward hold at once beyond the model's
    seconds: float  # how long the estimate took
    overhead: dict[str, int]  # breakdown["other"] by its named terms (memory/overhead.py `other_parts`)
    # prediction x the most a config of the estimator's fit set was measured above its prediction
    # (memory/overhead.py SCREEN_MARGIN): what a sweep screens proposals with
    upper_bound_bytes: int
    expected_error: HeldOutError | None  # measured on workloads outside the fit set; None: not measured

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimated_peak_bytes": self.peak_bytes,
            "kind": self.kind,
            "traced_peak_bytes": self.traced_peak_bytes,
            "peak_phase": self.peak_phase,
            "breakdown": dict(self.breakdown),
            "overhead": dict(self.overhead),
            "upper_bound_bytes": self.upper_bound_bytes,
            "expected_error": None if self.expected_error is None else asdict(self.expected_error),
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
    peak = sum(breakdown.values())
    kind = "cuda_reserved" if cuda else "cpu_rss_hwm"
    probe = "virtual" if virtual and not cuda else kind  # the keys of SCREEN_MARGIN and HELD_OUT
    return Estimate(
        peak_bytes=peak,
        kind=kind,
        breakdown=breakdown,
        traced_peak_bytes=traced,
        peak_phase=tracker.peak_phase,
        transient_peak_bytes=tracker.transient_peak,
        seconds=time.perf_counter() - started,
        overhead=overhead,
        upper_bound_bytes=int(peak * SCREEN_MARGIN[probe]),
        expected_error=HELD_OUT.get(probe),
    )
