"""bench/asha_replay.py decides as Ray Tune's own ASHA does (so the tuner benchmark's figures on
how often ASHA stops the fastest config are Ray's), and its margin rule spares a trial that is
below the cutoff only by less than its own measured spread."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray.tune.schedulers.async_hyperband import _Bracket
from ray.tune.schedulers.trial_scheduler import TrialScheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import asha_replay


@pytest.mark.parametrize(("grace", "rf"), [(30, 2.0), (50, 2.0), (10, 3.0), (25, 4.0)])
def test_the_replay_stops_exactly_the_trials_rays_bracket_stops(grace: int, rf: float) -> None:
    rng = random.Random(grace * 10 + int(rf))
    ours = asha_replay.Bracket(grace, rf)
    rays = _Bracket(min_t=grace, max_t=100, reduction_factor=rf, s=0, stop_last_trials=True)
    decisions = 0
    for index in range(60):
        trial = SimpleNamespace(trial_id=f"t{index}")
        steps = rng.choice([6, 12, 30, 96, 192])
        for report in asha_replay.curve(steps, 4, [rng.uniform(1e4, 9e4) for _ in range(steps // 10)], 5e4):
            stop = ours.on_result(trial.trial_id, report.pct, report.value)
            assert stop == (rays.on_result(trial, report.pct, report.value) == TrialScheduler.STOP)
            decisions += stop
            if stop:
                break
    assert decisions > 5  # the comparison covered stops, not only continues


def test_rungs_are_rays_milestones() -> None:
    rays = _Bracket(min_t=30, max_t=100, reduction_factor=2, s=0)
    assert asha_replay.rungs(30, 100, 2) == sorted(m for m, _ in rays._rungs) == [30, 60]


def test_the_margin_spares_a_trial_only_inside_its_spread() -> None:
    plain, margin = asha_replay.Bracket(30, 2.0), asha_replay.Bracket(30, 2.0, margin=True)
    for bracket in (plain, margin):
        for index, value in enumerate([100.0, 100.0, 100.0]):
            assert not bracket.on_result(f"lead{index}", 40, value)
    # 95 is under the cutoff (100) by 5%: a 10% spread covers it, a 2% spread does not
    assert plain.on_result("close", 40, 95.0, spread=0.10)
    assert not margin.on_result("close", 40, 95.0, spread=0.10)
    assert margin.on_result("far", 40, 95.0, spread=0.02)


def test_a_curve_reports_zero_in_warm_up_and_the_running_rate_after() -> None:
    reports = asha_replay.curve(50, 12, [100.0, 50.0, 100.0], 80.0)
    assert [r.pct for r in reports] == [20, 40, 60, 80, 100]
    assert reports[0].value == 0.0  # step 10: still warming up
    assert reports[1].value == 100.0  # step 20: the first window (steps 13-22) is not done; its rate stands in
    assert reports[2].value == 100.0  # step 30: one window done
    assert reports[3].value == pytest.approx(2 / (1 / 100 + 1 / 50))  # step 40: two windows done
    assert reports[-1].value == 80.0  # the final report is the run's own figure


def test_stopped_trials_save_their_unrun_share() -> None:
    assert asha_replay.saved_share(["a", "b"], {"a": 30}, {"a": 10.0, "b": 10.0}) == pytest.approx(0.35)
