"""Train one configuration and measure it. `train()` reads top to bottom:

set-up -> build (inside the measured memory window) -> steps (data, micro-steps, update, with OOM
recovery) -> measure -> evaluate -> result. The loop prints nothing of its own (progress goes to
`on_progress`) but one line: a model that learned nothing is said on stderr after eval
(workloads/quality.py: `unlearned_warning`).

Numbers that matter are computed once: effective batch = micro x accum; samples/s counts the
steps after warm-up, data generation included, because that is what a user waits for (its windows,
and the time reports take, are training/throughput.py's).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Concatenate, NoReturn, ParamSpec, Protocol, TypeVar

import torch
from torch import nn

from elastune.config import RunConfig
from elastune.data.batch import Batch, to_device
from elastune.errors import OutOfMemory
from elastune.training.batches import step_batches
from elastune.training.checkpoint import LoopState, check_checkpoint, load_checkpoint, save_checkpoint
from elastune.training.metrics import evaluate_workload
from elastune.training.oom import is_oom, shrink
from elastune.training.optim import Optimizers
from elastune.training.precision import autocast_for, check_precision, grad_scaler, resolve_device
from elastune.training.probe import DeviceProbe, MemoryPeak, probe_for
from elastune.training.step import forward_backward
from elastune.training.throughput import Measured, Throughput, warm_up_windows
from elastune.workloads import Workload, build_workload
from elastune.workloads.quality import unlearned_warning

__all__ = ["DataParallel", "Progress", "StepBoundary", "TrainResult", "train", "warm_up_runtime", "warm_up_windows"]

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
    # seconds of the timed stretch spent reading a synthetic source on a CPU device, left out of
    # samples_per_s (training/throughput.py says why); 0 for real data and on a GPU
    synthetic_read_s: float = 0.0


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
    rank, world = (0, 1) if parallel is None else (parallel.rank, parallel.world_size)
    # checkpoint.path must be usable before anything is built; ranks hold the same weights: rank 0 writes
    check_checkpoint(cfg.checkpoint, cfg.to_dict(), writes=rank == 0)
    torch.manual_seed(cfg.seed)
    workload = build_workload(cfg)
    autocast = autocast_for(cfg.precision, device)
    probe = probe or probe_for(device)
    warm_up_runtime(device)
    # opened before the baseline: set-up, not training (the synthetic stream's one-off calibration
    # temporaries, 24-70 MiB, would stay resident in the pinned heap and count as this config's peak)
    source = workload.data_source()
    probe.reset()  # the baseline: everything from here on is this run's memory

    # -- build: model, optimizers, scaler (the plain model: optimizers, eval, checkpoints); maybe resume
    model, opts, scaler, state = _build(cfg, workload, device)
    effective = state.micro * state.accum  # fixed for the run; OOM recovery only re-splits it
    model.train()
    runner = model if parallel is None else parallel.wrap(model)  # averages gradients over a DDP group
    if boundary is not None:
        _at_boundary(boundary, state, model, effective)  # the grant may be short of this shape already

    # -- steps: each rank reads its own contiguous share of the group's step (training/batches.py)
    timed = Throughput(progress_every, device, counts_units=workload.units is not None, warmup_steps=cfg.warmup_steps)
    batches = step_batches(source, cfg.data, done=state.samples, steps=max(cfg.steps - state.step, 0),
                           effective=effective, rank=rank, world=world)  # fmt: skip
    losses = _Losses(device)
    stand_in = device.type == "cpu" and bool(getattr(source, "synthetic", False))  # its reads: not timed
    batch: Batch | None = None  # this step's, kept until the step succeeds (an OOM retry redoes it)
    while state.step < cfg.steps:
        timed.step_begins(state.step, state.samples)
        if batch is None:  # read once: a retry after OOM redoes exactly these samples
            host = _next_batch(batches, timed, stand_in)
            units = workload.count_units(host) if timed.counts_units and timed.started else 0
            batch = _on_device(workload.arrange_step(host), device)  # arranged: e.g. sorted by length
        try:
            hook = None if fault is None else functools.partial(fault, state.step)
            step_loss = forward_backward(runner, workload, batch, state.micro, autocast, scaler, hook)
            if boundary is not None:
                boundary.check(state)  # over its device-memory grant: an OOM like any other, recovered below
        except RuntimeError as exc:  # torch.OutOfMemoryError is a RuntimeError
            _recover_from_oom(state, opts, device, exc, parallel)
            continue
        _update(opts, scaler, state)  # the only place parameters change
        opts.zero_grad()
        batch = None
        state.step += 1
        state.samples += effective
        timed.stepped(state.samples, units)
        losses.add(step_loss)
        if boundary is not None:
            _at_boundary(boundary, state, model, effective)  # the device's memory may have been re-shared
        if on_progress is not None and (state.step % progress_every == 0 or state.step == cfg.steps):
            _report(on_progress, state, cfg.steps, losses, timed)
        if cfg.checkpoint.every and rank == 0 and state.step % cfg.checkpoint.every == 0:
            _save(cfg, model, opts, scaler, state)
    measured = timed.finish(state.samples)
    if rank == 0:  # ranks hold the same weights: one writer
        _save(cfg, model, opts, scaler, state)

    # -- evaluate, then measure: eval runs at the micro-batch size, inside the memory window
    model.eval()
    held_out = source.eval_batches(cfg.eval.samples, cfg.eval.batch or state.micro)
    with autocast(), _oom_in(f"evaluation (eval batches of {cfg.eval.batch or state.micro})", _EVAL_FIX):
        metrics = evaluate_workload(workload, model, held_out, device)
    return _result(cfg, workload, state, measured, losses.mean(), metrics, probe.peak(), device, rank)


def _next_batch(batches: Iterator[Batch], timed: Throughput, stand_in: bool) -> Batch:
    """The next step's batch; the read's time left out of the timed stretch where the source is a
    synthetic stand-in on a CPU device (`stand_in`)."""
    began = time.perf_counter()
    host = next(batches)
    if stand_in:
        timed.read_left_out(time.perf_counter() - began)
    return host


def _on_device(batch: Batch, device: torch.device) -> Batch:
    """The step's batch on `device`. Sources produce host tensors, so on a CPU device the batch is
    used as it is: moving it would be a no-op that still walks its pytree (~10 us a step)."""
    return batch if device.type == "cpu" else to_device(batch, device, non_blocking=True)


def _warn_if_unlearned(metrics: dict[str, float], train_loss: float) -> None:
    """One line on stderr, with the run's progress, where eval says the model learned nothing."""
    unlearned = unlearned_warning(metrics, train_loss)
    if unlearned is not None:
        print(f"warning: {unlearned}", file=sys.stderr, flush=True)


