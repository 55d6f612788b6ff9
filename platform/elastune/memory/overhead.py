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
  cannot see); a share of the forward/backward activations live at the training steps' peak again
  (freed activation blocks leave holes the heap does not reuse at once; an optimizer step's
  temporaries, the same sizes every step, refill their own; where the build or the evaluation reach
  a higher traced peak without those holes, the higher one); a multiple of the dense gradients that
  are heap-sized (each under 32 MiB: a dense-Adam table's gradient is freed and re-made every step,
  and small blocks settle in its hole); and a share of the traced bytes (page and chunk rounding).
  Configs whose embedding rows take a row-wise sparse optimizer get an offset, fitted, not derived
  (those configs have no dense table gradient or dense Adam step; which of their parts accounts for
  it is not isolated). The five coefficients are fitted by bench/fit_overhead.py on the fit half of
  bench/estimator.py's zoo only (six workloads; the other six, held out, are the check). Identical
  pinned runs still
  differ by up to ~15% on small configs (a block of the size of the table's gradient finds a hole or
  extends the heap, depending on the order of untraced allocations), so small configs carry that
  spread. The holes are modelled, not replayed: a best-fit replay of the traced allocations settles
  at once with almost no fragmentation, unlike glibc. Tables over 32 MiB dominate large configs and
  are predicted within a few percent by the trace alone.
