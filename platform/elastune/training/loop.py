"""Train one configuration and measure it. `train()` reads top to bottom:

set-up -> build (inside the measured memory window) -> steps (data, micro-steps, update, with OOM
recovery) -> measure -> evaluate -> result.

Numbers that matter are computed once: effective batch = micro x accum; samples/s counts the
steps after warm-up, data generation included, because that is what a user waits for.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import torch
from torch import nn

from elastune.config import RunConfig
from elastune.data.batch import Batch, to_device
from elastune.errors import OutOfMemory
from elastune.training.batches import step_batches
from elastune.training.checkpoint import LoopState, check_checkpoint, load_checkpoint, save_checkpoint
from elastune.training.oom import is_oom, shrink
from elastune.training.optim import Optimizers
from elastune.training.precision import autocast_for, check_precision, grad_scaler, resolve_device
from elastune.training.probe import DeviceProbe, MemoryPeak, probe_for
from elastune.training.step import forward_backward
from elastune.workloads import build_workload

__all__ = ["DataParallel", "Progress", "StepBoundary", "TrainResult", "train", "warm_up_runtime"]

P = ParamSpec("P")
R = TypeVar("R")

# Called before each micro-batch's forward with (step, micro_index); tests raise OOM from it.
FaultHook = Callable[[int, int], None]


class StepBoundary(Protocol):
    """Called at every step boundary by whoever shares the device (EDO's client, edo/client.py)."""

    def check(self, state: LoopState) -> None:
        """After a step's backward, before its update: raise torch.OutOfMemoryError if the step went
        over its memory grant; the loop recovers as from any OOM (halve micro, redo the step)."""

    def at_boundary(self, state: LoopState, model: nn.Module) -> None:
        """Before the first step and after every update: may re-split state.micro x state.accum
        (never their product) and resize the model's cached tables."""


class DataParallel(Protocol):
    """This process's place in a data-parallel group (tuning/worker_group.py runs one per Ray Train
    worker). Every rank trains the same model on its own share of each step's samples."""

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module to run forward/backward through, so gradients are averaged over the group."""
        ...


@dataclass(frozen=True)
class Progress:
    step: int
    steps: int
    samples: int
    loss: float
    samples_per_s: float | None  # None during warm-up


@dataclass
class TrainResult:
    samples_per_s: float
    peak_memory_bytes: int
    peak_memory_kind: str  # what was measured: cuda_reserved | cpu_rss_hwm
    peak_allocated_bytes: int | None
    estimated_peak_bytes: int | None
    # The eval metrics (a click model's: logloss, auc, baseline_logloss) and the one the workload
    # declares as its quality, with its value.
    metrics: dict[str, float]
    quality_metric: str
    quality_direction: str
    quality: float
    train_loss: float
    steps: int
    # A workload that counts its own units (`units`, `count_units(batch)`: an LM's real tokens) gets
    # their rate over the same timed window as samples/s; None for one that does not.
    units_per_s: float | None
    units: str | None
    samples: int
    micro_batch: int
    accum: int
    effective_batch: int
    oom_retries: int
    device: str
    elapsed_s: float
    config: dict[str, Any] = field(default_factory=dict)
    # samples/s of each timed window (progress_every steps, the reports' time left out): how much
    # the throughput moved within the run, where samples_per_s is the whole timed stretch
    window_samples_per_s: list[float] = field(default_factory=list)
    # the leading windows still warming up (`warm_up_windows`): left out of samples_per_s and units_per_s
    warmup_windows: int = 0


def _under_config_threads(fn: Callable[Concatenate[RunConfig, P], R]) -> Callable[Concatenate[RunConfig, P], R]:
    """Run `fn(cfg, ...)` with torch's intra-op threads set to `cfg.threads` (a measuring condition
    the sweep records), and put back what they were afterwards."""

    @functools.wraps(fn)
    def run(cfg: RunConfig, *args: P.args, **kwargs: P.kwargs) -> R:
        previous = torch.get_num_threads()
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        try:
            return fn(cfg, *args, **kwargs)
        finally:
            torch.set_num_threads(previous)

    return run


@_under_config_threads
def train(
    cfg: RunConfig,
    *,
    probe: DeviceProbe | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    fault: FaultHook | None = None,
    boundary: StepBoundary | None = None,
    progress_every: int = 10,
    parallel: DataParallel | None = None,
) -> TrainResult:
    # -- set-up: refuse what cannot run before anything is built
    device = resolve_device(cfg.device)
    check_precision(cfg.precision, device)
    # checkpoint.path: a file in a writable folder; one to resume from (or to overwrite) must be an
    # elastune checkpoint. Checked now, not when it is read or written after the model is built.
    writes = parallel is None or parallel.rank == 0  # ranks hold the same weights: rank 0 writes
    check_checkpoint(cfg.checkpoint, cfg.to_dict(), writes=writes)
    from elastune.training.metrics import evaluate_workload

    torch.manual_seed(cfg.seed)
    workload = build_workload(cfg)
    autocast = autocast_for(cfg.precision, device)
    probe = probe or probe_for(device)
    warm_up_runtime(device)
    # The data stream is opened before the baseline: opening it is set-up, not training (the
    # synthetic stream calibrates its teacher on 32k samples, a one-off 24-70 MiB of temporaries
    # that the pinned heap would keep resident and count as this config's peak). What it holds
    # afterwards (the last chunks) is small; what each read generates is in the peak.
    source = workload.data_source()
    probe.reset()  # the baseline: everything from here on is this run's memory

    # -- build: model, optimizers, scaler; maybe resume
    model = workload.build_model().to(device)
    opts = Optimizers(model, cfg.optimizer)
    scaler = grad_scaler(cfg.precision, device)
    state = LoopState(micro=cfg.batch.micro, accum=cfg.batch.accum)
    ckpt = cfg.checkpoint
    if ckpt.resume and ckpt.path is not None and ckpt.path.is_file():
        state = load_checkpoint(ckpt.path, model=model, opts=opts, scaler=scaler, config=cfg.to_dict())
    effective = state.micro * state.accum  # fixed for the run; OOM recovery only re-splits it
    model.train()
    # Data parallel: forward/backward go through the wrapper, which averages gradients over the
    # group in backward; the optimizers, evaluation and checkpoints use the plain module.
    runner = model if parallel is None else parallel.wrap(model)
    rank, world = (0, 1) if parallel is None else (parallel.rank, parallel.world_size)
    if boundary is not None:
        _at_boundary(boundary, state, model, effective)  # the grant may be short of this shape already

    # -- steps
    timed_from: tuple[float, int] | None = None
    window: tuple[float, int, int] | None = None  # the open timed window's start (time, samples, units)
    windows: list[Window] = []  # the closed ones
    window_steps = 0
    counts_units = workload.units is not None  # e.g. an LM's real tokens (padding excluded)
    timed_units = 0
    batches = step_batches(
        source,
        cfg.data,
        done=state.samples,
        steps=max(cfg.steps - state.step, 0),
        effective=effective,
        rank=rank,
        world=world,
    )
    batch: Batch | None = None  # this step's, kept until the step succeeds (an OOM retry redoes it)
    loss_sum, loss_steps, last_loss = torch.zeros((), device=device), 0, float("nan")
    while state.step < cfg.steps:
        if timed_from is None and state.step >= cfg.warmup_steps:
            timed_from = (time.perf_counter(), state.samples)
            window = (*timed_from, timed_units)
        # data: this step's samples (training/batches.py), read once, so a retry after OOM redoes
        # exactly them; each rank reads its own contiguous share of the group's step
        if batch is None:
            host = next(batches)
            units = workload.count_units(host) if counts_units and timed_from is not None else 0
            # arrange_step: e.g. an LM's sequences sorted by length, so a micro-batch pads less
            batch = to_device(workload.arrange_step(host), device, non_blocking=True)
        before_micro = None if fault is None else functools.partial(fault, state.step)
        try:
            step_loss = forward_backward(runner, workload, batch, state.micro, autocast, scaler, before_micro)
            if boundary is not None:
                boundary.check(state)  # over its device-memory grant: an OOM like any other, recovered below
        except RuntimeError as exc:  # torch.OutOfMemoryError is a RuntimeError
            if not is_oom(exc):
                raise
            if parallel is not None:
                # One rank cannot re-split alone: the others would wait for it in the all-reduce.
                raise OutOfMemory(
                    f"out of memory at batch.micro={state.micro} in data-parallel rank {rank}: {exc}; "
                    "a worker group does not re-split the batch, so lower batch.micro or the memory use"
                ) from exc
            _recover_from_oom(state, opts, device, exc)
            continue
        # update: the only place parameters change
        opts.step(scaler)
        opts.zero_grad()
        batch = None
        state.step += 1
        state.samples += effective
        timed_units += units
        if window is not None:
            window_steps += 1
            if window_steps == progress_every:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)  # the window's kernels, not only their launches
                now = time.perf_counter()
                windows.append(Window(state.samples - window[1], now - window[0], timed_units - window[2]))
                window, window_steps = (now, state.samples, timed_units), 0
        loss_sum += step_loss
        loss_steps += 1
        if boundary is not None:
            _at_boundary(boundary, state, model, effective)  # the device's memory may have been re-shared
        if on_progress is not None and (state.step % progress_every == 0 or state.step == cfg.steps):
            last_loss = float(loss_sum) / loss_steps  # a CPU-GPU sync, once per report
            loss_sum.zero_()
            loss_steps = 0
            reporting = time.perf_counter()
            on_progress(Progress(state.step, cfg.steps, state.samples, last_loss, _rate(timed_from, state)))
            if timed_from is not None:
                # A report is the tuner's time, not the config's: leave it out of the timed window (a
                # worker group's report waits for its Ray Train controller's next poll).
                paused = time.perf_counter() - reporting
                timed_from = (timed_from[0] + paused, timed_from[1])
                window = (window[0] + paused, *window[1:]) if window is not None else None
        if ckpt.every and ckpt.path is not None and rank == 0 and state.step % ckpt.every == 0:
            save_checkpoint(ckpt.path, model=model, opts=opts, scaler=scaler, state=state, config=cfg.to_dict())
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # queued kernels belong to the timed window
    samples_per_s = _rate(timed_from, state) or 0.0
    elapsed = time.perf_counter() - timed_from[0] if timed_from else 0.0
    timed_seconds = (state.samples - timed_from[1]) / samples_per_s if timed_from and samples_per_s else 0.0
    units_per_s = timed_units / timed_seconds if counts_units and timed_seconds else None
    warmup = warm_up_windows([w.rate for w in windows])
    if warmup:  # the run was still warming up after warmup_steps: its steady windows alone count
        steady = windows[warmup:]
        seconds = sum(w.seconds for w in steady)
        samples_per_s = sum(w.samples for w in steady) / seconds
        units_per_s = sum(w.units for w in steady) / seconds if counts_units else None
    if loss_steps:
        last_loss = float(loss_sum) / loss_steps
    if ckpt.path is not None and rank == 0:  # ranks hold the same weights: one writer
        save_checkpoint(ckpt.path, model=model, opts=opts, scaler=scaler, state=state, config=cfg.to_dict())

    # -- evaluate, then measure: eval runs at the micro-batch size, inside the memory window
    model.eval()
    eval_batch = cfg.eval.batch or state.micro
    with autocast():
        metrics = evaluate_workload(workload, model, source.eval_batches(cfg.eval.samples, eval_batch), device)
    quality = workload.quality
    peak: MemoryPeak = probe.peak()

    return TrainResult(
        samples_per_s=samples_per_s,
        peak_memory_bytes=peak.peak_bytes,
        peak_memory_kind=peak.kind,
        peak_allocated_bytes=peak.allocated_bytes,
        estimated_peak_bytes=None,  # the caller attaches the prediction it made (the loop measures)
        metrics=metrics,
        quality_metric=quality.name,
        quality_direction=quality.direction,
        quality=metrics[quality.name],
        units_per_s=units_per_s,
        units=workload.units,
        train_loss=last_loss,
        steps=state.step,
        samples=state.samples,
        micro_batch=state.micro,
        accum=state.accum,
        effective_batch=effective,
        oom_retries=state.oom_retries,
        device=str(device),
        elapsed_s=elapsed,
        config=cfg.to_dict(),
        window_samples_per_s=[w.rate for w in windows],
        warmup_windows=warmup,
    )


def _recover_from_oom(state: LoopState, opts: Optimizers, device: torch.device, exc: BaseException) -> None:
    """Drop the step's partial gradients, halve the micro-batch, double accumulation."""
    opts.zero_grad()
    if device.type == "cuda":
        torch.cuda.empty_cache()  # hand the failed step's cached blocks back before retrying
    smaller = shrink(state.micro, state.accum)
    if smaller is None:
        raise OutOfMemory(
            f"out of memory at batch.micro={state.micro}, which cannot be halved further: {exc}; "
            "lower the memory use (a smaller embedding, a lower precision) or raise the ceiling"
        ) from exc
    state.micro, state.accum = smaller
    state.oom_retries += 1


