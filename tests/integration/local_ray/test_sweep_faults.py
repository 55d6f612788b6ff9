"""Trials ended from outside the trial (Ray's memory monitor, a lost node, a killed worker) are
recorded as failed with one line saying so, never Ray's dump, and never end the sweep with a
traceback: the confirmation stage's one-trial runs return a failed report (and are run once more,
then reported unconfirmed)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.confirm import confirm_best
from elastune.tuning.progress import error_line
from elastune.tuning.spec import Confirm
from elastune.tuning.sweep import _run_once

pytestmark = pytest.mark.integration

# the last lines of what Ray wrote for a trial its memory monitor killed (ray 2.x)
OOM_DUMP = """Traceback (most recent call last):
  File "ray/tune/execution/tune_controller.py", line 1305, in _on_result
ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
Memory on the node (IP: 127.0.0.1, ID: 5b1c) where the task was running was 22.61GB / 23.47GB (0.96)
Top 10 memory users:
PID	MEM(GB)	COMMAND
4051	19.80	python hog.py"""


def test_an_out_of_memory_kill_reads_as_one_line() -> None:
    said = error_line(OOM_DUMP)
    assert said == "killed by Ray's memory monitor: its node ran low on host memory (OutOfMemoryError)"
    assert error_line("ValueError: boom\n") == "ValueError: boom"


def _killed(config: dict[str, Any]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer or `kill -9` does to a trial's worker


def test_a_run_whose_worker_is_killed_returns_a_failed_report(ray_local: Any, tmp_path: Path) -> None:
    report = _run_once(_killed, {}, "killed", tmp_path)
    assert report.status == "failed" and report.error is not None
    assert "worker process died" in report.error and "\n" not in report.error


def test_a_config_whose_every_confirmation_run_failed_is_reported_unconfirmed() -> None:
    def trial(trial_id: str, number: int, rate: float) -> TrialRecord:
        params = {"batch.micro": 64 + number}
        return TrialRecord(trial_id, number, "ok", params, {}, samples_per_s=rate, quality_ok=True)

    record = SweepRecord("s", {}, "running", trials=[trial("reference", -1, 10.0), trial("a", 0, 20.0)])
    said: list[str] = []

    def measure(params: Any, name: str) -> float | None:
        return 10.0 if name.endswith("reference") else None  # the config's runs all fail

    changed = confirm_best(record, Confirm(top=1, rounds=2), {}, measure, echo=said.append)
    assert changed == [] and "  trial 0: unconfirmed, none of its runs finished" in said


def test_rays_actor_died_text_without_a_class_name_reads_as_one_line() -> None:
    # Ray 2.60's Tune writes the message alone to a trial's error file: no exception class in it
    text = (
        "Failure # 1 (occurred at 2026-11-27_02-33-16)\nThe actor died unexpectedly before finishing this task.\n"
        "\tclass_name: ImplicitFunc\nThe actor is dead because its worker process has died."
    )
    assert error_line(text) == "its worker process died (killed from outside, or it crashed) (ActorDiedError)"
