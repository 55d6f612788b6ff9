"""The overhead model: what a device holds beyond the traced peak (the breakdown's `other`).

The traced peak counts tensors only. What a device really holds is more, and differs per device;
the model below adds it. The CPU coefficients are calibrated against measured peaks
(bench/estimator.py, figures in bench/RESULTS.md); the virtual device's constant is measured; the
CUDA figure is derived, not fitted.

- CPU (`cpu_rss_hwm`, resident-set high-water mark). The probe pins glibc's malloc
  (training/probe.py, `pin_heap`): blocks under 32 MiB come from a heap that is never trimmed, larger
  ones are mapped and returned on free. Left adaptive, glibc makes the same run's peak bimodal, which
  no model can predict. In the pinned regime the resident peak exceeds the traced peak by: a fixed
  amount (runtime, autograd bookkeeping, the data stream, kernels' own scratch buffers the trace
  cannot see); about the forward/backward activations live at the training steps' peak again (freed
  activation blocks leave holes the heap does not reuse at once; an optimizer step's temporaries, the
  same sizes every step, refill their own; where the build or the evaluation reach a higher traced
  peak without those holes, the higher one); 0.75x the dense gradients that are heap-sized (each
  under 32 MiB: a dense-Adam table's gradient is freed and re-made every step, and small blocks
  settle in its hole); and ~1% of the traced bytes (page and chunk rounding).
  Configs whose embedding rows take a row-wise sparse optimizer sit ~21 MiB lower than the fixed
  amount: an offset fitted, not derived (those configs have no dense table gradient or dense Adam
  step; which of their parts accounts for it is not isolated). The five coefficients are a
  least-squares fit to bench/estimator.py's engine and strategy configs. Identical pinned runs still
  differ by up to ~15% on small configs (a block of the size of the table's gradient finds a hole or
  extends the heap, depending on the order of untraced allocations), so small configs carry that
  spread. The holes are modelled, not replayed: a best-fit replay of the traced allocations settles
  at once with almost no fragmentation, unlike glibc. Tables over 32 MiB dominate large configs and
  are predicted within a few percent by the trace alone.
- Virtual device (`virtual=True`: what EDO's `VirtualProbe` measures on CPU). That probe maps
  every block of 256 KiB or more and returns it on free, so its resident set follows the live
  tensors: a step's peak is the traced peak plus a nearly constant 7 MiB (runtime, small blocks),
  measured within ±3 MiB over bench/edo.py's 16 shapes.
- CUDA (`cuda_reserved`, the caching allocator's reserved peak above the probe's baseline): the
  trace's allocations and frees, with what CUDA kernels allocate beyond them (cuda_kernels.py), are
  replayed in order through a model of PyTorch's caching allocator (cuda_allocator.py); its reserved
  high-water mark is the prediction, so `other` is allocator rounding and fragmentation plus those
  kernel buffers. The replay starts where a run's device memory starts: the model is built on the
  host, as `train` builds it, and only what `.to(device)` moves enters the replay (trace.py).
"""

from __future__ import annotations

from elastune.config import RunConfig
from elastune.memory.live_bytes import LiveBytes

__all__ = ["other_bytes"]

_MiB = 2**20
# CPU: least squares over bench/estimator.py's configs (figures in bench/RESULTS.md)
_CPU_FIXED = 31.5 * _MiB  # runtime, autograd bookkeeping, the data stream, kernels' scratch
_CPU_ROW_OPTIMIZER_OFFSET = -20.8 * _MiB  # rows updated by a row-wise sparse optimizer (fitted; see above)
_CPU_ACTIVATION_SHARE = 1.014  # holes freed activation blocks leave in the heap
_CPU_TRACED_SHARE = 0.0106  # page and chunk rounding of everything traced
_CPU_GRADIENT_SHARE = 0.747  # dense gradients under the mmap threshold: their holes in the heap
_VIRTUAL_FIXED = 7 * _MiB  # the virtual device: runtime and blocks under its 256 KiB threshold


def other_bytes(cfg: RunConfig, tracker: LiveBytes, *, cuda: bool, virtual: bool) -> int:
    """What the device holds at its peak beyond `tracker`'s traced peak (see the module docstring)."""
    traced = tracker.peak
    if cuda:
        assert tracker.cuda is not None
        return max(0, tracker.cuda.peak_reserved - traced)
    if virtual:
        return _VIRTUAL_FIXED
    # forward/backward activations live at the training steps' peak (the optimizer step's
    # temporaries, the same sizes every step, refill their own holes; the model's init chunks
    # come before training); dense gradients each under the pinned mmap threshold (larger ones
    # are mapped and returned on free, leaving no hole). The holes belong to the training
    # steps: where the build's scratch (int8's fp32 init chunks) or the evaluation reach a
    # higher traced peak, the heap's top is the higher of the two.
    activations = tracker.train_activations()
    with_holes = max(traced, tracker.train_peak + _CPU_ACTIVATION_SHARE * activations)
    fixed = _CPU_FIXED + (_CPU_ROW_OPTIMIZER_OFFSET if cfg.optimizer.sparse != "adam" else 0)
    return int(
        fixed + (with_holes - traced) + _CPU_TRACED_SHARE * traced + _CPU_GRADIENT_SHARE * tracker.heap_grad_bytes
    )
