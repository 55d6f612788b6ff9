"""What a sweep leaves behind, as plain data: one `SweepRecord` with a `TrialRecord` per trial.

These are the contract between the tuner (which produces them), the MLflow tracker (which stores
and reads them back), `elastune results` and the web UI (which show them). No mlflow, Ray or torch
here, so every reader can import it cheaply.

A trial's status:
- ok: trained to the end; its metrics are measured.
- infeasible: the estimator predicted a peak over the memory ceiling, so it was never launched.
- oom: it ran out of memory even after halving the micro-batch as far as it could.
- pruned: ASHA stopped it early at a throughput rung (its figures are from the steps it ran).
- failed: anything else went wrong (the error is kept).
- running: not finished yet (only seen while a sweep is live).
- interrupted: stopped with its sweep's driver (Ctrl-C, SIGTERM, `ray job stop`); a resume runs it
  again from the start.

A sweep's status: running (its driver beats), finished, failed, interrupted (its driver was
stopped and said so), or stale: recorded as running but its driver stopped beating (killed, or
its machine died), so it is resumable like an interrupted one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from elastune.errors import InputError
from elastune.tracking.ranking import Ranking, rank

__all__ = [
    "FINAL_TRIAL_STATUSES",
    "RecordError",
    "SweepRecord",
    "SweepStatus",
    "TrialRecord",
    "TrialStatus",
    "pareto_front",
    "quartiles",
    "shown_params",
    "shown_value",
    "trial_label",
]

TrialStatus = Literal["ok", "infeasible", "oom", "pruned", "failed", "running", "interrupted"]
SweepStatus = Literal["running", "finished", "failed", "interrupted", "stale"]
# A trial in one of these ended on its own: a resumed sweep never runs or logs it again.
FINAL_TRIAL_STATUSES = frozenset({"ok", "infeasible", "oom", "pruned", "failed"})


# Reading a record back (from MLflow tags, which anyone with the store could have written) checks
# every field's type and refuses a key the record does not have, rather than dropping it.
_STRICT = ConfigDict(extra="forbid")


class RecordError(InputError):
    """A stored record that is not one this version of elastune wrote: names the field and the value."""


@dataclass
class TrialRecord:
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    trial_id: str  # Ray Tune's trial id, or "screened-N" for a proposal the estimator refused
    number: int  # order in which the sampler proposed it (0-based)
    status: TrialStatus
    params: dict[str, Any]  # the searched parameters, dotted keys -> values
    config: dict[str, Any]  # the resolved RunConfig (RunConfig.to_dict())
    estimated_peak_bytes: int | None = None  # predicted before launch (estimator)
    samples_per_s: float | None = None
    units_per_s: float | None = None  # the workload's own throughput units, e.g. an LM's real tokens/s
    units: str | None = None
    # samples/s over the trial's timed windows (progress_every steps each): [25th percentile,
    # median, 75th] and how many windows; the spread says how far one trial's figure can be told
    # from another's
    samples_per_s_quartiles: list[float] | None = None
    windows: int | None = None
    # the confirmation stage (tuning/confirm.py): [lowest, median, highest] of its per-round
    # samples/s ratios to the reference measured just before it; None: not confirmed
    confirmed_speedup: list[float] | None = None
    # how many rounds those ratios come from (one round: a single ratio, no range); None: not
    # confirmed, the reference (1 by definition), or a record from before rounds were counted
    confirmed_rounds: int | None = None
    peak_memory_bytes: int | None = None  # measured
    peak_memory_kind: str | None = None  # cuda_reserved | cpu_rss_hwm | virtual
    quality: float | None = None  # the sweep's quality metric (SweepRecord.quality_metric)
    metrics: dict[str, float] = field(default_factory=dict)  # every eval metric the workload computed
    oom_retries: int = 0
    steps: int | None = None
    quality_ok: bool | None = None  # the quality metric within the sweep's tolerance of the reference
    error: str | None = None
    node: str | None = None  # IP of the node the trial ran on
    mlflow_run_id: str | None = None

    @property
    def feasible(self) -> bool:
        """Ran to the end, within the quality tolerance: a candidate for the best config."""
        return self.status == "ok" and self.samples_per_s is not None and self.quality_ok is not False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialRecord:
        """The record `to_dict` wrote; RecordError for a wrong type or a key it does not have.
        A record from before workloads declared their metrics holds `val_logloss` and `val_auc`:
        they become its metrics `logloss` and `auc`, and log loss its quality."""
        return _with_quality(_validate(_TRIAL, _with_metrics(data)))


@dataclass
class SweepRecord:
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    sweep_id: str
    spec: dict[str, Any]  # the validated SweepSpec as a dict
    status: SweepStatus
    memory_ceiling_bytes: int | None = None
    quality_tolerance: float | None = None  # e.g. 0.02: the quality metric at most 2% worse than the reference
    # The workload's quality metric (name, min or max) and the reference run's value of it.
    quality_metric: str = "logloss"
    quality_direction: Literal["min", "max"] = "min"
    reference_quality: float | None = None
    reference_samples_per_s: float | None = None
    started_at: float | None = None  # unix seconds
    ended_at: float | None = None
    job_id: str | None = None  # Ray job id when run through `ray job submit`
    ray_address: str | None = None  # the cluster it ran on (None: a local Ray it started); --resume reuses it
    heartbeat_at: float | None = None  # unix seconds of the driver's last beat (running sweeps)
    mlflow_run_id: str | None = None
    trials: list[TrialRecord] = field(default_factory=list)

    def best(self) -> TrialRecord | None:
        """The first of `ranking()`: the fastest trial that finished within the ceiling and the
        quality tolerance, by the confirmation stage's median ratio to the reference where it ran
        (of configs it could not tell apart, the one with the lower peak memory), else by samples/s."""
        return self.ranking().best

    def ranking(self) -> Ranking:
        """The feasible trials best first, and why (tracking/ranking.py)."""
        return rank(self.trials)

    def reference(self) -> TrialRecord | None:
        return next((t for t in self.trials if t.trial_id == "reference"), None)

    def counts(self) -> dict[str, int]:
        """Trials by status, every status present (zeros included), for progress lines and the UI."""
        out = {status: 0 for status in ("ok", "infeasible", "oom", "pruned", "failed", "running", "interrupted")}
        for trial in self.trials:
            out[trial.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRecord:
        """The record `to_dict` wrote, trials included; RecordError as `TrialRecord.from_dict`.
        A record from before workloads declared their quality metric names it reference_logloss."""
        data = dict(data)
        if "reference_logloss" in data and "reference_quality" not in data:
            data["reference_quality"] = data.pop("reference_logloss")
        data["trials"] = [_with_metrics(t) if isinstance(t, Mapping) else t for t in data.get("trials", [])]
        record = _validate(_SWEEP, data)
        for trial in record.trials:
            _with_quality(trial)
        return record


_OLD_METRICS = {"val_logloss": "logloss", "val_auc": "auc"}  # fields of records before `metrics`


def _with_metrics(data: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's record with an older release's `val_logloss` / `val_auc` fields as metrics."""
    out = dict(data)
    old = {name: out.pop(field) for field, name in _OLD_METRICS.items() if field in out}
    metrics = out.get("metrics")
    if not isinstance(metrics, Mapping):
        return out
    out["metrics"] = {**{k: v for k, v in old.items() if v is not None}, **metrics}
    return out


