"""The confirmation stage: the sweep's winner, measured again the way a comparison should be.

During the search each trial is measured once, beside whatever else ran then; on a shared machine
one config's figure moves by a third from run to run, more than most configs differ. So at the end
the `confirm.top` fastest feasible configs are measured again, `confirm.rounds` times: each round
runs the reference and then each config, one at a time (A B C, A B C, ...), and each config's
figure is its ratio to that round's reference. What the machine did to a whole round cancels in
the ratio; the median over rounds ranks the configs, and the lowest and highest ratios say how far
apart two of them must be to be told apart. The sweep's best is then the confirmed one
(SweepRecord.best), and the reference itself counts as a candidate at a ratio of exactly 1.

What the stage says follows from that (tracking/ranking.py ranks): a proposal of the reference's
own config is not measured against itself (its ratio is 1 by definition, and no gain); a config
confirmed in one round has a single ratio and no range, and says so; and where the ranges of the
fastest configs overlap, the machine could not tell them apart: the stage says so and the tie goes
to the lower peak memory.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from elastune.tracking.ranking import has_interval, same_as_reference
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.results import short_bytes, trial_label
from elastune.tuning.spec import Confirm

__all__ = ["confirm_best", "confirmation_candidates", "outcome_lines"]

# Measures one config (its searched params) in a fresh one-trial run and returns its samples/s, or
# None when it did not finish within the ceiling.
Measure = Callable[[Mapping[str, Any], str], float | None]


def confirmation_candidates(record: SweepRecord, settings: Confirm) -> list[TrialRecord]:
    """The `settings.top` fastest feasible trials of the search (the reference, and proposals of
    its own config, aside)."""
    reference = record.reference()
    searched = [
        t for t in record.trials if t.feasible and t.trial_id != "reference" and not same_as_reference(t, reference)
    ]
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
    for twin in (t for t in record.trials if t.feasible and same_as_reference(t, reference)):
        echo(f"confirmation: {_name(twin)} is the reference's own config; not measured against itself (1.00x)")
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
            trial.confirmed_rounds = len(got)
            changed.append(trial)
        else:
            echo(f"  {_name(trial)}: unconfirmed, none of its runs finished")
    if changed:
        reference.confirmed_speedup = [1.0, 1.0, 1.0]
        changed.append(reference)
        for line in outcome_lines(record):
            echo(line)
    return changed


def outcome_lines(record: SweepRecord) -> list[str]:
    """What the confirmation crowned, as the ranking has it (tracking/ranking.py): the best and its
    ratio with its range, or that it has none (one round), or that no config beat the reference;
    then, where the best's range overlaps others', that the machine could not tell them apart."""
    ranking = record.ranking()
    best = ranking.best
    if best is None or not best.confirmed_speedup:
        return []
    low, median, high = best.confirmed_speedup
    if best.trial_id == "reference":
        beaten = "told apart from it" if ranking.tied else "faster"
        said = f"confirmed best: the reference itself; no config was {beaten} in the rounds"
    elif has_interval(best):
        said = f"confirmed best: {_name(best)}, {median:.2f}x the reference (rounds {low:.2f}x-{high:.2f}x)"
    else:
        said = f"confirmed best: {_name(best)}, {median:.2f}x the reference (one round: a single ratio, no range)"
    lines = [said]
    if ranking.tied:
        ranges = ", ".join(f"{_name(t)} {_span(t)}" for t in ranking.tied)
        peak = short_bytes(best.peak_memory_bytes) if best.peak_memory_bytes else "unknown"
        lines.append(
            f"not distinguishable on this machine: {ranges} overlap; the tie goes to the lower peak memory, "
            f"{_name(best)} ({peak})"
        )
    return lines


def _span(trial: TrialRecord) -> str:
    """A confirmed ratio's range, or its single value (the reference's 1, one round's ratio)."""
    low, median, high = trial.confirmed_speedup or [1.0, 1.0, 1.0]
    return f"{low:.2f}x-{high:.2f}x" if has_interval(trial) else f"{median:.2f}x"


def _name(trial: TrialRecord) -> str:
    """A trial as the search's lines and the results table name it (trial 7), not by its Tune id."""
    return "the reference" if trial.trial_id == "reference" else f"trial {trial_label(trial)}"