def _build(
    cfg: RunConfig, workload: Workload, device: torch.device
) -> tuple[nn.Module, Optimizers, torch.amp.GradScaler, LoopState]:
    """The model on its device, its optimizers, the scaler and the loop state: new, or resumed
    from checkpoint.path."""
    model = workload.build_model().to(device)
    opts = Optimizers(model, cfg.optimizer)
    scaler = grad_scaler(cfg.precision, device)
    state = LoopState(micro=cfg.batch.micro, accum=cfg.batch.accum)
    ckpt = cfg.checkpoint
    if ckpt.resume and ckpt.path is not None and ckpt.path.is_file():
        state = load_checkpoint(ckpt.path, model=model, opts=opts, scaler=scaler, config=cfg.to_dict())
    return model, opts, scaler, state


class _Losses:
    """The training loss since the last report, summed on the device (a CPU-GPU sync only when a
    report reads it)."""

    def __init__(self, device: torch.device) -> None:
        self.total, self.steps, self.last = torch.zeros((), device=device), 0, float("nan")

    def add(self, step_loss: torch.Tensor) -> None:
        self.total += step_loss
        self.steps += 1

    def mean(self) -> float:
        """The mean since the last call (the last mean if no step came since)."""
        if self.steps:
            self.last = float(self.total) / self.steps  # a CPU-GPU sync, once per report
            self.total.zero_()
            self.steps = 0
        return self.last


def _report(
    on_progress: Callable[[Progress], None], state: LoopState, steps: int, losses: _Losses, timed: Throughput
) -> None:
    reporting = time.perf_counter()
    on_progress(Progress(state.step, steps, state.samples, losses.mean(), timed.rate(state.samples)))
    # A report is the tuner's time, not the config's: leave it out of the timed stretch.
    timed.paused(time.perf_counter() - reporting)


def _save(cfg: RunConfig, model: nn.Module, opts: Optimizers, scaler: torch.amp.GradScaler, state: LoopState) -> None:
    if cfg.checkpoint.path is not None:
        save_checkpoint(cfg.checkpoint.path, model=model, opts=opts, scaler=scaler, state=state, config=cfg.to_dict())