def _at_boundary(boundary: StepBoundary, state: LoopState, model: nn.Module, effective: int) -> None:
    boundary.at_boundary(state, model)
    if state.micro * state.accum != effective:
        raise RuntimeError(f"a step boundary changed the effective batch {effective} to {state.micro}x{state.accum}")


@dataclass(frozen=True)
class Window:
    """A timed window: progress_every steps (the reports' time left out)."""

    samples: int
    seconds: float
    units: int  # the workload's own units (an LM's real tokens), 0 where it counts none

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


WARM_UP_SHORTFALL = 0.10  # a leading window this much slower than the steady rate is still warming up


def warm_up_windows(rates: list[float]) -> int:
    """How many leading windows were still warming up: those slower than (1 - WARM_UP_SHORTFALL)
    times the steady rate (the median of the second half of the windows), at most half of them.
    `warmup_steps` is a guess made before the run; the windows show where the rate settled (a heap
    still growing, kernels still being picked, caches filling). Fewer than four windows: none,
    too few to tell a warm-up from noise."""
    if len(rates) < 4:
        return 0
    steady = statistics.median(rates[len(rates) // 2 :])
    count = 0
    while count < len(rates) // 2 and rates[count] < (1 - WARM_UP_SHORTFALL) * steady:
        count += 1
    return count


def _rate(timed_from: tuple[float, int] | None, state: LoopState) -> float | None:
    if timed_from is None:
        return None
    seconds = time.perf_counter() - timed_from[0]
    return (state.samples - timed_from[1]) / seconds if seconds > 0 else None


def warm_up_runtime(device: torch.device) -> None:
    """Run one tiny training step so torch's lazily built pieces (kernels, autograd threads,
    allocator pools) exist before the baseline; they are the runtime's memory, not the run's."""
    emb = nn.EmbeddingBag(16, 4, mode="sum").to(device)
    lin = nn.Linear(4, 1).to(device)
    opt = torch.optim.Adam([*emb.parameters(), *lin.parameters()])
    ids = torch.zeros(8, 2, dtype=torch.int64, device=device)
    for _ in range(2):
        lin(emb(ids)).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
