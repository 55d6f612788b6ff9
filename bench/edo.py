"""EDO benchmark (issue 5, point 6): a mixed set of DLRM trials on one device, three ways.

1. EDO: the broker (a Ray actor) grants memory and re-shares it; trials adapt at step boundaries.
2. Static equal split: k trials at a time, each held to capacity / k for its whole run, no
   re-assignment (what a fractional Ray GPU gives, `gpus_per_trial = 1/k`).
3. One at a time: sequential, each trial with the whole device.
Then a fault run under EDO: one trial SIGKILLed mid-run (restarted once from scratch, as Ray Tune
does with max_failures=1) and one trial that allocates far beyond its grant.

Two trial mixes (`--mix`):

- `dlrm` (the default): 8 DLRM configs with full tables, memory mostly tables and activations.
- `cached`: 6 DLRM configs whose tables are `cached` (embeddings/cached.py: every row on the host, the
  most used rows in a device cache of `embedding.cache_ratio` of them, 0.5-1.0 here), so the cache
  is a large part of each trial's memory. Under EDO the cache follows the grant: a trial started
  below its want shrinks its cache first (down to a quarter of its rows), then its micro-batch, and
  grows both back as its grant grows (`EdoBoundary._apply`). Under the static split a trial cannot
  resize its cache: its configured cache must fit its share, and the loop's OOM path only halves
  the micro-batch, so a trial whose cache alone overruns the share fails. One at a time has the
  whole device. On the virtual device a cache hit costs what a miss does (both rows are in host
  memory), so there a larger cache buys no speed; on CUDA a hit saves the host-to-device copy.

Trials are real processes (Ray actors on a local Ray bound to 127.0.0.1) running the real engine
(`training.loop.train`). The device is one of two (`--device`):

- `virtual` (the default, CPU): EDO's virtual device (`VirtualProbe`), a configured capacity whose
  use is each trial process's measured resident memory above its baseline, checked at every step.
- `cuda`: GPU 0, shared by every trial process (each actor asks Ray for a token 1/100 of the GPU,
  so Ray makes the GPU visible to all of them and memory alone decides how many run). EDO shares a
  slice of its memory: the broker's device is `cuda:0/...` with the capacity below, far under the
  GPU's own, so the CUDA contexts and cuBLAS workspaces (outside any grant) fit in the rest.
  Use is each trial's caching-allocator reserved bytes above its baseline (`CudaProbe`); a grant
  is enforced by the allocator itself (`set_per_process_memory_fraction`, set by the probe), which
  raises the OOM inside the step. Before each run the trial process hands back the previous run's
  cached blocks and warms the CUDA runtime, so its baseline (the grant's zero) holds the runtime
  only. A step takes milliseconds there, so every trial's step count (the mix's and the fault
  run's) is multiplied by `--steps-scale`: by default the factor at which, at the calibration's
  step times, the mix trains 2 s per trial on average, about as long as on a 2-core CPU unscaled.

How the static split is enforced: each trial runs with a fixed share, fenced as EDO fences a grant
on the same device: on the virtual device by the very check EDO uses (`EdoBoundary.check`: the
step's measured peak against the limit, before the update), on CUDA by the allocator's per-process
fraction (`CudaProbe.set_limit`). A trial whose peak exceeds its share takes the loop's OOM path
(halve the micro-batch, redo the step) and fails when it cannot halve further. A user's fractional
GPU has no such fence: an overrun there takes memory from a neighbour, so the CUDA OOM may hit the
neighbour instead (collateral); the fenced split measured here is the better case for static.

Demands (EDO only): each distinct config is measured once alone (step peaks, as the device's probe
sees them) in its configured shape and in its smallest shape (micro-batch / 8, and for cached tables
the cache at the demand's `min_cache_fraction`, 0.25), then padded as
tests/integration/local_ray/test_edo.py does: want = 1.3 x peak, min = 1.2 x smallest peak. The estimator's
demand (`plan_demand`) is not used for the trials, only printed beside the calibration.

Capacity: 2.5 x the mean `want` of the mix (fits 2-3 of the trials' predicted peaks at once), so
memory, not the cores (or the GPU), bounds how many run together.

Figures per mode: completed trials per hour; and what a sweep searching for the fastest config
finds per device time: the best samples/s among the mode's completed trials (each trial's own, as
train() measured it, so on a device shared with other trials, slowed by them), the device-hours
the mode used (its wall time / 3600: one device) and best samples/s per GPU-hour, their ratio.

    python bench/edo.py                  # all modes + the fault run; Markdown to stdout
    python bench/edo.py --mix cached     # the cached mix
    python bench/edo.py --quick          # one round of the mix's first 4, no fault run (a GPU call)
    python bench/edo.py --copies 2       # the mix twice per round instead of once (longer)
    python bench/edo.py --json out.json  # also the raw figures
    python bench/edo.py --device cuda    # on GPU 0 (exits 2 where CUDA is not available)

Each run writes its record to bench/records/ (or to $ELASTUNE_BENCH_RECORDS: a trial run's folder),
one benchmark per mix (edo-cpu, edo-cached-cpu; -cuda on the GPU); `python bench/render.py` updates
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before ray: every address on loopback

import ray
import torch
from elastune.edo.broker import BrokerConfig, ensure_broker, read_status, shutdown_broker
from elastune.edo.client import Demand, edo_session
from elastune.edo.policy import DeviceSpec
from elastune.errors import EdoError, OutOfMemory
from elastune.training.loop import train, warm_up_runtime
from elastune.training.probe import CudaProbe, ElasticProbe, VirtualProbe
from elastune.validate import load_run_config

MiB = 2**20
HEARTBEAT_S = 1.0
BASE = [
    "optimizer.sparse=rowwise_adagrad",
    "workload_options.bottom_mlp=[64]",
    "workload_options.top_mlp=[64]",
    "warmup_steps=1",
    "eval.samples=512",
    "eval.batch=256",
]  # then device=cpu (the virtual device) or device=cuda
# The mix: (name, overrides). Embedding sizes from 0.0005 to 0.02 of Criteo's rows at dim 16-64,
# micro-batches 512-4096; steps so that each trains a few seconds alone.
Mix = list[tuple[str, list[str]]]
MIX: Mix = [
    ("s-r0005-d64-b1024", ["data.rows_scale=0.0005", "model.embedding_dim=64", "batch.micro=1024", "steps=30"]),
    ("s-r001-d32-b2048", ["data.rows_scale=0.001", "model.embedding_dim=32", "batch.micro=2048", "steps=20"]),
    ("s-r005-d32-b512", ["data.rows_scale=0.005", "model.embedding_dim=32", "batch.micro=512", "steps=40"]),
    ("m-r002-d64-b1024", ["data.rows_scale=0.002", "model.embedding_dim=64", "batch.micro=1024", "steps=30"]),
    ("m-r01-d32-b1024", ["data.rows_scale=0.01", "model.embedding_dim=32", "batch.micro=1024", "steps=30"]),
    ("l-r01-d64-b2048", ["data.rows_scale=0.01", "model.embedding_dim=64", "batch.micro=2048", "steps=15"]),
    ("l-r02-d64-b512", ["data.rows_scale=0.02", "model.embedding_dim=64", "batch.micro=512", "steps=30"]),
    ("s-r0005-d16-b4096", ["data.rows_scale=0.0005", "model.embedding_dim=16", "batch.micro=4096", "steps=12"]),
]


def _cached(
    name: str, rows_scale: float, dim: int, micro: int, cache_ratio: float, steps: int
) -> tuple[str, list[str]]:
    return name, [
        "embedding.strategy=cached",
        f"data.rows_scale={rows_scale}",
        f"model.embedding_dim={dim}",
        f"batch.micro={micro}",
        f"embedding.cache_ratio={cache_ratio}",
        f"steps={steps}",
    ]


# The cached mix: every table `cached`, its device cache 0.5-1.0 of the rows (so the cache is a large
# part of the trial's memory; on the virtual device the host table counts too), tables of 0.002-0.02
# of Criteo's rows at dim 32-64, micro-batches 512-2048; steps so that each trains about 3 s alone on
# a 2-core CPU. The first cannot hold its configured cache in half the capacity (the static 1/2 share).
CACHED_MIX: Mix = [
    _cached("c-r02-d64-b1024-c100", 0.02, 64, 1024, 1.0, 60),
    _cached("c-r005-d32-b2048-c50", 0.005, 32, 2048, 0.5, 60),
    _cached("c-r01-d64-b512-c75", 0.01, 64, 512, 0.75, 150),
    _cached("c-r002-d32-b512-c100", 0.002, 32, 512, 1.0, 240),
    _cached("c-r01-d32-b1024-c50", 0.01, 32, 1024, 0.5, 90),
    _cached("c-r02-d32-b2048-c75", 0.02, 32, 2048, 0.75, 45),
]
MIXES = {"dlrm": MIX, "cached": CACHED_MIX}
# The fault run's configs per mix: two neighbours, a small one (the hog) and a large one (the victim
# and the copy that queues behind it: its minimum must not fit beside the victim's grant).
FAULT_ROLES = {
    "dlrm": {
        "n1": "s-r005-d32-b512",
        "n2": "m-r002-d64-b1024",
        "small": "s-r0005-d64-b1024",
        "large": "l-r01-d64-b2048",
    },
    "cached": {
        "n1": "c-r005-d32-b2048-c50",
        "n2": "c-r01-d32-b1024-c50",
        "small": "c-r002-d32-b512-c100",
        "large": "c-r02-d64-b1024-c100",
    },
}
QUICK_TRIALS = 4  # --quick: the mix's first 4, one round, no fault run
SHRINK = 8  # the smallest shape: micro-batch / 8 (plan_demand's default)
MIN_CACHE_FRACTION = 0.25  # and the cached tables at a quarter of their rows (plan_demand's default)
DEVICES = ("virtual", "cuda")
GPU_SHARE = 0.01  # CUDA: what each trial process asks of Ray's GPU, only so Ray makes GPU 0 visible to it
CALIB_STEPS = {"virtual": 4, "cuda": 10}  # calibration run length (CUDA: enough steps to time them)
# CUDA's default --steps-scale aims at this mean training time per trial, at the calibration's step times (on a
# 2-core CPU, unscaled: 1.1 s alone, 3.3 s at the calibration's, which runs several configs at once)
TARGET_TRAIN_S = 2.0


def _config(kind: str, overrides: list[str]) -> Any:
    return load_run_config(None, [*BASE, "device=cuda" if kind == "cuda" else "device=cpu", *overrides])


def _get(overrides: list[str], key: str) -> str:
    return next(o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}="))


def _micro(overrides: list[str]) -> int:
    return int(_get(overrides, "batch.micro"))


def _is_cached(overrides: list[str]) -> bool:
    return "embedding.strategy=cached" in overrides


def _smallest(overrides: list[str]) -> list[str]:
    """The smallest shape EDO may shrink a trial to: micro-batch / 8 (accumulation x 8, the
    effective batch unchanged) and, for cached tables, their cache at `MIN_CACHE_FRACTION`."""
    out = [*overrides, f"batch.micro={_micro(overrides) // SHRINK}", f"batch.accum={SHRINK}"]
    if _is_cached(overrides):  # the cached mix sets every cache by its ratio
        out.append(f"embedding.cache_ratio={float(_get(overrides, 'embedding.cache_ratio')) * MIN_CACHE_FRACTION:g}")
    return out


def _with_steps(overrides: list[str], steps: int) -> list[str]:
    return [o for o in overrides if not o.startswith("steps=")] + [f"steps={steps}"]


def _steps(overrides: list[str]) -> int:
    return int(_get(overrides, "steps"))


def _scaled(overrides: list[str], scale: int) -> list[str]:
    return overrides if scale == 1 else _with_steps(overrides, _steps(overrides) * scale)


# ---------------------------------------------------------------------------------------------
# Trial processes


class FixedShare:
    """The static split's fence, exactly as `EdoBoundary.check` fences a grant: on the virtual
    device the step's measured peak against a fixed share; where the device enforces the limit
    itself (CUDA: the probe's allocator fraction, set by the trial) nothing. No broker, no re-shaping."""

    def __init__(self, probe: ElasticProbe, limit: int) -> None:
        self.probe, self.limit = probe, limit

    def check(self, state: Any) -> None:
        if self.probe.enforces_limit:
            return  # the allocator raises inside the step itself
        used = self.probe.window_peak(reset=False)
        if used > self.limit:
            self.probe.window_peak(reset=True)
            raise torch.OutOfMemoryError(f"static share: step {state.step} peaked at {used} B > share {self.limit} B")

    def at_boundary(self, state: Any, model: Any) -> None:
        self.probe.window_peak(reset=True)


class Sampled:
    """Wraps a boundary: records each step window's peak (read before the inner boundary resets
    it) and the trial's progress (a file the driver reads to pick the moment of a kill)."""

    def __init__(self, inner: Any, probe: ElasticProbe, progress: Path) -> None:
        self.inner, self.probe, self.progress = inner, probe, progress
        self.trace: list[tuple[float, int]] = []
        self.ooms = 0  # the check's OOMs: each discards the step it happened in, which is redone
        self.state: Any = None  # the loop's state (one object, updated in place), seen at the first boundary

    def check(self, state: Any) -> None:
        try:
            self.inner.check(state)
        except torch.OutOfMemoryError:
            self.ooms += 1
            raise

    def at_boundary(self, state: Any, model: Any) -> None:
        self.state = state
        self.trace.append((time.time(), self.probe.window_peak(reset=False)))
        self.progress.write_text(str(state.step))
        self.inner.at_boundary(state, model)

    def oom_count(self, failed_oom: bool) -> int:
        """The run's OOMs. On the virtual device every one is the check's. On CUDA the allocator
        raises them inside the step, so: the loop's recoveries, plus the last one if the run
        failed on it (the same count: each recovered OOM and the one that ended the run)."""
        if not self.probe.enforces_limit:
            return self.ooms
        return (self.state.oom_retries if self.state is not None else 0) + int(failed_oom)


@ray.remote(num_cpus=0, max_restarts=0)
class TrialRunner:
    """One trial process; kept across trials (imports cost seconds), replaced when killed.
    `kind`: "virtual" (CPU) or "cuda" (GPU 0, which Ray makes visible: see `new_runner`)."""

    def __init__(self, kind: str) -> None:
        torch.set_num_threads(1)  # several trials share the cores
        self.kind = kind
        self.gpu = torch.device("cuda", 0) if kind == "cuda" else None

    def pid(self) -> int:
        return os.getpid()

    def device_info(self) -> dict[str, Any]:
        if self.gpu is None:
            return {}
        props = torch.cuda.get_device_properties(self.gpu)
        return {"name": props.name, "total_bytes": int(props.total_memory), "cuda": torch.version.cuda}

    def warm(self) -> int:
        from elastune.memory.estimate import estimate  # train() estimates first; import it before the clock

        estimate(_config(self.kind, MIX[0][1]))
        if self.gpu is not None:
            self._fresh_baseline()  # the CUDA context and runtime, before the clock too
        return os.getpid()

    def _fresh_baseline(self) -> None:
        """CUDA, before each run: hand back the blocks the previous run left cached (else they sit
        in the baseline, and the run's first allocations reuse them unseen and unfenced), then run
        the loop's warm-up step, so what the runtime keeps (cuBLAS workspaces, kernels, the small
        segment the warm-up's tensors were cut from) exists before the baseline, as it does before
        `train`'s own (its warm-up then reuses it). The grant's fraction counts all this process
        reserves: its zero must be the runtime alone, the same zero `train` measures from."""
        assert self.gpu is not None
        gc.collect()
        torch.cuda.empty_cache()
        warm_up_runtime(self.gpu)
        torch.cuda.synchronize(self.gpu)

    def _probe(self, capacity: int) -> ElasticProbe:
        if self.gpu is None:
            return VirtualProbe(capacity)
        self._fresh_baseline()
        probe = CudaProbe(self.gpu)
        probe.reset()  # the baseline a grant is set on (train() takes its own again, after its warm-up)
        return probe

    def measure(self, overrides: list[str]) -> tuple[int, float]:
        """The highest step peak of a short run alone (the build and the evaluation are not steps),
        and its seconds per step (the first step, which creates the optimizer state, left out)."""
        cfg = _config(self.kind, overrides)
        probe = self._probe(1 << 40)
        peaks: list[int] = []
        times: list[float] = []

        class Record:
            def check(self, state: Any) -> None:
                pass

            def at_boundary(self, state: Any, model: Any) -> None:
                peaks.append(probe.window_peak(reset=True))  # on CUDA a sync: the step's kernels are done
                times.append(time.perf_counter())

        train(cfg, probe=probe, boundary=Record())
        return max(peaks[1:]), (times[-1] - times[1]) / max(1, len(times) - 2)

    def run(self, trial_id: str, job: dict[str, Any]) -> dict[str, Any]:
        cfg = _config(self.kind, job["overrides"])
        probe = self._probe(job["capacity"])
        progress = Path(job["progress_dir"]) / trial_id
        progress.unlink(missing_ok=True)
        hog = int(job.get("hog_bytes", 0))

        def fault(step: int, micro_index: int) -> None:
            if hog and step >= job["hog_from"] and micro_index == 0:
                # touched, so resident (CPU) or allocated on the GPU (CUDA): far beyond the grant
                block = torch.ones(hog // 4, device=self.gpu)
                del block

        out: dict[str, Any] = {"trial_id": trial_id, "pid": os.getpid(), "ok": False, "t_start": time.time()}
        sampled: Sampled | None = None
        try:
            if job["mode"] == "edo":
                with edo_session(
                    trial_id=trial_id, device=job["device"], demand=job["demand"], probe=probe, timeout_s=600
                ) as boundary:
                    out["t_granted"] = time.time()
                    sampled = Sampled(boundary, probe, progress)
                    try:
                        built = boundary.config_for_grant(cfg)  # a cache as large as the grant holds
                        result = train(built, probe=probe, boundary=sampled, fault=fault)
                    finally:
                        out["history"] = boundary.history
                        out["t_end"] = time.time()
            else:
                out["t_granted"] = time.time()
                sampled = Sampled(FixedShare(probe, job["share"]), probe, progress)
                probe.set_limit(job["share"])  # CUDA: the allocator's fence (virtual: recorded; FixedShare checks)
                try:
                    result = train(cfg, probe=probe, boundary=sampled, fault=fault)
                finally:
                    probe.set_limit(None)
                    out["t_end"] = time.time()
            out.update(ok=True, steps=result.steps, micro=result.micro_batch, samples_per_s=result.samples_per_s)
        except (OutOfMemory, EdoError, torch.OutOfMemoryError) as exc:
            # torch's own OOM reaches here only on CUDA, from outside the steps (the build, the evaluation)
            failed_oom = not isinstance(exc, EdoError)
            out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            out["t_end"] = out.get("t_end", time.time())
            out["steps"] = int(progress.read_text()) if progress.exists() else 0  # done before failing: lost
        else:
            failed_oom = False
        out.setdefault("t_granted", out["t_end"])  # never granted: held nothing
        if sampled is not None:
            out["oom_retries"] = sampled.oom_count(failed_oom)
            out["trace"] = [*sampled.trace, (time.time(), probe.window_peak(reset=False))]  # last: the eval
        return out


# ---------------------------------------------------------------------------------------------
# The driver


@dataclass
class Trial:
    trial_id: str
    name: str
    overrides: list[str]
    demand: Demand


def new_runner(kind: str) -> Any:
    """A trial process. On CUDA it asks Ray for a token share of the GPU (`GPU_SHARE`), so that Ray
    sets its CUDA_VISIBLE_DEVICES to GPU 0, which every trial shares: memory is EDO's to divide
    (or the static split's fence), not Ray's."""
    actor: Any = TrialRunner  # Ray's stubs do not type an actor class's .remote / .options
    if kind == "cuda":
        return actor.options(num_gpus=GPU_SHARE).remote(kind)
    return actor.remote(kind)


def device_spec(kind: str, name: str, capacity: int) -> DeviceSpec:
    """The broker's device: the virtual one, or a slice of GPU 0's memory. No reserve on CUDA: the
    slice is far below the GPU's memory, and the CUDA contexts and cuBLAS workspaces (outside every
    grant) fit in the rest."""
    return DeviceSpec(f"cuda:0/{name}" if kind == "cuda" else f"virtual:{name}", capacity_bytes=capacity)


def calibrate(runners: list[Any], kind: str, mix: Mix) -> tuple[dict[str, Demand], list[dict[str, Any]]]:
    """Measure each config's step peak alone, in its configured and its smallest shape."""
    jobs = []
    steps = CALIB_STEPS[kind]
    for name, overrides in mix:
        jobs.append((name, "full", _with_steps(overrides, steps)))
        jobs.append((name, "small", _with_steps(_smallest(overrides), steps)))
    futures = [runners[i % len(runners)].measure.remote(ov) for i, (_, _, ov) in enumerate(jobs)]
    peaks = ray.get(futures)
    measured: dict[str, dict[str, int]] = {}
    step_s: dict[str, float] = {}
    for (name, shape, _), (peak, seconds) in zip(jobs, peaks, strict=True):
        measured.setdefault(name, {})[shape] = peak
        if shape == "full":
            step_s[name] = seconds
    demands, rows = {}, []
    from elastune.edo.client import plan_demand

    for name, overrides in mix:
        m = measured[name]
        want = int(1.3 * m["full"])
        demands[name] = Demand(
            want_bytes=want,
            min_bytes=min(want, int(1.2 * m["small"])),
            min_micro=_micro(overrides) // SHRINK,
            min_cache_fraction=MIN_CACHE_FRACTION if _is_cached(overrides) else 1.0,
        )
        planned = plan_demand(_config(kind, overrides), min_cache_fraction=MIN_CACHE_FRACTION)
        rows.append(
            {
                "name": name,
                "peak": m["full"],
                "small_peak": m["small"],
                "want": demands[name].want_bytes,
                "min": demands[name].min_bytes,
                "plan_want": planned.want_bytes,
                "plan_min": planned.min_bytes,
                "step_s": step_s[name],  # not alone on the device: calibration runs on every runner at once
            }
        )
    return demands, rows


def mix_train_s(mix: Mix, calib: list[dict[str, Any]]) -> float:
    """The mix's mean training time per trial at the calibration's step times (several configs at
    once, so somewhat slower than alone)."""
    return statistics.mean(_steps(overrides) * c["step_s"] for (_, overrides), c in zip(mix, calib, strict=True))


def auto_steps_scale(mix: Mix, calib: list[dict[str, Any]]) -> int:
    """The step multiplier at which the mix trains `TARGET_TRAIN_S` per trial on average, at least 1."""
    mean_s = mix_train_s(mix, calib)
    return max(1, round(TARGET_TRAIN_S / mean_s)) if mean_s > 0 else 1


def run_queue(runners: list[Any], jobs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float, float]:
    """Run `jobs` in order on the runners, one at a time each (a slot per runner)."""
    pending, free, results = list(jobs), list(runners), []
    running: dict[Any, tuple[Any, dict[str, Any]]] = {}
    t0 = time.time()
    while pending or running:
        while pending and free:
            runner, job = free.pop(0), pending.pop(0)
            running[runner.run.remote(job["trial_id"], job)] = (runner, job)
        done, _ = ray.wait(list(running), num_returns=1)
        for future in done:
            runner, job = running.pop(future)
            results.append({**ray.get(future), "name": job["name"]})
            free.append(runner)
    return results, t0, time.time()


Steps = list[tuple[float, int]]  # a step function: (from time t, value), in time order


def _value(steps: Steps, t: float) -> int:
    value = 0
    for start, v in steps:
        if start > t:
            break
        value = v
    return value


def memory_average(series: list[tuple[Steps, Steps]], t0: float, t1: float, capacity: int) -> dict[str, float]:
    """Time averages over [t0, t1] of the sums over trials of use, of grant - use (granted but
    unused) and of grant, as fractions of capacity; `series` holds each trial's (grant, use)."""
    use = unused = granted = 0.0
    for grant_steps, use_steps in series:
        cuts = sorted({t0, t1, *(t for t, _ in grant_steps), *(t for t, _ in use_steps)})
        for a, b in itertools.pairwise(cuts):
            if a < t0 or b > t1:
                continue
            g, u = _value(grant_steps, a), _value(use_steps, a)
            use += (b - a) * u
            unused += (b - a) * max(0, g - u)
            granted += (b - a) * g
    span = (t1 - t0) * capacity
    return {"in_use": use / span, "granted_unused": unused / span, "granted": granted / span}


def use_from_trace(r: dict[str, Any]) -> Steps:
    """The trial's own measurements: each step window's peak over that window (the first window is
    the build, the last the evaluation)."""
    trace = r.get("trace", [])
    if not trace:
        return []
    starts = [r["t_granted"], *(t for t, _ in trace[:-1])]
    return [*zip(starts, (p for _, p in trace), strict=True), (trace[-1][0], 0)]


def broker_series(timeline: list[dict[str, Any]], device: str) -> dict[str, tuple[Steps, Steps]]:
    """Per trial, the broker's (grant, reported use) step functions."""
    out: dict[str, tuple[Steps, Steps]] = {}
    for p in timeline:
        if p["device"] == device:
            grant, used = out.setdefault(p["trial_id"], ([], []))
            grant.append((p["t"], p["grant_bytes"]))
            used.append((p["t"], p["used_bytes"]))
    return out


def max_granted(timeline: list[dict[str, Any]], device: str) -> int:
    held: dict[str, int] = {}
    top = 0
    for p in timeline:
        if p["device"] == device:
            held[p["trial_id"]] = p["grant_bytes"]
            top = max(top, sum(held.values()))
    return top


def found(best_sps: float, best_config: str, wall_s: float) -> dict[str, Any]:
    """What a mode found per device time: the best samples/s among its completed trials (each
    trial's own, from train()) and its config, the device-hours the mode used (its wall time, one
    device), and the best samples/s per device-hour."""
    hours = wall_s / 3600
    return {
        "best_sps": best_sps,
        "best_config": best_config,
        "device_hours": hours,
        "best_sps_per_gpu_hour": best_sps / hours,
    }


def summarize(
    mode: str, results: list[dict[str, Any]], t0: float, t1: float, memory: dict[str, float], **extra: Any
) -> dict[str, Any]:
    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    ooms = sum(r.get("oom_retries", 0) for r in results)
    redone = ooms  # each OOM discards the step it happened in (the check is before the update)
    wasted = sum(r.get("steps", 0) for r in failed)
    restarts = extra.pop("restarts", 0)
    restart_lost = extra.pop("restart_lost", 0)
    busy = sum(r["t_end"] - r["t_granted"] for r in results)
    best: dict[str, Any] = max(ok, key=lambda r: r["samples_per_s"], default={"samples_per_s": 0.0, "name": "-"})
    return {
        "mode": mode,
        "trials": len(results),
        "completed": len(ok),
        "failed": [f"{r['name']}: {r.get('error', '')[:90]}" for r in failed],
        "wall_s": t1 - t0,
        "per_hour": len(ok) / (t1 - t0) * 3600,
        "ooms": ooms,
        "restarts": restarts,
        "lost_steps": redone + wasted + restart_lost,
        "lost_detail": {"redone_after_oom": redone, "in_failed_trials": wasted, "before_restart": restart_lost},
        "mean_running": busy / (t1 - t0),
        **found(best["samples_per_s"], best["name"], t1 - t0),
        **memory,
        **extra,
    }


def edo_jobs(trials: list[Trial], spec: DeviceSpec, progress: str) -> list[dict[str, Any]]:
    return [
        {
            "trial_id": t.trial_id,
            "name": t.name,
            "mode": "edo",
            "overrides": t.overrides,
            "demand": t.demand,
            "device": spec.name,
            "capacity": spec.capacity_bytes,
            "progress_dir": progress,
        }
        for t in trials
    ]


def fixed_jobs(trials: list[Trial], capacity: int, share: int, progress: str, mode: str) -> list[dict[str, Any]]:
    return [
        {
            "trial_id": t.trial_id,
            "name": t.name,
            "mode": mode,
            "overrides": t.overrides,
            "capacity": capacity,
            "share": share,
            "progress_dir": progress,
        }
        for t in trials
    ]


def run_edo(runners: list[Any], trials: list[Trial], capacity: int, progress: str, kind: str) -> dict[str, Any]:
    spec = device_spec(kind, "bench-edo", capacity)
    ensure_broker([spec], BrokerConfig(heartbeat_s=HEARTBEAT_S))
    try:
        results, t0, t1 = run_queue(runners, edo_jobs(trials, spec, progress))
        status = read_status(timeline_s=3600)
    finally:
        shutdown_broker()
    assert status is not None
    timeline = status["timeline"]
    broker = broker_series(timeline, spec.name)
    memory = memory_average([(broker[r["trial_id"]][0], use_from_trace(r)) for r in results], t0, t1, capacity)
    reported = memory_average(list(broker.values()), t0, t1, capacity)
    over = max_granted(timeline, spec.name) > spec.budget_bytes
    waited = [r["t_granted"] - r["t_start"] for r in results]
    return summarize(
        "EDO",
        results,
        t0,
        t1,
        memory,
        broker_view=reported,
        over_capacity=over,
        mean_wait_s=statistics.mean(waited),
        shrinks=sum(1 for r in results for e in r.get("history", []) if e["event"] == "shrink"),
        grows=sum(1 for r in results for e in r.get("history", []) if e["event"] == "grow"),
        slots=len(runners),
    )


def run_fixed(runners: list[Any], trials: list[Trial], capacity: int, k: int, progress: str, mode: str) -> Any:
    share = capacity // k
    results, t0, t1 = run_queue(runners[:k], fixed_jobs(trials, capacity, share, progress, mode))
    series = [([(r["t_granted"], share), (r["t_end"], 0)], use_from_trace(r)) for r in results]
    memory = memory_average(series, t0, t1, capacity)
    return summarize(mode, results, t0, t1, memory, slots=k, share=share)


# ---------------------------------------------------------------------------------------------
# The fault run


def _step(progress: str, trial_id: str) -> int:
    path = Path(progress) / trial_id
    try:
        return int(path.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _grants() -> dict[str, dict[str, Any]]:
    status = read_status(timeline_s=1)
    assert status is not None
    return {t["trial_id"]: t for d in status["devices"] for t in d["trials"]}


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def run_faults(
    runners: list[Any],
    demands: dict[str, Demand],
    capacity: int,
    progress: str,
    kind: str,
    scale: int,
    mix_name: str,
) -> dict[str, Any]:
    """Neighbours n1, n2 (small); a hog (small config, allocates 3x its want from step 3); a victim
    (large) SIGKILLed mid-run (at step 8 or later of 60; steps, but not the hog's step 3, times the
    steps scale) once the hog is done and a copy of it queues behind it; the victim is then
    restarted from scratch on a fresh process. The configs are the mix's `FAULT_ROLES`."""
    spec = device_spec(kind, "bench-faults", capacity)
    ensure_broker([spec], BrokerConfig(heartbeat_s=HEARTBEAT_S))
    mix, roles = dict(MIXES[mix_name]), FAULT_ROLES[mix_name]
    small, large = roles["small"], roles["large"]

    def job(trial_id: str, name: str, steps: int, **extra: Any) -> dict[str, Any]:
        t = Trial(trial_id, name, _with_steps(mix[name], steps * scale), demands[name])
        return {**edo_jobs([t], spec, progress)[0], **extra}

    jobs = {
        "n1": job("f-n1", roles["n1"], 160),
        "n2": job("f-n2", roles["n2"], 120),
        "hog": job("f-hog", small, 30, hog_bytes=3 * demands[small].want_bytes, hog_from=3),
        "victim": job("f-victim", large, 60),
        "waiter": job("f-waiter", large, 15),
    }
    report: dict[str, Any] = {}
    try:
        victim_pid = ray.get(runners[3].pid.remote())
        t0 = time.time()
        futures = {key: runners[i].run.remote(jobs[key]["trial_id"], jobs[key]) for i, key in enumerate(jobs) if i < 4}
        hog = ray.get(futures.pop("hog"), timeout=300)
        _wait(lambda: _step(progress, "f-victim") >= 3 * scale, 120, "the victim to train")
        futures["waiter"] = runners[2].run.remote("f-waiter", jobs["waiter"])
        _wait(lambda: _grants().get("f-waiter", {}).get("state") == "waiting", 60, "the copy to queue")
        _wait(lambda: _step(progress, "f-victim") >= 8 * scale, 120, f"the victim to reach step {8 * scale}")
        before = _grants()
        grant = before["f-victim"]["grant_bytes"]
        lost = _step(progress, "f-victim")
        killed_at = time.monotonic()
        os.kill(victim_pid, signal.SIGKILL)
        returned_s = regrant_s = None
        regranted_2hb = 0.0
        while time.monotonic() - killed_at < 10 * HEARTBEAT_S:
            now = _grants()
            elapsed = time.monotonic() - killed_at
            if returned_s is None and "f-victim" not in now:
                returned_s = elapsed
            grown = sum(
                max(0, t["grant_bytes"] - before.get(tid, {}).get("grant_bytes", 0))
                for tid, t in now.items()
                if tid != "f-victim"
            )
            if elapsed <= 2 * HEARTBEAT_S:
                regranted_2hb = max(regranted_2hb, min(1.0, grown / grant))
            if grown >= 0.95 * grant:
                regrant_s = elapsed
                break
            time.sleep(0.02)
        report.update(
            victim_grant=grant,
            waiter_state_at_kill=before.get("f-waiter", {}).get("state"),
            returned_hb=None if returned_s is None else returned_s / HEARTBEAT_S,
            regrant_hb=None if regrant_s is None else regrant_s / HEARTBEAT_S,
            regranted_by_2hb=regranted_2hb,
            lost_steps_restart=lost,
        )
        with contextlib.suppress(ray.exceptions.RayActorError):  # killed, as intended
            ray.get(futures.pop("victim"), timeout=30)
        fresh = new_runner(kind)  # the restart: a new process, cold imports and all, from step 0
        restart = fresh.run.remote("f-victim-restart", {**jobs["victim"], "trial_id": "f-victim-restart"})
        rest = dict(zip(futures, ray.get(list(futures.values()), timeout=600), strict=True))
        rest["victim-restart"] = ray.get(restart, timeout=600)
        t1 = time.time()
        runners[3] = fresh
        status = read_status(timeline_s=3600)
    finally:
        shutdown_broker()
    assert status is not None
    results = [hog, *rest.values()]
    for r in results:
        r["name"] = r["trial_id"]
    neighbours = [rest[k] for k in ("n1", "n2", "waiter", "victim-restart")]
    timeline = status["timeline"]
    hog_grants = [p["grant_bytes"] for p in timeline if p["trial_id"] == "f-hog"]
    report.update(
        hog_ok=hog["ok"],
        hog_error=hog.get("error", ""),
        hog_ooms=hog.get("oom_retries", 0),
        hog_max_grant=max(hog_grants),
        hog_want=demands[small].want_bytes,
        hog_allocates=3 * demands[small].want_bytes,
        neighbour_ooms=sum(r.get("oom_retries", 0) for r in neighbours),
        neighbours_ok=all(r["ok"] for r in neighbours),
        over_capacity=max_granted(timeline, spec.name) > spec.budget_bytes,
    )
    broker = broker_series(timeline, spec.name)
    traced = {r["trial_id"]: use_from_trace(r) for r in results}
    # the killed victim left no trace: its use is what it reported to the broker
    series = [(grant, traced.get(tid) or used) for tid, (grant, used) in broker.items()]
    memory = memory_average(series, t0, t1, capacity)
    summary = summarize("EDO fault run", results, t0, t1, memory, restarts=1, restart_lost=report["lost_steps_restart"])
    return {**summary, **report}


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A mode's rounds as one: counts and wall times summed, memory averages weighted by wall time."""
    wall = sum(r["wall_s"] for r in rounds)
    out = dict(rounds[0])
    for key in ("trials", "completed", "ooms", "restarts", "lost_steps", "shrinks", "grows"):
        if key in out:
            out[key] = sum(r[key] for r in rounds)
    out["lost_detail"] = {k: sum(r["lost_detail"][k] for r in rounds) for k in out["lost_detail"]}
    out["failed"] = [f for r in rounds for f in r["failed"]]
    for key in ("in_use", "granted_unused", "granted", "mean_running", "mean_wait_s"):
        if key in out:
            out[key] = sum(r[key] * r["wall_s"] for r in rounds) / wall
    if "broker_view" in out:
        out["broker_view"] = {
            k: sum(r["broker_view"][k] * r["wall_s"] for r in rounds) / wall for k in out["broker_view"]
        }
    out["over_capacity"] = any(r.get("over_capacity", False) for r in rounds)
    out["wall_s"], out["per_hour"] = wall, out["completed"] / wall * 3600
    top = max(rounds, key=lambda r: r["best_sps"])
    out.update(found(top["best_sps"], top["best_config"], wall))  # the best of every round, per all their hours
    out["per_round"] = [r["per_hour"] for r in rounds]
    return out


# ---------------------------------------------------------------------------------------------
# Report


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


def markdown(
    calib: list[dict[str, Any]], modes: list[dict[str, Any]], faults: dict[str, Any] | None, info: dict
) -> str:
    lines = ["## EDO", "", *_setup(info), "", *_calibration(calib, info), "", *_modes_table(modes, faults), ""]
    lines += _comparisons(modes)
    lines += [f"- {m['mode']} failed: " + "; ".join(m["failed"]) for m in modes if m["failed"]]
    if faults is None:
        lines.append("- fault run: not run (--quick)")
    elif "error" in faults:
        lines.append(f"- fault run failed: {faults['error']}")
    else:
        lines += _fault_lines(faults)
    return "\n".join(lines)


def _setup(info: dict[str, Any]) -> list[str]:
    machine = (
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, torch {torch.__version__}, "
        f"ray {ray.__version__}; date {date.today()}; load average at start {info['load_start']}, "
        f"at end {info['load_end']}; benchmark wall time {info['wall_s']:.0f} s"
    )
    if info["device"] == "cuda":
        gpu = info["gpu"]
        device = (
            f"- device: GPU 0, {gpu['name']} ({gpu['total_bytes'] / MiB:.0f} MiB; torch CUDA {gpu['cuda']}), "
            f"shared by every trial process; EDO's device a slice of it, capacity {info['capacity'] / MiB:.1f} MiB "
            "= 2.5 x the mix's mean want; use = caching-allocator reserved bytes above each run's baseline "
            "(`CudaProbe`), grants and static shares enforced by the allocator's per-process memory fraction; "
            f"trial steps x {info['steps_scale']} (at x 1 the mix trains {info['mix_train_s']:.2f} s per trial on "
            "average, as timed in the calibration, several configs at once); "
        )
    else:
        scaled = "" if info["steps_scale"] == 1 else f"trial steps x {info['steps_scale']}; "
        device = f"- device: virtual (`VirtualProbe`), capacity {info['capacity'] / MiB:.1f} MiB = 2.5 x the mix's "
        device += f"mean want; {scaled}"
    mix = f"the {info['mix']} mix of {info['mix_size']}"
    if info["quick"]:
        mix = f"the first {QUICK_TRIALS} of {mix}, --quick"
    device += (
        f"{info['trials']} trials ({info['copies']} x {mix}) per round, same order in every mode, "
        f"{info['rounds']} rounds (mode order reversed every other round), figures summed over rounds; "
        f"heartbeat {HEARTBEAT_S:g} s; one torch thread per trial"
    )
    return [f"- command: `{info['command']}`", machine, device]


def _calibration(calib: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    smallest = "micro / 8" + (f", cache x {MIN_CACHE_FRACTION:g}" if info["mix"] == "cached" else "")
    lines = [
        f"Calibration (each config alone; MiB; EDO's demand = 1.3 x peak, min = 1.2 x peak at {smallest}):",
        "",
        f"| config | step peak | peak at {smallest} | want | min | plan_demand want | plan_demand min |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in calib:
        lines.append(
            f"| {c['name']} | {c['peak'] / MiB:.1f} | {c['small_peak'] / MiB:.1f} | {c['want'] / MiB:.1f} | "
            f"{c['min'] / MiB:.1f} | {c['plan_want'] / MiB:.1f} | {c['plan_min'] / MiB:.1f} |"
        )
    return lines


def _modes_table(modes: list[dict[str, Any]], faults: dict[str, Any] | None) -> list[str]:
    lines = [
        "| mode | slots | completed | wall s | trials/hour (per round) | in use | granted, unused | not granted | "
        "mean running | OOMs | restarts | lost steps | best samples/s | device-hours | best samples/s per GPU-hour |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in [*modes, faults] if faults is not None and "error" not in faults else modes:
        lost = m["lost_detail"]
        lines.append(
            f"| {m['mode']} | {m.get('slots', '-')} | {m['completed']}/{m['trials']} | {m['wall_s']:.1f} | "
            f"{m['per_hour']:.0f} ({_rounds(m)}) | {m['in_use']:.1%} | {m['granted_unused']:.1%} | "
            f"{1 - m['granted']:.1%} | "
            f"{m['mean_running']:.2f} | {m['ooms']} | {m['restarts']} | {m['lost_steps']} "
            f"({lost['redone_after_oom']} redone, {lost['in_failed_trials']} in failed, "
            f"{lost['before_restart']} before restart) | {m['best_sps']:.0f} ({m['best_config']}) | "
            f"{m['device_hours']:.3g} | "
            f"{m['best_sps_per_gpu_hour']:.3g} |"
        )
    return lines


def _comparisons(modes: list[dict[str, Any]]) -> list[str]:
    edo, static, seq, *more = modes
    return [
        f"- EDO / {static['mode']}: {_ratio(edo, static, 'per_hour')} completed trials per hour "
        f"(target >= 1.5x); EDO / one at a time: {_ratio(edo, seq, 'per_hour')}"
        + "".join(f"; EDO / {m['mode']}: {_ratio(edo, m, 'per_hour')}" for m in more),
        f"- best samples/s found per GPU-hour (the best completed trial's own samples/s / the mode's wall hours): "
        f"EDO / {static['mode']}: {_ratio(edo, static, 'best_sps_per_gpu_hour')}; EDO / one at a time: "
        f"{_ratio(edo, seq, 'best_sps_per_gpu_hour')}"
        + "".join(f"; EDO / {m['mode']}: {_ratio(edo, m, 'best_sps_per_gpu_hour')}" for m in more),
        f"- EDO: OOMs {edo['ooms']} (target 0), grants over capacity at any point: {edo['over_capacity']}; "
        f"{edo['shrinks']} shrinks, {edo['grows']} grows; mean wait for a grant {edo['mean_wait_s']:.1f} s; "
        f"the broker's own view (use = the peaks trials report each heartbeat, lagging by up to a beat): "
        f"in use {edo['broker_view']['in_use']:.1%}, granted but unused {edo['broker_view']['granted_unused']:.1%}",
    ]


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> str:
    x = _x(a, b, key)
    return f"{x:.2f}x" if x is not None else "- (none completed)"


def _fault_lines(f: dict[str, Any]) -> list[str]:
    return [
        f"- fault run, kill: the victim held {f['victim_grant'] / MiB:.1f} MiB (a copy of it "
        f"{f['waiter_state_at_kill']} behind it); its grant left the broker after "
        f"{_hb(f['returned_hb'])} and >= 95% of it was re-granted after {_hb(f['regrant_hb'])} "
        f"(target <= 2 heartbeats); re-granted within 2 heartbeats: {f['regranted_by_2hb']:.0%}; restarted "
        f"from scratch once, {f['lost_steps_restart']} steps lost",
        f"- fault run, overrun: the hog (want {f['hog_want'] / MiB:.1f} MiB, never granted more than "
        f"{f['hog_max_grant'] / MiB:.1f}) allocated {f['hog_allocates'] / MiB:.1f} MiB per step from step 3: "
        f"{'completed' if f['hog_ok'] else 'failed'} after {f['hog_ooms']} OOM retries "
        f"({f['hog_error'][:80]}); neighbours' OOMs {f['neighbour_ooms']} (target 0), all neighbours completed: "
        f"{f['neighbours_ok']}; grants over capacity at any point: {f['over_capacity']}",
    ]


def _rounds(m: dict[str, Any]) -> str:
    return ", ".join(f"{x:.0f}" for x in m.get("per_round", [])) or "one run"


def _hb(x: float | None) -> str:
    return "(not within 10 heartbeats)" if x is None else f"{x:.2f} heartbeats"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--mix",
        choices=sorted(MIXES),
        default="dlrm",
        help="dlrm: 8 DLRM trials with full tables; cached: 6 with `cached` tables, whose caches EDO grows and "
        "shrinks with their grants",
    )
    parser.add_argument("--copies", type=int, default=1, help="times the mix is repeated per round")
    parser.add_argument("--rounds", type=int, help="rounds of every mode (order reversed each round); default 2")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"one round (unless --rounds) of the mix's first {QUICK_TRIALS} trials, no fault run",
    )
    parser.add_argument("--k", type=int, default=2, help="static split: trials per device (share = 1/k)")
    parser.add_argument("--also-k", type=int, default=3, help="a second static split for comparison (0: none)")
    parser.add_argument("--edo-slots", type=int, default=4, help="EDO: trials started at once (memory decides)")
    parser.add_argument("--json", help="write raw figures here")
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="virtual",
        help="virtual: EDO's virtual device on CPU (VirtualProbe); cuda: GPU 0, shared, measured and fenced by "
        "the CUDA caching allocator (CudaProbe)",
    )
    parser.add_argument(
        "--steps-scale",
        type=int,
        help="multiply every trial's steps (the mix's and the fault run's); default 1 on the virtual device, on "
        f"CUDA chosen from the calibration's step times so the mix trains {TARGET_TRAIN_S:g} s per trial on average",
    )
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available here (torch sees no GPU); use --device virtual")
    if args.steps_scale is not None and args.steps_scale < 1:
        parser.error(f"--steps-scale {args.steps_scale}: must be >= 1")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    return args


def run_modes(
    args: argparse.Namespace, runners: list[Any], trials: list[Trial], capacity: int, progress: str, kind: str
) -> list[dict[str, Any]]:
    """Each mode once per round, their rounds combined: EDO, static 1/k, one at a time, static 1/also-k."""
    modes: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("EDO", lambda: run_edo(runners[: args.edo_slots], trials, capacity, progress, kind)),
        ("static", lambda: run_fixed(runners, trials, capacity, args.k, progress, f"static 1/{args.k}")),
        ("seq", lambda: run_fixed(runners, trials, capacity, 1, progress, "one at a time")),
    ]
    if args.also_k:
        also = f"static 1/{args.also_k}"
        modes.append(("also", lambda: run_fixed(runners, trials, capacity, args.also_k, progress, also)))
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key, _ in modes}
    for r in range(args.rounds):
        # The order reverses every other round, so a change in the machine's load during the run
        # weighs on every mode alike.
        for key, fn in modes if r % 2 == 0 else modes[::-1]:
            runs[key].append(fn())
            _log(runs[key][-1])
    return [combine(runs[key]) for key, _ in modes]


def _log(m: dict[str, Any]) -> None:
    print(f"{m['mode']}: {m['completed']}/{m['trials']} in {m['wall_s']:.1f} s, OOMs {m['ooms']}", file=sys.stderr)


def main() -> None:
    args = _arguments()
    kind = args.device
    mix = MIXES[args.mix][:QUICK_TRIALS] if args.quick else MIXES[args.mix]
    info: dict[str, Any] = {
        "load_start": _load(),
        "copies": args.copies,
        "rounds": args.rounds,
        "command": "python " + " ".join(sys.argv),
        "device": kind,
        "mix": args.mix,
        "mix_size": len(MIXES[args.mix]),
        "quick": args.quick,
    }
    started = time.time()
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=1 if kind == "cuda" else None,  # trials share GPU 0, each asking Ray for GPU_SHARE of it
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=False,
    )
    progress = tempfile.mkdtemp(prefix="elastune-edo-bench-")
    faults: dict[str, Any] | None = None
    try:
        slots = max(args.edo_slots, args.k, args.also_k, 0 if args.quick else 5)  # the fault run takes 5
        runners = [new_runner(kind) for _ in range(slots)]
        ray.get([r.warm.remote() for r in runners])
        if kind == "cuda":
            info["gpu"] = ray.get(runners[0].device_info.remote())
        demands, calib = calibrate(runners, kind, mix)
        capacity = int(2.5 * statistics.mean(d.want_bytes for d in demands.values()))
        info["capacity"] = capacity
        info["mix_train_s"] = mix_train_s(mix, calib)
        scale = args.steps_scale or (auto_steps_scale(mix, calib) if kind == "cuda" else 1)
        info["steps_scale"] = scale
        print(f"capacity {capacity / MiB:.1f} MiB, steps x {scale}", file=sys.stderr)
        trials = [
            Trial(f"{c}-{i}-{name}", name, _scaled(overrides, scale), demands[name])
            for c in range(args.copies)
            for i, (name, overrides) in enumerate(mix)
        ]
        info["trials"] = len(trials)
        modes = run_modes(args, runners, trials, capacity, progress, kind)
        if not args.quick:
            faults = fault_run(runners, demands, capacity, progress, kind, scale, args.mix)
    finally:
        ray.shutdown()
    info["load_end"] = _load()
    info["wall_s"] = time.time() - started
    print(markdown(calib, modes, faults, info))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"info": info, "calibration": calib, "modes": modes, "faults": faults}, indent=1)
        )
    _record(args, modes, faults, info)


