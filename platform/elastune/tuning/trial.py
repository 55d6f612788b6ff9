"""One trial: a Ray Tune function trainable that runs the engine, in its own process or as a Ray
Train worker group.

`resources.workers_per_trial: 1` (the default): Ray places the trial with the spec's resources
(CPUs, and a GPU share that may be fractional) and the trial runs `training.loop.train` in that
process, exactly what `elastune train` runs. This path stays for one worker because it is much
cheaper (a Ray Train run starts more Ray processes: controller, report queue, synchronization
actor and the workers; 20-30 s per trial on a busy 2-core machine), the process's memory
measurement is the trial's own, and EDO's device sharing works on it.

`workers_per_trial: N > 1`: the trial process only drives a Ray Train worker group
(tuning/worker_group.py).

What a trial reports is a `TrialReport` (tuning/report.py). Untyped dicts exist here only because
Ray hands them over; the first thing each function does is turn them back into a RunConfig /
SweepSpec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elastune.config import RunConfig
from elastune.tuning.keys import ESTIMATE_KEY, META_PREFIX
from elastune.tuning.report import TrialReport, final_report, oom_report, progress_report

if TYPE_CHECKING:
    from elastune.training.loop import Progress, TrainResult
    from elastune.tuning.spec import SweepSpec

__all__ = ["TrialContext", "run_trial"]


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one sweep shares; passed with `tune.with_parameters`."""

    spec: dict[str, Any]  # SweepSpec.model_dump(mode="json")
    reference_quality: float | None = None  # the reference run's value of the quality metric
    edo: bool = False
    # Resumed sweeps: trial id -> the last report of a trial that already ended. Tune's saved
    # state can be older than the driver's last word (it is saved every few seconds), so it may
    # start such a trial again; the trial then only repeats that report (nothing is trained).
    finished: dict[str, TrialReport] | None = None
    # The search's: the reference run's last report. A proposal of the reference's own config
    # repeats it instead of training: its figures are the reference's by definition, and a second
    # measurement of the same config would be read as a gain or a loss that is only noise.
    reference: TrialReport | None = None


def run_trial(config: dict[str, Any], context: TrialContext) -> None:
    """Tune's function trainable: build this proposal's RunConfig and run the engine, in this
    trial process (one worker) or on a Ray Train worker group (several)."""
    from ray import tune

    from elastune.errors import OutOfMemory
    from elastune.training.loop import train
    from elastune.tuning.spec import SweepSpec

    done = (context.finished or {}).get(tune.get_context().get_trial_id() or "")
    if done is not None:
        if done.status == "failed":  # it failed before: fail the same way (Tune records an error)
            raise RuntimeError(f"this trial already failed before the sweep was resumed: {done.error}")
        tune.report(done.to_metrics())
        return
    spec = SweepSpec.model_validate(context.spec)
    cfg = spec.trial_config({k: v for k, v in config.items() if not k.startswith(META_PREFIX)})
    if context.reference is not None and cfg.to_dict() == spec.reference_config().to_dict():
        tune.report(context.reference.to_metrics())  # Optuna and ASHA hear the reference's figures
        return
    limits = _limits(cfg, spec, context)
    # The searcher priced the proposal for this trial's device already; the reference was not priced.
    limits["estimate"] = config.get(ESTIMATE_KEY) or _estimate(cfg)
    if spec.resources.workers_per_trial > 1:
        from elastune.tuning.worker_group import run_worker_group

        run_worker_group(cfg, spec, limits)
        return

    def report(p: Progress) -> None:
        tune.report(progress_report(p).to_metrics())

    try:
        if context.edo:
            result = _train_under_edo(cfg, spec, report, limits["report_every"])
        else:
            result = train(cfg, on_progress=report, progress_every=limits["report_every"])
    except OutOfMemory as exc:
        tune.report(oom_report(str(exc)).to_metrics())
        return
    tune.report(final_report(result, limits).to_metrics())


def _train_under_edo(
    cfg: RunConfig, spec: SweepSpec, report: Callable[[Progress], None], report_every: int
) -> TrainResult:
    """Train with a grant from the cluster's EDO broker: acquire (wait), adapt at every step
    boundary, release at the end. The device is this trial's GPU share, or the node's virtual
    device on CPUs; it is registered with the broker by whichever trial first uses it."""
    import ray
    from ray import tune

    from elastune.edo.broker import ensure_broker
    from elastune.edo.client import edo_session, plan_demand
    from elastune.edo.policy import DeviceSpec
    from elastune.training.loop import train
    from elastune.training.precision import resolve_device
    from elastune.training.probe import CudaProbe, VirtualProbe

    device = resolve_device(cfg.device)
    node = ray.get_runtime_context().get_node_id()[:12]
    probe: Any
    if device.type == "cuda":
        probe = CudaProbe(device)
        gpu_ids = ray.get_gpu_ids()  # physical ids: CUDA_VISIBLE_DEVICES renumbers them per process
        name = f"{node}/gpu:{gpu_ids[0] if gpu_ids else device.index or 0}"
        capacity = probe.total_bytes()
    else:
        virtual = spec.virtual_capacity()
        if virtual is None:  # the spec's validation refuses EDO on CPUs without a size
            raise ValueError("EDO on CPUs needs edo.virtual_capacity or constraints.memory_ceiling")
        capacity = virtual
        probe = VirtualProbe(capacity)
        name = f"{node}/virtual:0"
    ensure_broker(devices=[DeviceSpec(name, capacity, spec.edo.reserve)])
    trial_id = str(tune.get_context().get_trial_id())
    with edo_session(
        trial_id=trial_id, device=name, demand=plan_demand(cfg), probe=probe, timeout_s=spec.edo.acquire_timeout_s
    ) as boundary:
        built = boundary.config_for_grant(cfg)  # a cache only as large as the grant holds
        return train(built, probe=probe, boundary=boundary, on_progress=report, progress_every=report_every)


def _estimate(cfg: RunConfig) -> int:
    from elastune.memory.estimate import estimate  # lazy: the fake-tensor trace is heavy to import

    return estimate(cfg).peak_bytes


def _limits(cfg: RunConfig, spec: SweepSpec, context: TrialContext) -> dict[str, Any]:
    return {
        "ceiling": spec.constraints.memory_ceiling,
        "tolerance": spec.constraints.quality_tolerance if context.reference_quality is not None else None,
        "reference_quality": context.reference_quality,
        "report_every": max(1, cfg.steps // 10),
    }
