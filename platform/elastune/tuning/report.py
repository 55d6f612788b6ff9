"""What a trial tells the sweep's driver, typed: one `TrialReport` per `tune.report`.

Ray Tune carries a trial's reports as dicts, and several readers depend on their keys: ASHA (its
clock `progress_pct` and the metric `samples_per_s`), the searcher (the metric and the constraint
values), the callback that records trials (progress.py), the sweep's reference run and a resumed
sweep's replay of trials that already ended. `TrialReport` is the one place those keys are
spelled: the trial builds a report and sends `to_metrics()`; the driver reads Tune's last result
back with `TrialReport.from_metrics()` (Tune adds its own keys, such as `training_iteration`, which
are not ours and are left out) and turns it into a `TrialRecord` with `to_record()`.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from elastune.tracking.records import TrialRecord, TrialStatus, quartiles
from elastune.tuning.keys import CONSTRAINTS_ATTR, FINAL_KEY, GROUP_KEY
from elastune.workloads.quality import LOGLOSS, Direction, QualityMetric

if TYPE_CHECKING:
    from elastune.training.loop import Progress, TrainResult

__all__ = ["Constraints", "TrialReport", "constraint_values", "final_report", "oom_report", "progress_report"]


class Constraints(BaseModel):
    """Optuna's constraint values for a finished trial: <= 0 is feasible."""

    model_config = ConfigDict(frozen=True)

    memory: float  # measured peak over the ceiling, as a share of the ceiling
    quality: float  # the quality metric beyond the tolerated reference, as a share of that bound


class TrialReport(BaseModel):
    """One report of a trial: a progress report (ASHA's rungs) or the final one (`final`)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    final: bool = Field(default=False, alias=FINAL_KEY)  # only the last report: the trial ran to its end
    status: TrialStatus | None = None  # in a final report: ok, infeasible or oom
    error: str | None = None
    samples: int | None = None  # samples trained so far (a worker group: all workers')
    step: int | None = None
    # ASHA's clock: share of the trial's steps. Progress reports stop at 99, so ASHA's max_t (100,
    # answered with STOP) is reached only by the final report, after evaluation.
    progress_pct: int = 0
    loss: float | None = None  # training loss (progress reports)
    samples_per_s: float | None = None  # 0 during warm-up; None for a trial that ran out of memory
    units_per_s: float | None = None  # a workload's own throughput units (an LM's real tokens/s)
    units: str | None = None
    # samples/s over the trial's timed windows: [25th percentile, median, 75th] and their count
    samples_per_s_quartiles: list[float] | None = None
    windows: int | None = None
    peak_memory_bytes: int | None = None
    peak_memory_kind: str | None = None
    estimated_peak_bytes: int | None = None
    quality: float | None = None  # the value of the workload's quality metric
    quality_metric: str | None = None  # its name and direction (workloads/quality.py)
    quality_direction: Direction | None = None
    metrics: dict[str, float] | None = None  # every eval metric the workload computed
    oom_retries: int = 0
    quality_ok: bool | None = None
    node: str | None = None
    constraints: Constraints | None = Field(default=None, alias=CONSTRAINTS_ATTR)
    world_size: int | None = None  # a worker group's reports
    placement_group: str | None = Field(default=None, alias=GROUP_KEY)  # its placement group's id (hex)

    def to_metrics(self) -> dict[str, Any]:
        """The dict `tune.report` takes: every field under its wire name, None included (Tune
        checks that the sweep's metric is present in each result)."""
        return self.model_dump(by_alias=True)

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any]) -> TrialReport:
        """A report back from Tune's result dict, nested or flattened on '/' (Tune hands searchers
        flattened results)."""
        data = dict(metrics)
        for nested in (CONSTRAINTS_ATTR, "metrics"):
            prefix = nested + "/"
            flat = {k[len(prefix) :]: v for k, v in data.items() if k.startswith(prefix)}
            if flat and nested not in data:
                data[nested] = flat
        return cls.model_validate(data)

    def to_record(self, trial_id: str, number: int, params: dict[str, Any], config: dict[str, Any]) -> TrialRecord:
        """The record of a trial that ended with this as its last report: a trial without a final
        report was stopped early (pruned), one with no report at all failed."""
        reported = self.step is not None or self.samples is not None or self.final
        status: TrialStatus = (self.status or "ok") if self.final else ("pruned" if reported else "failed")
        return TrialRecord(
            trial_id=trial_id,
            number=number,
            status=status,
            params=params,
            config=config,
            steps=self.step,
            error=self.error or (None if reported else "the trial reported nothing"),
            metrics=dict(self.metrics or {}),
            **{name: getattr(self, name) for name in _AS_RECORDED},
        )

    @classmethod
    def replay(
        cls,
        trial: TrialRecord,
        ceiling: int | None,
        tolerance: float | None,
        reference: float | None,
        metric: QualityMetric = LOGLOSS,
    ) -> TrialReport:
        """The last report of a trial that already ended, rebuilt from its record (a resumed sweep
        repeats it instead of training again), so the searcher and ASHA hear what they heard."""
        constraints = None
        if trial.peak_memory_bytes is not None and trial.quality is not None:
            memory, quality, _ = constraint_values(
                trial.peak_memory_bytes, trial.quality, metric, ceiling, tolerance, reference
            )
            constraints = Constraints(memory=memory, quality=quality)
        elif trial.status == "oom":
            constraints = OOM_CONSTRAINTS
        return cls(
            final=trial.status != "pruned",  # a pruned trial never sent a final report
            status=trial.status,
            error=trial.error,
            step=trial.steps,
            progress_pct=100 if trial.status != "pruned" else 99,
            constraints=constraints,
            metrics=dict(trial.metrics) or None,
            **{name: getattr(trial, name) for name in _AS_RECORDED},
        )