def _result(
    cfg: RunConfig,
    workload: Workload,
    state: LoopState,
    measured: Measured,
    train_loss: float,
    metrics: dict[str, float],
    peak: MemoryPeak,
    device: torch.device,
    rank: int = 0,
) -> TrainResult:
    if rank == 0:  # ranks evaluate alike: one says it
        _warn_if_unlearned(metrics, train_loss)
    quality = workload.quality
    return TrainResult(
        samples_per_s=measured.samples_per_s,
        peak_memory_bytes=peak.peak_bytes,
        peak_memory_kind=peak.kind,
        peak_allocated_bytes=peak.allocated_bytes,
        estimated_peak_bytes=None,  # the caller attaches the prediction it made (the loop measures)
        metrics=metrics,
        quality_metric=quality.name,
        quality_direction=quality.direction,
        quality=metrics[quality.name],
        units_per_s=measured.units_per_s,
        units=workload.units,
        train_loss=train_loss,
        steps=state.step,
        samples=state.samples,
        micro_batch=state.micro,
        accum=state.accum,
        effective_batch=state.micro * state.accum,
        oom_retries=state.oom_retries,
        device=str(device),
        elapsed_s=measured.elapsed_s,
        config=cfg.to_dict(),
        window_samples_per_s=measured.window_rates,
        warmup_windows=measured.warmup_windows,
        synthetic_read_s=measured.synthetic_read_s,
    )


# What to change where memory runs out outside the step's forward and backward (which the loop
# retries at half the micro-batch): the update's memory does not shrink with the micro-batch, and
# evaluation runs at eval.batch.
_UPDATE_FIX = (
    "the update holds the step's touched rows and the optimizer's state, which a smaller micro-batch "
    "does not shrink: lower batch.micro x batch.accum, use a smaller table or a row-wise sparse optimizer, "
    "or raise the memory"
)
_EVAL_FIX = "set eval.batch lower (it defaults to batch.micro)"


def _update(opts: Optimizers, scaler: Any, state: LoopState) -> None:
    """The step's optimizer update. An OOM here is not retried (some tables may be updated already):
    it ends the run as elastune's OutOfMemory, saying where and what to change."""
    try:
        opts.step(scaler)
    except RuntimeError as exc:
        where = f"the optimizer update of step {state.step + 1} (batch.micro={state.micro})"
        _raise_as_out_of_memory(exc, where, _UPDATE_FIX)


@contextlib.contextmanager
def _oom_in(where: str, fix: str) -> Iterator[None]:
    """An OOM inside the block raised as elastune's OutOfMemory (see `_raise_as_out_of_memory`)."""
    try:
        yield
    except RuntimeError as exc:
        _raise_as_out_of_memory(exc, where, fix)


def _raise_as_out_of_memory(exc: RuntimeError, where: str, fix: str) -> NoReturn:
    """`exc` as elastune's OutOfMemory where it is an OOM (a sweep records such a trial as out of
    memory, with this line, not as failed); any other error as it was."""
    if not is_oom(exc):
        raise exc
    raise OutOfMemory(f"out of memory in {where}: {fix}; {exc}") from exc


def _recover_from_oom(
    state: LoopState, opts: Optimizers, device: torch.device, exc: RuntimeError, parallel: DataParallel | None
) -> None:
    """Drop the step's partial gradients, halve the micro-batch, double accumulation. Anything but
    an OOM is raised again; so is an OOM in a data-parallel group."""
    if not is_oom(exc):
        raise exc
    if parallel is not None:
        # One rank cannot re-split alone: the others would wait for it in the all-reduce.
        raise OutOfMemory(
            f"out of memory at batch.micro={state.micro} in data-parallel rank {parallel.rank}: {exc}; "
            "a worker group does not re-split the batch, so lower batch.micro or the memory use"
        ) from exc
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


def warm_up_runtime(device: torch.device) -> None:
    """Run one tiny training step so torch's lazily built pieces (kernels, autograd threads,
    allocator pools) exist before the baseline; they are the runtime's memory, not the run's. So is
    the metrics library, which a workload imports when it first evaluates: torchmetrics brings in
    matplotlib, 60-70 MiB of resident memory that would otherwise count as this config's peak."""
    import torchmetrics  # noqa: F401  (imported for its memory, before the baseline)

    emb = nn.EmbeddingBag(16, 4, mode="sum").to(device)
    lin = nn.Linear(4, 1).to(device)
    opt = torch.optim.Adam([*emb.parameters(), *lin.parameters()])
    ids = torch.zeros(8, 2, dtype=torch.int64, device=device)
    for _ in range(2):
        lin(emb(ids)).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
