"""How a stopped sweep says so: by a signal (exit 128 + its number) or by an engine failure that
the sweep could not go on from (exit 1, the failure's one line); either way the count of trials
that ran and, last, the command that resumes it."""

from __future__ import annotations

import signal

from elastune.errors import SweepInterrupted
from elastune.tracking.records import SweepRecord, TrialRecord

RESUME = "elastune sweep --resume sw-1"


def _record() -> SweepRecord:
    def trial(trial_id: str, number: int, status: str) -> TrialRecord:
        return TrialRecord(trial_id=trial_id, number=number, status=status, params={}, config={})  # type: ignore[arg-type]

    trials = [trial("reference", -1, "completed"), trial("a", 0, "completed"), trial("b", 1, "failed")]
    return SweepRecord(sweep_id="sw-1", spec={}, status="interrupted", trials=[*trials, trial("c", 2, "interrupted")])


def test_a_signal_exits_as_a_shell_would_and_ends_with_the_resume_line() -> None:
    stopped = SweepInterrupted(_record(), signal.SIGTERM, RESUME)
    assert stopped.exit_code == 143
    assert str(stopped) == (
        f"sweep sw-1 interrupted by SIGTERM after 2 trial(s); recorded as interrupted. Resume it with:\n  {RESUME}"
    )


def test_an_engine_failure_exits_1_naming_it_in_one_line() -> None:
    reason = "Ray's memory monitor killed the trial's worker (OutOfMemoryError)"
    stopped = SweepInterrupted(_record(), signal.SIGTERM, RESUME, reason=reason)
    assert stopped.exit_code == 1
    assert str(stopped).splitlines() == [
        f"sweep sw-1 interrupted by an engine failure ({reason}) after 2 trial(s); recorded as interrupted. "
        "Resume it with:",
        f"  {RESUME}",
    ]


def test_before_anything_was_recorded_it_says_nothing_ran() -> None:
    stopped = SweepInterrupted(_record(), signal.SIGINT, "", recorded=False)
    assert (stopped.exit_code, str(stopped)) == (130, "stopped by SIGINT before the sweep was recorded; nothing ran")