# The figures a report and a record hold under the same name (to_record and replay copy them).
_AS_RECORDED = (
    "estimated_peak_bytes",
    "samples_per_s",
    "units_per_s",
    "units",
    "samples_per_s_quartiles",
    "windows",
    "peak_memory_bytes",
    "peak_memory_kind",
    "quality",
    "oom_retries",
    "quality_ok",
    "node",
)

# Out of memory at the smallest split: clearly over the ceiling, whatever it is.
OOM_CONSTRAINTS = Constraints(memory=1.0, quality=0.0)


def constraint_values(
    peak: int,
    quality: float,
    metric: QualityMetric,
    ceiling: int | None,
    tolerance: float | None,
    reference: float | None,
) -> tuple[float, float, bool | None]:
    """Optuna's constraint values (<= 0 feasible) for memory and quality, and whether quality held
    (None: no tolerance, or no reference to hold it to)."""
    memory = (peak - ceiling) / ceiling if ceiling else 0.0
    if tolerance is None or reference is None:
        return memory, 0.0, None
    over, ok = metric.check(quality, reference, tolerance)
    return memory, over, ok


# -- the reports a trial sends


def progress_report(p: Progress, samples_per_s: float | None = None, samples: int | None = None) -> TrialReport:
    """A progress report (ASHA's rungs); a worker group passes its totals."""
    return TrialReport(
        samples=p.samples if samples is None else samples,
        step=p.step,
        progress_pct=min(99, int(100 * p.step / p.steps)),  # 100 is the final report's
        loss=p.loss,
        samples_per_s=(p.samples_per_s or 0.0) if samples_per_s is None else samples_per_s,  # 0: warm-up
    )


def final_report(result: TrainResult, loop_config: dict[str, Any]) -> TrialReport:
    """The last report: measured figures, the trial's status, and Optuna's constraint values
    (<= 0 feasible): [memory over the ceiling, quality beyond the tolerated reference]."""
    ceiling, tolerance, ref = loop_config["ceiling"], loop_config["tolerance"], loop_config["reference_quality"]
    metric = QualityMetric(result.quality_metric, result.quality_direction)  # type: ignore[arg-type]
    memory, quality, quality_ok = constraint_values(
        result.peak_memory_bytes, result.quality, metric, ceiling, tolerance, ref
    )
    over = ceiling is not None and result.peak_memory_bytes > ceiling
    return TrialReport(
        final=True,
        status="infeasible" if over else "ok",
        error=f"measured peak {result.peak_memory_bytes} B is over the memory ceiling {ceiling} B" if over else None,
        samples=result.samples,
        step=result.steps,
        progress_pct=100,
        loss=result.train_loss,  # the run's mean training loss
        samples_per_s=result.samples_per_s,
        units_per_s=result.units_per_s,
        units=result.units,
        samples_per_s_quartiles=quartiles(result.window_samples_per_s[result.warmup_windows :]),
        windows=len(result.window_samples_per_s) - result.warmup_windows,
        peak_memory_bytes=result.peak_memory_bytes,
        peak_memory_kind=result.peak_memory_kind,
        estimated_peak_bytes=loop_config.get("estimate"),
        quality=result.quality,
        quality_metric=metric.name,
        quality_direction=metric.direction,
        metrics=result.metrics,
        oom_retries=result.oom_retries,
        quality_ok=quality_ok,
        node=_node_ip(),
        constraints=Constraints(memory=memory, quality=quality),
    )


def oom_report(error: str) -> TrialReport:
    """The final report of a trial that ran out of memory even at its smallest micro-batch."""
    return TrialReport(
        final=True, status="oom", error=error, samples=0, progress_pct=100, node=_node_ip(), constraints=OOM_CONSTRAINTS
    )


def _node_ip() -> str:
    """The Ray node this worker runs on (its id: several nodes may share one host in tests)."""
    import ray

    if not ray.is_initialized():  # not inside Ray (a direct call); asking would start or join one
        return socket.gethostname()
    return str(ray.get_runtime_context().get_node_id())
