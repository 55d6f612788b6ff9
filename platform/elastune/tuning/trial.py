"""One trial: a Ray Tune function trainable that runs the engine.

Ray places each trial with the spec's resources (CPUs, and a GPU share that may be fractional) and
the trial runs `training.loop.train` in that process, exactly what `elastune train` runs. It
reports to Tune at every progress point (throughput: ASHA's rungs), then once more with the final
figures and the constraint values the sampler learns from.

Why not a Ray Train worker group per trial: on Ray 2.60 a trial stopped by ASHA left its Train
controller and workers holding their CPUs, and the next trials waited for them forever (seen on
a 2-CPU machine). One process per trial is also what keeps the trial's memory measurement
(its own resident set or CUDA allocator) clean. Data parallelism across GPUs within one trial is
therefore not offered yet (`resources.workers_per_trial` is 1).

Untyped dicts exist here only because Ray hands them over; the first thing each function does is
turn them back into a RunConfig / SweepSpec.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from elastune.config import RunConfig

__all__ = ["FINAL_KEY", "TrialContext", "final_metrics", "oom_metrics", "run_trial"]

FINAL_KEY = "elastune_final"  # present (True) only in a trial's last report: it ran to the end
META_PREFIX = "elastune_"  # keys the searcher adds to a trial's config (number, estimate)


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one sweep shares; passed with `tune.with_parameters`."""

    spec: dict[str, Any]  # SweepSpec.model_dump(mode="json")
    reference_logloss: float | None = None
    edo: bool = False


def run_trial(config: dict[str, Any], context: TrialContext) -> None:
    """Tune's function trainable: build this proposal's RunConfig and run the engine in this trial
    process, which Ray placed with the trial's CPUs and (possibly fractional) GPU share."""
    from ray import tune

    from elastune.training.loop import OutOfMemory, train
    from elastune.tuning.spec import SweepSpec

    spec = SweepSpec.model_validate(context.spec)
    cfg = spec.trial_config({k: v for k, v in config.items() if not k.startswith(META_PREFIX)})
    limits = _limits(cfg, spec, context)

    def report(p: Any) -> None:
        tune.report(
            {
                "samples": p.samples,
                "step": p.step,
                # ASHA's clock: share of this trial's steps. Capped at 99 so reaching max_t=100 (which
                # ASHA answers with STOP) only happens in the final report, after evaluation.
                "progress_pct": min(99, int(100 * p.step / p.steps)),
                "loss": p.loss,
                "samples_per_s": p.samples_per_s or 0.0,  # 0 during warm-up, before a rate exists
            }
        )

    try:
        if context.edo:
            result = _train_under_edo(cfg, spec, report, limits["report_every"])
        else:
            result = train(cfg, on_progress=report, progress_every=limits["report_every"])
    except OutOfMemory as exc:
        tune.report(oom_metrics(cfg, str(exc)))
        return
    tune.report(final_metrics(result, limits))


def _train_under_edo(cfg: RunConfig, spec: Any, report: Any, report_every: int) -> Any:
    """Train with a grant from the cluster's EDO broker: acquire (wait), adapt at every step
    boundary, release at the end. The device is this trial's GPU share, or the node's virtual
    device on CPUs; it is registered with the broker by whichever trial first uses it."""
    import ray
    from ray import tune

    from elastune.memory.broker import ensure_broker
    from elastune.memory.client import edo_session, plan_demand
    from elastune.memory.policy import DeviceSpec
    from elastune.memory.probe import CudaProbe, VirtualProbe
    from elastune.training.loop import train
    from elastune.training.precision import resolve_device

    device = resolve_device(cfg.device)
    node = ray.get_runtime_context().get_node_id()[:12]
    probe: Any
    if device.type == "cuda":
        probe = CudaProbe(device)
        gpu_ids = ray.get_gpu_ids()  # physical ids: CUDA_VISIBLE_DEVICES renumbers them per process
        name = f"{node}/gpu:{gpu_ids[0] if gpu_ids else device.index or 0}"
        capacity = probe.total_bytes()
    else:
        capacity = spec.virtual_capacity()
        probe = VirtualProbe(capacity)
        name = f"{node}/virtual:0"
    ensure_broker(devices=[DeviceSpec(name, capacity, spec.edo.reserve)])
    trial_id = str(tune.get_context().get_trial_id())
    with edo_session(
        trial_id=trial_id, device=name, demand=plan_demand(cfg), probe=probe, timeout_s=spec.edo.acquire_timeout_s
    ) as boundary:
        return train(cfg, probe=probe, boundary=boundary, on_progress=report, progress_every=report_every)


def _limits(cfg: RunConfig, spec: Any, context: TrialContext) -> dict[str, Any]:
    return {
        "ceiling": spec.constraints.memory_ceiling,
        "tolerance": spec.constraints.quality_tolerance if context.reference_logloss else None,
        "reference_logloss": context.reference_logloss,
        "report_every": max(1, cfg.steps // 10),
    }


def final_metrics(result: Any, loop_config: dict[str, Any]) -> dict[str, Any]:
    """The last report: measured figures, the trial's status, and Optuna's constraint values
    (<= 0 feasible): [memory over the ceiling, log loss over the tolerated reference]."""
    from elastune.tuning.search import CONSTRAINTS_ATTR

    ceiling, tolerance, ref = loop_config["ceiling"], loop_config["tolerance"], loop_config["reference_logloss"]
    memory = (result.peak_memory_bytes - ceiling) / ceiling if ceiling else 0.0
    quality = 0.0
    quality_ok: bool | None = None
    if tolerance is not None and ref:
        allowed = ref * (1 + tolerance)
        quality = (result.val_logloss - allowed) / allowed
        quality_ok = result.val_logloss <= allowed
    over = ceiling is not None and result.peak_memory_bytes > ceiling
    return {
        FINAL_KEY: True,
        "status": "infeasible" if over else "ok",
        "error": f"measured peak {result.peak_memory_bytes} B is over the memory ceiling {ceiling} B" if over else None,
        "samples": result.samples,
        "step": result.steps,
        "progress_pct": 100,
        "samples_per_s": result.samples_per_s,
        "peak_memory_bytes": result.peak_memory_bytes,
        "peak_memory_kind": result.peak_memory_kind,
        "estimated_peak_bytes": result.estimated_peak_bytes,
        "val_logloss": result.val_logloss,
        "val_auc": result.val_auc,
        "oom_retries": result.oom_retries,
        "quality_ok": quality_ok,
        "node": _node_ip(),
        CONSTRAINTS_ATTR: {"memory": memory, "quality": quality},
    }


def oom_metrics(cfg: RunConfig, error: str) -> dict[str, Any]:
    from elastune.tuning.search import CONSTRAINTS_ATTR

    return {
        FINAL_KEY: True,
        "status": "oom",
        "error": error,
        "samples": 0,
        "progress_pct": 100,
        "samples_per_s": None,
        "node": _node_ip(),
        CONSTRAINTS_ATTR: {"memory": 1.0, "quality": 0.0},  # out of memory at the smallest split: clearly over
    }


def _node_ip() -> str:
    """The Ray node this worker runs on (its id: several nodes may share one host in tests)."""
    import ray

    if not ray.is_initialized():  # not inside Ray (a direct call); asking would start or join one
        return socket.gethostname()
    return str(ray.get_runtime_context().get_node_id())
