"""ASHA's stopping rule replayed over measured throughput (bench/tuner.py replay): how often would
the sweep's scheduler have stopped the config that turns out fastest, and what does it save?

A sweep runs Ray Tune's ASHAScheduler on `progress_pct` (each trial's share of its own steps) with
the running samples/s as its metric (tuning/sweep.py). A trial reports every 10 steps; during
warm-up it reports 0 samples/s. `Bracket` is Ray's rule (ray/tune/schedulers/async_hyperband.py,
`_Bracket` with one bracket and `stop_last_trials`): rungs at grace x rf^k below max_t; the first
report at or past a rung the trial has not been recorded at is compared with the (1 - 1/rf)
quantile of the values recorded there so far, and recorded. tests/unit/test_asha_replay.py checks
it decides as Ray's own class does.

`margin` is the change under test: a trial is stopped only when its value is below the cutoff by
more than its own measured spread (the relative inter-quartile range of its timed windows so far),
so a rung decision is never made inside the noise of the figures it compares.

`curve` rebuilds what a trial reported from what `elastune train --format json` records: its timed
windows (10 steps each, after warm-up) and its final figure. The running rate at a report is the
windows completed by then, combined as the loop's cumulative rate is (equal samples per window:
the harmonic mean); before the first window completes, the first window's rate.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

REPORT_EVERY = 10  # steps between a trial's progress reports (training.loop progress_every)
WINDOW_STEPS = 10  # steps per timed window (the same number in the loop)


def rungs(grace: int, max_t: int, rf: float) -> list[float]:
    """Ray's milestones for one bracket, ascending: grace * rf**k for k < MAX_RUNGS."""
    count = int(np.log(max_t / grace) / np.log(rf) + 1)
    return [grace * rf**k for k in range(count)]


@dataclass
class Bracket:
    grace: int
    rf: float
    max_t: int = 100
    margin: bool = False  # stop only outside the trial's measured spread
    recorded: dict[float, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.recorded = {m: {} for m in rungs(self.grace, self.max_t, self.rf)}

    def on_result(self, trial_id: str, t: int, value: float, spread: float = 0.0) -> bool:
        """True: stop the trial. `spread`: its relative inter-quartile range so far (margin only)."""
        for milestone in sorted(self.recorded, reverse=True):
            seen = self.recorded[milestone]
            if t < milestone or trial_id in seen:
                continue
            stop = False
            if seen:
                cutoff = float(np.nanpercentile(list(seen.values()), (1 - 1 / self.rf) * 100))
                stop = value * (1 + (spread if self.margin else 0.0)) < cutoff
            seen[trial_id] = value
            return stop
        return False


@dataclass
class Report:
    pct: int  # progress_pct: 100 for the final report
    value: float  # samples/s as reported
    spread: float  # relative IQR of the windows completed by then (0 with fewer than 4)


def curve(steps: int, warmup_steps: int, windows: list[float], final: float) -> list[Report]:
    """The reports a trial of `steps` steps sent, rebuilt from its windows and final figure."""
    reports = []
    for step in range(REPORT_EVERY, steps, REPORT_EVERY):
        if step <= warmup_steps:
            reports.append(Report(min(99, 100 * step // steps), 0.0, 0.0))
            continue
        done = windows[: (step - warmup_steps) // WINDOW_STEPS] or windows[:1]
        value = len(done) / sum(1 / w for w in done) if done else final
        reports.append(Report(min(99, 100 * step // steps), value, relative_iqr(done)))
    reports.append(Report(100, final, relative_iqr(windows)))
    return reports


def relative_iqr(rates: list[float]) -> float:
    if len(rates) < 4:
        return 0.0
    p25, median, p75 = statistics.quantiles(rates, n=4, method="inclusive")
    return (p75 - p25) / median if median > 0 else 0.0


def run(bracket: Bracket, trial_id: str, reports: list[Report]) -> int | None:
    """Feed one trial's reports; the progress_pct it was stopped at, or None if it ran to the end."""
    for r in reports:
        if bracket.on_result(trial_id, r.pct, r.value, r.spread) and r.pct < 100:
            return r.pct
    return None


def replay(order: list[str], curves: dict[str, list[Report]], grace: int, rf: float, margin: bool) -> dict[str, int]:
    """Trials in `order`, one at a time (each finishes before the next starts): which were stopped
    and at what progress_pct."""
    bracket = Bracket(grace, rf, margin=margin)
    stopped = {}
    for trial_id in order:
        at = run(bracket, trial_id, curves[trial_id])
        if at is not None:
            stopped[trial_id] = at
    return stopped


def saved_share(order: list[str], stopped: dict[str, int], cost: dict[str, float]) -> float:
    """Share of the trials' wall seconds a stop saves (a stopped trial costs its share of steps)."""
    total = sum(cost[k] for k in order)
    saved = sum(cost[k] * (1 - stopped[k] / 100) for k in stopped)
    return saved / total if total else 0.0