def _with_quality(trial: TrialRecord) -> TrialRecord:
    """A trial recorded before workloads declared a quality metric was judged by its eval log
    loss: that is its quality."""
    if trial.quality is None and "logloss" in trial.metrics and set(trial.metrics) <= {"logloss", "auc"}:
        trial.quality = trial.metrics["logloss"]
    return trial


_TRIAL = TypeAdapter(TrialRecord)
_SWEEP = TypeAdapter(SweepRecord)


R = TypeVar("R")


def _validate(adapter: TypeAdapter[R], data: Mapping[str, Any]) -> R:
    try:
        return adapter.validate_python(dict(data))
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:5]:
            where = ".".join(str(part) for part in error["loc"]) or "record"
            value = repr(error.get("input"))
            problems.append(f"{where} = {value[:80]}: {error['msg']}")
        raise RecordError(
            "not a record this version of elastune wrote (" + "; ".join(problems) + "); "
            "it was written by another version or edited by hand: read it with the elastune that wrote it"
        ) from exc


def quartiles(rates: Sequence[float]) -> list[float] | None:
    """[25th percentile, median, 75th] of `rates` (linear interpolation between them); None for
    none. With one or two windows the quartiles are their spread, not a distribution's."""
    if not rates:
        return None
    if len(rates) == 1:
        return [rates[0]] * 3
    return statistics.quantiles(rates, n=4, method="inclusive")


def pareto_front(trials: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Trials no other trial beats on both axes: higher samples/s and lower measured peak memory.

    Only trials that ran to the end (status ok) with both figures count. Sorted by peak memory.
    """
    points = [t for t in trials if t.status == "ok" and t.samples_per_s is not None and t.peak_memory_bytes is not None]
    points.sort(key=lambda t: (t.peak_memory_bytes, -(t.samples_per_s or 0.0)))
    front: list[TrialRecord] = []
    best_speed = float("-inf")
    for trial in points:
        speed = trial.samples_per_s or 0.0
        if speed > best_speed:  # cheaper-or-equal memory was already seen, so it must be faster
            front.append(trial)
            best_speed = speed
    return front


def trial_label(trial: TrialRecord) -> str:
    """How the console, the results table and pareto.png name a trial: its proposal number, as its
    line said ("trial 3 ok: ..."), or `ref` for the reference."""
    return "ref" if trial.trial_id == "reference" else str(trial.number) if trial.number >= 0 else trial.trial_id


SIGNIFICANT = 3  # digits of a searched float wherever it is shown (the config files keep every digit)


def shown_value(value: Any) -> str:
    """A searched value as a person reads it: a float to three significant digits (0.18249340522238752
    -> 0.182, 1234.5 -> 1230, 3.1e-05 -> 3.1e-05), inside lists too; everything else as `str` (ints
    whole: a micro-batch of 1024 stays 1024). Only for showing: best_config.yaml, trials.csv and
    MLflow's params keep the value itself."""
    if isinstance(value, float) and math.isfinite(value):
        return format(float(f"{value:.{SIGNIFICANT}g}"), "g")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown_value(item) for item in value) + "]"
    return str(value)


def shown_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Each searched value as `shown_value` writes it, under its own key."""
    return {key: shown_value(value) for key, value in params.items()}
