"""The confirmation stage: the sweep's winner, measured again the way a comparison should be.

During the search each trial is measured once, beside whatever else ran then; on a shared machine
one config's figure moves by a third from run to run, more than most configs differ. So at the end
the `confirm.top` fastest feasible configs are measured again, `confirm.rounds` times: each round
runs the reference and then each config, one at a time (A B C, A B C, ...), and each config's
figure is its ratio to that round's reference. What the machine did to a whole round cancels in
the ratio; the median over rounds ranks the configs, and the lowest and highest ratios say how far
apart two of them must be to be told apart. The sweep's best is then the confirmed one
(SweepRecord.best), and the reference itself counts as a candidate at a ratio of exactly 1.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.results import trial_label
from elastune.tuning.spec import Confirm

__all__ = ["confirm_best", "confirmation_candidates"]

# Measures one config (its searched params) in a fresh one-trial run and returns its samples/s, or
# None when it did not finish within the ceiling.
Measure = Callable[[Mapping[str, Any], str], float | None]


def confirmation_candidates(record: SweepRecord, settings: Confirm) -> list[TrialRecord]:
    """The `settings.top` fastest feasible trials of the search (the reference aside)."""
    searched = [t for t in record.trials if t.feasible and t.trial_id != "reference"]
    return sorted(searched, key=lambda t: -(t.samples_per_s or 0.0))[: settings.top]


def confirm_best(
    record: SweepRecord,
    settings: Confirm,
    reference_params: Mapping[str, Any],
    measure: Measure,
    *,
    stopped: Callable[[], bool] = lambda: False,
    echo: Callable[[str], None] = print,
) -> list[TrialRecord]:
    """Measure the candidates against the reference, interleaved, and set each one's
    `confirmed_speedup` [lowest, median, highest ratio]; the reference's is [1, 1, 1]. Returns the
    trials whose records changed (for the tracker to write); none when stopped part-way or when
    the reference did not finish feasible (nothing to compare with)."""
    reference = next((t for t in record.trials if t.trial_id == "reference"), None)
    candidates = confirmation_candidates(record, settings)
    if not candidates or reference is None or not reference.feasible:
        if candidates:
            echo("confirmation: skipped, the reference run did not finish within the ceiling and tolerance")
        return []
    rounds = f"{settings.rounds} round" + ("s" if settings.rounds != 1 else "")
    configs = "the fastest config" if len(candidates) == 1 else f"the {len(candidates)} fastest configs"
    echo(f"confirmation: {rounds} of the reference then {configs}, one run at a time")
    ratios: dict[str, list[float]] = {t.trial_id: [] for t in candidates}
    for round_ in range(1, settings.rounds + 1):
        if stopped():
            return []
        base = measure(reference_params, f"confirm-{round_}-reference")
        if not base:
            echo(f"  round {round_}: the reference did not finish; the round is left out")
            continue
        shown = []
        for trial in candidates:
            if stopped():
                return []
            rate = measure(trial.params, f"confirm-{round_}-{trial.trial_id}")
            if rate:
                ratios[trial.trial_id].append(rate / base)
                shown.append(f"{_name(trial)} {rate / base:.2f}x")
        echo(f"  round {round_}: reference {base:,.0f} samples/s; " + ", ".join(shown or ["no config finished"]))
    changed = []
    for trial in candidates:
        got = ratios[trial.trial_id]
        if got:
            trial.confirmed_speedup = [min(got), statistics.median(got), max(got)]
            changed.append(trial)
        else:
            echo(f"  {_name(trial)}: unconfirmed, none of its runs finished")
    if changed:
        reference.confirmed_speedup = [1.0, 1.0, 1.0]
        changed.append(reference)
        best = max(changed, key=lambda t: t.confirmed_speedup[1] if t.confirmed_speedup else 0.0)
        low, median, high = best.confirmed_speedup or [1.0, 1.0, 1.0]
        echo(f"confirmed best: {_name(best)}, {median:.2f}x the reference (rounds {low:.2f}x-{high:.2f}x)")
    return changed


def _name(trial: TrialRecord) -> str:
    """A trial as the search's lines and the results table name it (trial 7), not by its Tune id."""
    return "the reference" if trial.trial_id == "reference" else f"trial {trial_label(trial)}"
