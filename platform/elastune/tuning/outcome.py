"""How a sweep that ran to its end turned out, as its exit code says it: 0, a config was found; 1, no
trial completed (every proposal failed: a script or a cluster cannot tell that from success by
reading "finished"); 2, nothing feasible: every proposal was over the memory ceiling (screened out,
or out of memory) or every one that ran missed the quality tolerance. The message says what would
change that: the cheapest config of the space and a ceiling that fits it, or the tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastune.tracking.records import SweepRecord, TrialRecord, shown_params
from elastune.tuning.results import short_bytes
from elastune.tuning.spec import SweepSpec
from elastune.units import human_bytes

__all__ = ["NOTHING_FEASIBLE", "NO_TRIAL_COMPLETED", "Outcome", "outcome"]

NO_TRIAL_COMPLETED = 1
NOTHING_FEASIBLE = 2
_MEMORY = frozenset({"infeasible", "oom"})  # a proposal the ceiling ruled out, before or while it ran
_MiB = 2**20


@dataclass(frozen=True)
class Outcome:
    exit_code: int  # 0, NO_TRIAL_COMPLETED or NOTHING_FEASIBLE
    message: str = ""


def outcome(record: SweepRecord, spec: SweepSpec) -> Outcome:
    """The outcome of a finished sweep (an interrupted or stale one says so on its own)."""
    proposals = [t for t in record.trials if t.trial_id != "reference"]
    if record.status != "finished" or any(t.feasible for t in proposals):
        return Outcome(0)
    if proposals and all(t.status in _MEMORY for t in proposals):
        return Outcome(NOTHING_FEASIBLE, _over_the_ceiling(proposals, spec))
    ran = [t for t in proposals if t.status == "ok"]
    if ran:
        tolerance = spec.constraints.quality_tolerance or 0.0
        return Outcome(
            NOTHING_FEASIBLE,
            f"nothing feasible: {len(ran)} trial(s) ran, none with {record.quality_metric} within "
            f"{tolerance:.0%} of the reference's ({record.reference_quality}); loosen "
            "constraints.quality_tolerance, or give the trials more steps (budget.trial_samples)",
        )
    counts = ", ".join(f"{n} {status}" for status, n in record.counts().items() if n)
    first = next((t.error for t in proposals if t.error), None)
    return Outcome(
        NO_TRIAL_COMPLETED,
        f"no trial completed ({counts or 'no proposals'})" + (f"; the first error: {first}" if first else ""),
    )


def _over_the_ceiling(proposals: list[TrialRecord], spec: SweepSpec) -> str:
    """Nothing fitted: the cheapest proposal tried, the space's cheapest config, a ceiling for it."""
    from elastune.tuning.pricing import cheapest_estimate  # lazy: the estimator pulls in torch

    ceiling = spec.constraints.memory_ceiling
    priced = [t for t in proposals if t.estimated_peak_bytes is not None]
    tried = min(priced, key=lambda t: t.estimated_peak_bytes or 0, default=None)
    said = f"nothing feasible: all {len(proposals)} proposals were over the memory ceiling"
    said += f" ({short_bytes(ceiling)})" if ceiling else ""
    if tried is not None:
        said += (
            f"; the cheapest tried: {_shown(tried.params)}, {human_bytes(tried.estimated_peak_bytes or 0)} predicted"
        )
    bound, params = cheapest_estimate(spec)
    fits = math.ceil(bound / _MiB)
    return (
        f"{said}; the cheapest config of the space: {_shown(params)}, {human_bytes(bound)} with the "
        f"estimator's screening margin. A ceiling of {fits}MiB or more fits it: --memory-ceiling {fits}MiB"
    )


def _shown(params: dict[str, object]) -> str:
    """`embedding.strategy=hashed, cache_ratio=0.182`: dotted keys as --set takes them, floats to
    three significant digits; the base config where nothing is searched."""
    return ", ".join(f"{key}={value}" for key, value in shown_params(params).items()) or "the base config"
