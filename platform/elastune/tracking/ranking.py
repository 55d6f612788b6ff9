"""Which config a sweep crowns, and why: the one ranking that the results table, `SweepRecord.best`,
best_config.yaml, MLflow's best-so-far, pareto.png and the web UI all show.

Pure functions of the trials (no store, no Ray), so every rule is tested on hand-made records:

- Only feasible trials rank (they ran to the end within the ceiling and the quality tolerance).
- Confirmed trials rank first, by their confirmed ratio: the median, over the confirmation's
  rounds, of the config's samples/s divided by the reference's measured just before it in the
  same round (tuning/confirm.py). The reference counts at exactly 1. Trials the stage did not
  re-measure follow, by the search's single measured samples/s.
- Not distinguishable: where the confirmed ranges (lowest-highest round) of the configs with the
  highest median overlap, the machine could not tell them apart. They are `tied`, and the tie
  goes to the lower measured peak memory, not to the higher median.
- A proposal whose resolved config is the reference's own (`same_as_reference`) is the reference:
  its figures are the reference's, it is never confirmed against itself, and it never outranks the
  reference (a config measured against itself is no gain).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from elastune.dotted import flatten

if TYPE_CHECKING:
    from elastune.tracking.records import TrialRecord

__all__ = ["Ranking", "has_interval", "overlaps", "rank", "same_as_reference"]

REFERENCE = "reference"


@dataclass(frozen=True)
class Ranking:
    order: list[TrialRecord]  # the feasible trials, best first
    by: Literal["confirmed", "measured"]  # what ranks the first ones: the confirmed ratio, or samples/s
    # the trials the confirmation could not tell from the best (the best included), best first;
    # empty where there is no such tie
    tied: list[TrialRecord] = field(default_factory=list)
    twins: list[TrialRecord] = field(default_factory=list)  # proposals of the reference's own config

    @property
    def best(self) -> TrialRecord | None:
        return self.order[0] if self.order else None


def same_as_reference(trial: TrialRecord, reference: TrialRecord | None) -> bool:
    """Whether a proposal is the reference's own config: the same resolved config, each searched
    value the reference's. A record without a config (nothing to compare) is never one."""
    if reference is None or trial.trial_id == REFERENCE or not reference.config or trial.config != reference.config:
        return False
    resolved = flatten(reference.config)
    return all(key in resolved and resolved[key] == value for key, value in trial.params.items())


def overlaps(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two confirmed ranges [lowest, median, highest] share a value (ends included)."""
    return a[0] <= b[-1] and b[0] <= a[-1]


def has_interval(trial: TrialRecord) -> bool:
    """Whether a trial's confirmed ratio has a range to judge it by: two rounds or more. One round
    is a single ratio (its lowest and highest are that ratio); the reference's 1 is exact by
    definition. A record from before rounds were counted: where its lowest and highest differ."""
    if trial.trial_id == REFERENCE or not trial.confirmed_speedup:
        return False
    if trial.confirmed_rounds is not None:
        return trial.confirmed_rounds >= 2
    low, _, high = trial.confirmed_speedup
    return low != high


def rank(trials: Sequence[TrialRecord]) -> Ranking:
    """The feasible trials best first, as the module's docstring says."""
    reference = next((t for t in trials if t.trial_id == REFERENCE), None)
    feasible = [t for t in trials if t.feasible]
    twins = [t for t in feasible if same_as_reference(t, reference)]
    twin_ids = {t.trial_id for t in twins}
    reference_rate = reference.samples_per_s if reference is not None and reference.feasible else None

    def measured(t: TrialRecord) -> tuple[float, bool, int]:
        # a twin at the reference's own figure, after it (one that ran measured noise, not a gain)
        rate = reference_rate if t.trial_id in twin_ids and reference_rate is not None else t.samples_per_s
        return -(rate or 0.0), t.trial_id in twin_ids, t.number

    confirmed = [t for t in feasible if t.confirmed_speedup and t.trial_id not in twin_ids]
    confirmed_ids = {t.trial_id for t in confirmed}
    rest = sorted((t for t in feasible if t.trial_id not in confirmed_ids), key=measured)
    if not confirmed:
        return Ranking(rest, "measured", [], twins)
    confirmed.sort(key=lambda t: (-_median(t), t.number))
    top = confirmed[0]
    tied = [t for t in confirmed if t is top or overlaps(_range(t), _range(top))]
    if len(tied) < 2:
        return Ranking(confirmed + rest, "confirmed", [], twins)
    # not told apart: the one that needs less memory (unknown memory last), then the higher median
    tied.sort(key=lambda t: (math.inf if t.peak_memory_bytes is None else t.peak_memory_bytes, -_median(t), t.number))
    tied_ids = {t.trial_id for t in tied}
    return Ranking(tied + [t for t in confirmed if t.trial_id not in tied_ids] + rest, "confirmed", tied, twins)


def _median(trial: TrialRecord) -> float:
    return trial.confirmed_speedup[1] if trial.confirmed_speedup else 0.0


def _range(trial: TrialRecord) -> list[float]:
    return list(trial.confirmed_speedup or [0.0, 0.0, 0.0])