def fault_run(
    runners: list[Any], demands: dict[str, Demand], capacity: int, progress: str, kind: str, scale: int, mix_name: str
) -> dict[str, Any]:
    """The fault run, or {"error": ...} where it failed: the modes measured before are reported all the same."""
    try:
        faults = run_faults(runners, demands, capacity, progress, kind, scale, mix_name)
    except (TimeoutError, ray.exceptions.RayError) as exc:
        faults = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(f"fault run failed: {faults['error']}", file=sys.stderr)
        return faults
    _log(faults)
    return faults


def _record(
    args: argparse.Namespace, modes: list[dict[str, Any]], faults: dict[str, Any] | None, info: dict[str, Any]
) -> None:
    """This run's record (bench/record.py): EDO against each fixed share, what each mode found per
    device-hour, and the fault run's checks. Each mix is its own benchmark (edo-cpu, edo-cached-cpu)."""
    from record import Figure, write_record

    edo, static, *others = modes
    ratio = _x(edo, static, "per_hour")
    figures = [
        Figure(
            f"completed trials/hour, EDO vs {static['mode']}", ratio, "x", ">= 1.5", ratio is not None and ratio >= 1.5
        ),
        *(Figure(f"EDO vs {m['mode']}", _x(edo, m, "per_hour"), "x") for m in others),
        Figure("OOMs under EDO", edo["ooms"], "", "0", edo["ooms"] == 0),
        Figure(f"best samples/s per GPU-hour, EDO vs {static['mode']}", _x(edo, static, "best_sps_per_gpu_hour"), "x"),
    ]
    for m in modes:
        figures += [
            Figure(f"best samples/s, {m['mode']}", round(m["best_sps"]), "samples/s", note=m["best_config"]),
            Figure(f"device-hours, {m['mode']}", round(m["device_hours"], 5), "h"),
        ]
    if faults is not None and "error" not in faults:
        figures += _fault_figures(faults)
    cached = "cached-" if args.mix == "cached" else ""
    notes = [f"mix: {args.mix} ({info['mix_size']} configs x {args.copies} per round)"]
    if args.quick:
        notes.append(f"--quick: the mix's first {QUICK_TRIALS} configs, {args.rounds} round(s), no fault run")
    write_record(
        f"edo-{cached}{'cuda' if args.device.startswith('cuda') else 'cpu'}",
        "EDO: trials sharing one device" + (", cached tables sized by their grants" if cached else ""),
        figures,
        settings={k: v for k, v in vars(args).items() if k != "json"} | {"wall_s": round(info["wall_s"])},
        device=args.device,
        notes=notes,
    )


def _x(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    return round(a[key] / b[key], 2) if b[key] else None


def _fault_figures(faults: dict[str, Any]) -> list[Any]:
    from record import Figure

    regrant = faults["regrant_hb"]
    return [
        Figure("re-grant after SIGKILL", regrant, "heartbeats", "<= 2", regrant is not None and regrant <= 2),
        Figure(
            "neighbours' OOMs when one trial overruns",
            faults["neighbour_ooms"],
            "",
            "0",
            faults["neighbour_ooms"] == 0,
        ),
    ]


if __name__ == "__main__":
    main()
