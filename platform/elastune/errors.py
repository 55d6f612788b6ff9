"""The errors elastune raises on purpose, and the exit code each maps to.

Exit codes: 0 ok, 1 runtime failure, 2 invalid input. Anything that is the
user's input being wrong (a config, a spec, a data file, a device the machine lacks) is an
`InputError` and exits 2 before anything is launched or written.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConfigError",
    "DataError",
    "DeviceError",
    "EdoError",
    "ElastuneError",
    "InputError",
    "OutOfMemory",
    "Problem",
    "SweepFoundNothing",
    "SweepInterrupted",
]


class ElastuneError(Exception):
    """Base class. `exit_code` is what the CLI exits with; `label` starts the line it prints."""

    exit_code = 1
    label = "error"


class InputError(ElastuneError):
    """The user's input is wrong; nothing was launched, written or lost."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where, what was given, and how to fix it."""

    path: str
    value: object
    message: str

    def __str__(self) -> str:
        shown = _show(self.value)
        where = f"{self.path}={shown}" if shown is not None else self.path
        return f"{where}: {self.message}"


def _show(value: object) -> str | None:
    if value is _MISSING:
        return None
    if isinstance(value, int) and value.bit_length() > 128:  # str() of a huge int is slow, or refused
        return f"<a {value.bit_length()}-bit number>"
    text = repr(value) if isinstance(value, str) else str(value)
    digits = text.strip("'\"+-")
    if len(digits) > 40 and digits.isascii() and digits.isdigit():  # a runaway number: its size says enough
        return f"{text[:12]}...({len(digits)} digits)"
    # Long enough for a file path, which the user must see whole; cut only runaway values.
    return text if len(text) <= 300 else text[:297] + "..."


_MISSING = object()


class ConfigError(InputError):
    """Every problem found in a config at once, one per line."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        head = f"invalid config{f' ({source})' if source else ''}: {len(problems)} problem(s)"
        super().__init__("\n".join([head, *(f"  - {p}" for p in problems)]))


class DataError(InputError):
    """A data file cannot be read as the format it claims (file and line are in the message)."""


class DeviceError(InputError):
    """The config asks for a device or precision this machine cannot run."""


MISSING = _MISSING


class OutOfMemory(ElastuneError):
    """An OOM the training loop could not recover from (the micro-batch cannot be halved any further)."""


class EdoError(ElastuneError):
    """No memory for this trial: no EDO broker, no grant within the timeout, or its grant was lost."""


class SweepFoundNothing(ElastuneError):
    """A sweep ran to its end without a config to recommend (tuning/outcome.py): exit 1 where no
    trial completed, 2 where nothing was feasible. The CLI prints the record's table first."""

    label = "no result"

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SweepInterrupted(ElastuneError):
    """A sweep's driver was stopped by a signal, or the engine under it failed (`reason`: Tune or
    Ray raised where the sweep could not go on, e.g. Ray's memory monitor killing what Tune does not
    catch): the sweep is recorded as interrupted and can be resumed. Exits 128 + the signal's number
    (130 for SIGINT, 143 for SIGTERM), as a shell would, or 1 for an engine failure; the CLI prints
    the record's table, then this message, whose last line is the resume command."""

    label = "stopped"

    def __init__(
        self, record: Any, signum: int, resume_command: str, recorded: bool = True, reason: str | None = None
    ) -> None:
        self.record = record  # the SweepRecord as it was recorded (tracking/records.py)
        self.exit_code = 1 if reason is not None else 128 + signum
        self.resume_command = resume_command
        cause = f"by {signal.Signals(signum).name}" if reason is None else f"by an engine failure ({reason})"
        if not recorded:
            super().__init__(f"stopped {cause} before the sweep was recorded; nothing ran")
            return
        done = sum(1 for t in record.trials if t.status != "interrupted" and t.trial_id != "reference")
        super().__init__(
            f"sweep {record.sweep_id} interrupted {cause} after {done} trial(s); recorded as interrupted. "
            f"Resume it with:\n  {resume_command}"
        )


class StoreUnreachable(ElastuneError):
    """A sweep ended while its MLflow store did not answer: what its driver could not write is in
    the sweep's journal (tracking/journal.py), for `elastune sync SWEEP_ID` to write once the store
    answers. Exits 1. `record` is the sweep as its driver ended it (its own view: the store lacks
    part of it), for the CLI to print before this message, whose last line is the sync command."""

    def __init__(self, record: Any, tracking_uri: str, journal: Any, sync_command: str) -> None:
        self.record = record  # the SweepRecord (tracking/records.py)
        self.journal = journal  # the journal's path
        self.sync_command = sync_command
        super().__init__(
            f"sweep {record.sweep_id} {record.status}, but the MLflow store at {tracking_uri} does not answer: "
            f"what the store lacks is journaled in {journal}. Once the store answers, write it there with:\n"
            f"  {sync_command}"
        )
