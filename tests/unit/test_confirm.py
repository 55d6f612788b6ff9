"""The confirmation stage (tuning/confirm.py): interleaved re-measurement against the reference,
ranked by the median of per-round ratios. `measure` is the stage's own seam (the sweep passes a
one-trial Tune run); here it replays figures, so the arithmetic and the order can be checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.confirm import confirm_best
from elastune.tuning.spec import Confirm


def _trial(trial_id: str, sps: float, status: str = "ok", quality_ok: bool | None = True) -> TrialRecord:
    return TrialRecord(
        trial_id=trial_id,
        number=-1 if trial_id == "reference" else int(trial_id[1:]),
        status=status,  # type: ignore[arg-type]
        params={} if trial_id == "reference" else {"batch.micro": int(trial_id[1:])},
        config={},
        samples_per_s=sps,
        quality_ok=quality_ok,
    )


def _record(*trials: TrialRecord) -> SweepRecord:
    return SweepRecord(sweep_id="sw", spec={}, status="running", trials=list(trials))


class Replay:
    """Each round's samples/s per config: the machine's speed moves the whole round."""

    def __init__(self, speeds: dict[str, float], round_factor: list[float]) -> None:
        self.speeds, self.round_factor, self.calls, self.round = speeds, round_factor, [], -1

    def __call__(self, params: Mapping[str, Any], name: str) -> float | None:
        key = "reference" if not params else f"t{params['batch.micro']}"
        if key == "reference":
            self.round += 1
        self.calls.append(key)
        return self.speeds[key] * self.round_factor[self.round]


def test_the_search_winner_loses_when_measured_against_the_reference() -> None:
    # The search measured t1 fastest on a lucky run; really t2 is 1.3x the reference and t1 1.1x.
    record = _record(_trial("reference", 100.0), _trial("t1", 180.0), _trial("t2", 125.0), _trial("t3", 90.0))
    assert record.best() is not None and record.best().trial_id == "t1"  # type: ignore[union-attr]
    replay = Replay({"reference": 100.0, "t1": 110.0, "t2": 130.0}, round_factor=[1.0, 0.5, 1.4])
    changed = confirm_best(record, Confirm(top=2, rounds=3), {}, replay, echo=lambda line: None)
    # the two fastest of the search, each round the reference first, one at a time
    assert replay.calls == ["reference", "t1", "t2"] * 3
    assert {t.trial_id for t in changed} == {"t1", "t2", "reference"}
    by_id = {t.trial_id: t for t in record.trials}
    assert by_id["t2"].confirmed_speedup == [1.3, 1.3, 1.3]  # the round's speed cancels in the ratio
    assert by_id["t1"].confirmed_speedup is not None and abs(by_id["t1"].confirmed_speedup[1] - 1.1) < 1e-9
    assert by_id["reference"].confirmed_speedup == [1.0, 1.0, 1.0] and by_id["t3"].confirmed_speedup is None
    assert record.best().trial_id == "t2"  # type: ignore[union-attr]


def test_the_reference_wins_when_every_candidate_is_slower_in_the_rounds() -> None:
    record = _record(_trial("reference", 100.0), _trial("t1", 150.0))
    confirm_best(record, Confirm(top=1, rounds=2), {}, Replay({"reference": 100.0, "t1": 95.0}, [1.0, 1.0]), echo=print)
    assert record.best().trial_id == "reference"  # type: ignore[union-attr]


def test_nothing_is_confirmed_without_a_feasible_reference_or_when_stopped() -> None:
    bad_reference = _record(_trial("reference", 100.0, quality_ok=False), _trial("t1", 150.0))
    replay = Replay({"reference": 100.0, "t1": 120.0}, [1.0])
    assert confirm_best(bad_reference, Confirm(top=1, rounds=1), {}, replay, echo=lambda line: None) == []
    assert replay.calls == []
    record = _record(_trial("reference", 100.0), _trial("t1", 150.0))
    assert confirm_best(record, Confirm(top=1, rounds=2), {}, replay, stopped=lambda: True, echo=print) == []
    assert all(t.confirmed_speedup is None for t in record.trials)
    # top 0: the search's ranking stands
    assert confirm_best(record, Confirm(top=0), {}, replay, echo=print) == []