- Virtual device (`virtual=True`: what EDO's `VirtualProbe` measures on CPU). That probe maps
  every block of 256 KiB or more and returns it on free, and counts anonymous memory only (the
  pages of code a first run faults in are left out), so its figure follows the live tensors: a
  run's peak is the traced peak plus `runtime` (torch's runtime, Python objects made on first use:
  a fitted constant) plus `small_block_heap`: blocks under the threshold come from glibc's heap,
  which keeps what their churn fragments, so a run holds more the more small-block bytes a step
  makes (measured: a checkpointed GPT-2 at micro 8, 29 MiB of them a step, keeps 12-15 MiB beyond
  its tensors between steps; at micro 32, 2 MiB a step, 5-7). The trace counts that churn
  (`LiveBytes.small_block_churn`); the share of it held is fitted with the runtime on the zoo's fit
  half (bench/fit_overhead.py), and churn beyond the most the fit half made is priced as that most
  (nothing was fitted past it; the heap's share is not known to keep rising there). Workloads
  still spread around the model by a few MiB (SASRec's runs hold 1-3 MiB over their tensors, less
  than the runtime: which of its parts differs is not isolated). Where bf16 matmuls run
  through oneDNN (a CPU with AVX-512), another 6 MiB: oneDNN keeps each matmul shape's primitive,
  with its scratch, in a cache (measured: disabling the cache
  takes 5-6 MiB off a bf16 run, ONEDNN_PRIMITIVE_CACHE_CAPACITY=0). fp16 takes the same path on a
  CPU with AVX-512-FP16 or AMX, priced the same but not measured (this one has neither).
- CUDA (`cuda_reserved`, the caching allocator's reserved peak above the probe's baseline): the
  trace's allocations and frees, with what CUDA kernels allocate beyond them (cuda_kernels.py), are
  replayed in order through a model of PyTorch's caching allocator (cuda_allocator.py); its reserved
  high-water mark is the prediction, so `other` is allocator rounding and fragmentation plus those
  kernel buffers. The replay starts where a run's device memory starts: the model is built on the
  host, as `train` builds it, and only what `.to(device)` moves enters the replay (trace.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from elastune.config import RunConfig
from elastune.memory.data_stream import reader_bytes
from elastune.memory.live_bytes import LiveBytes

__all__ = [
    "CPU_FIT",
    "HELD_OUT",
    "SCREEN_MARGIN",
    "VIRTUAL_FIT",
    "VIRTUAL_ONEDNN",
    "CpuFit",
    "CpuInputs",
    "HeldOutError",
    "VirtualFit",
    "cpu_inputs",
    "cpu_other",
    "cpu_other_parts",
    "onednn_matmuls",
    "other_parts",
    "virtual_other_parts",
]

_MiB = 2**20
VIRTUAL_ONEDNN = 6 * _MiB  # and oneDNN's primitive cache, where bf16 matmuls run through oneDNN (measured)


@dataclass(frozen=True)
class CpuInputs:
    """What the CPU heap model reads from a trace (bench/estimator.py records them per config, and
    bench/fit_overhead.py refits the coefficients from them)."""

    traced: int  # the traced peak
    train_peak: int  # the traced peak of the training steps alone
    heap_activations: int  # forward/backward activations live at train_peak, in heap-sized blocks
    heap_gradients: int  # one step's dense gradients, each a heap-sized block
    row_optimizer: bool  # embedding rows updated by a row-wise sparse optimizer

    def to_dict(self) -> dict[str, int | bool]:
        return asdict(self)


@dataclass(frozen=True)
class CpuFit:
    """The CPU heap model's coefficients (see the module docstring)."""

    fixed: float  # bytes: runtime, autograd bookkeeping, the data stream, kernels' scratch
    row_optimizer: float  # bytes added where a row-wise sparse optimizer updates the rows (fitted)
    activation_share: float  # holes freed activation blocks leave in the heap, per activation byte
    traced_share: float  # page and chunk rounding of everything traced
    gradient_share: float  # dense heap-sized gradients: their holes in the heap


# least squares over the zoo's fit half (bench/fit_overhead.py; record estimator-zoo-refit in bench/RESULTS.md)
CPU_FIT = CpuFit(
    fixed=13.1 * _MiB, row_optimizer=3.6 * _MiB, activation_share=0.66, traced_share=0.0622, gradient_share=1.354
)


@dataclass(frozen=True)
class HeldOutError:
    """How far the estimator's predictions fell from measured peaks on the zoo's held-out workloads,
    under the constants above (bench/fit_overhead.py; record estimator-zoo-refit): the error to
    expect on a model the constants were never fitted on."""

    band: float  # the probe's target band (±10% on the virtual device, ±15% on the CPU probe)
    within: int  # configs predicted within the band
    configs: int
    median: float  # median |error|
    worst_under: float  # the most a config was measured above its prediction (negative: under-predicted)


@dataclass(frozen=True)
class VirtualFit:
    """The virtual device's overhead model's constants (see the module docstring)."""

    runtime: float  # bytes: torch's runtime, Python objects made on first use
    churn_share: float  # heap bytes held per byte of small blocks a training step makes
    churn_cap: float  # bytes a step: the most small-block churn of the fit half; more is priced as this


# least squares of the relative error over the zoo's fit half (bench/fit_overhead.py; record
# estimator-zoo-refit in bench/RESULTS.md)
VIRTUAL_FIT = VirtualFit(runtime=3.84 * _MiB, churn_share=0.3982, churn_cap=26.80 * _MiB)


def virtual_other_parts(churn: int, fit: VirtualFit = VIRTUAL_FIT) -> dict[str, float]:
    """The virtual device's terms beyond the traced peak, oneDNN's cache aside: `runtime` and the
    heap's share of a step's small-block churn (`small_block_heap`)."""
    return {"runtime": fit.runtime, "small_block_heap": fit.churn_share * min(churn, fit.churn_cap)}


# per probe kind; CUDA has no held-out figures yet (the zoo has not run on a GPU)
HELD_OUT: dict[str, HeldOutError] = {
    "cpu_rss_hwm": HeldOutError(band=0.15, within=20, configs=24, median=0.080, worst_under=-0.282),
    "virtual": HeldOutError(band=0.10, within=23, configs=24, median=0.013, worst_under=-0.041),
}

# A sweep screens a proposal with its prediction times this factor: the most a config of the fit
# half was measured above its prediction (bench/fit_overhead.py). The CPU probe's is wide (a
# checkpointed GPT-2 measured 1.64x its prediction: recompute churns the heap, which the model does
# not see); the virtual device's, digits with row-wise tables at micro 512 (1.12x); CUDA: 1.0, not
# measured on the zoo.
SCREEN_MARGIN: dict[str, float] = {"cpu_rss_hwm": 1.64, "virtual": 1.12, "cuda_reserved": 1.0}


def cpu_inputs(cfg: RunConfig, tracker: LiveBytes) -> CpuInputs:
    return CpuInputs(
        traced=tracker.peak,
        train_peak=tracker.train_peak,
        heap_activations=tracker.train_activations(heap_only=True),
        heap_gradients=tracker.heap_grad_bytes,
        row_optimizer=cfg.optimizer.sparse != "adam",
    )


def cpu_other_parts(x: CpuInputs, fit: CpuFit = CPU_FIT) -> dict[str, float]:
    """The CPU heap model's terms, each named (`elastune estimate` shows them under `other`):
    `runtime` (the fitted fixed amount, with the row-wise optimizer's fitted offset), the heap's
    `activation_holes` and `gradient_holes`, and `heap_rounding`."""
    # Activation holes belong to the training steps: where the build's scratch (int8's fp32 init
    # chunks) or the evaluation reach a higher traced peak, the heap's top is the higher of the two.
    with_holes = max(x.traced, x.train_peak + fit.activation_share * x.heap_activations)
    return {
        "runtime": fit.fixed + (fit.row_optimizer if x.row_optimizer else 0),
        "activation_holes": with_holes - x.traced,
        "heap_rounding": fit.traced_share * x.traced,
        "gradient_holes": fit.gradient_share * x.heap_gradients,
    }


def cpu_other(x: CpuInputs, fit: CpuFit = CPU_FIT) -> int:
    """The CPU heap model: resident bytes at the peak beyond the traced peak."""
    return int(sum(cpu_other_parts(x, fit).values()))


def other_parts(cfg: RunConfig, tracker: LiveBytes, *, cuda: bool, virtual: bool) -> dict[str, int]:
    """What the device holds at its peak beyond `tracker`'s traced peak (see the module docstring),
    by its named terms:

    - CPU: `runtime` (fitted: torch's runtime, autograd bookkeeping, the data stream, kernels'
      scratch; lower with a row-wise sparse optimizer), `activation_holes` and `gradient_holes` (heap
      blocks freed and not yet reused), `heap_rounding` (page and chunk rounding), and where a file
      reader holds more than the synthetic stream, `data_reader` (data_stream.py, measured, not fitted;
      the virtual device's and CUDA's host memory is not measured with one);
    - virtual device: `runtime` and `small_block_heap` (fitted), and `onednn_cache` where bf16 /
      fp16 matmuls run through oneDNN (measured);
    - CUDA: `allocator` (the caching allocator's rounding and fragmentation, and what kernels
      allocate beyond the traced tensors, from the replay).
    """
    if cuda:
        assert tracker.cuda is not None
        return {"allocator": max(0, tracker.cuda.peak_reserved - tracker.peak)}
    if virtual:
        virtual_terms = {name: int(v) for name, v in virtual_other_parts(tracker.small_block_churn()).items()}
        return virtual_terms | ({"onednn_cache": VIRTUAL_ONEDNN} if onednn_matmuls(cfg) else {})
    terms = cpu_other_parts(cpu_inputs(cfg, tracker))
    parts = {name: int(value) for name, value in terms.items()}
    parts["runtime"] += int(sum(terms.values())) - sum(parts.values())  # rounded, they sum to the model's figure
    reader = reader_bytes(cfg)  # a file reader's host memory (data_stream.py): 0 for the synthetic stream
    return parts | ({"data_reader": reader} if reader else {})


def onednn_matmuls(cfg: RunConfig) -> bool:
    """Whether this CPU's torch runs `cfg`'s matmuls through oneDNN (bf16 with AVX-512, fp16 with
    AVX-512-FP16 or AMX); elsewhere torch's own kernels run them, with no primitive cache."""
    check = {"bf16": "_is_mkldnn_bf16_supported", "fp16": "_is_mkldnn_fp16_supported"}.get(cfg.precision)
    if check is None or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(getattr(torch.ops.mkldnn, check)())
    except (AttributeError, RuntimeError):  # a build without these ops runs no oneDNN matmuls
        return False
