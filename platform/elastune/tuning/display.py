"""Where a running sweep tells a person how it goes: one live line on a terminal, plain lines elsewhere.

A sweep runs in stages: the reference run, the search (`budget.max_trials` proposals, screened-out
ones included) and the confirmation runs. What each stage has done, of how many, what runs, the
best so far and an ETA are its *status*; a finished trial or a stage's outcome is a *line*.

- `LiveDisplay` (stderr is a terminal): the lines scroll above one rich progress row per stage
  (spinner, bar, done/total, elapsed, ETA, status), redrawn in place.
- `PlainDisplay` (a pipe, a log file, `ray job submit`): every line as it comes, and the status as
  a line of its own when a trial ends, or when it changed at most every `every_s` seconds, or, with
  no change, every four intervals (a sign of life during long trials), so a log reads well.

Tune pickles its callbacks into the experiment state (that is how a resume gets them back), so
`SweepCallback` holds no display: it finds the sweep's through `display_for(sweep_id)`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["Display", "LiveDisplay", "PlainDisplay", "display_for", "register", "unregister"]

PRINT_EVERY_S = 15.0


class Display(Protocol):
    def line(self, text: str) -> None:
        """A line that stays: a finished trial, a stage's outcome."""

    def stage(self, name: str, total: int | None, done: int = 0) -> None:
        """A new stage of `total` units (None: one unit of unknown length), `done` of them already."""

    def status(self, done: int, text: str, force: bool = False) -> None:
        """The current stage's progress: `done` units, and what runs and the best so far."""

    def close(self) -> None:
        """End the display (a live one leaves the terminal as it found it)."""


class PlainDisplay:
    """Lines on stderr; the status as a line at most every `every_s` seconds (or when forced)."""

    def __init__(
        self,
        write: Callable[[str], None] | None = None,
        every_s: float = PRINT_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.write = write or _to_stderr
        self.every_s = every_s
        self.clock = clock
        self._stage = ""
        self._total: int | None = None
        self._last = 0.0
        self._shown = ""  # the status line printed last

    def line(self, text: str) -> None:
        self.write(text)

    def stage(self, name: str, total: int | None, done: int = 0) -> None:
        self._stage, self._total, self._last = name, total, self.clock()

    def status(self, done: int, text: str, force: bool = False) -> None:
        of = f"{done}/{self._total}" if self._total is not None else "running"
        shown = f"  {self._stage} {of} · {text}"
        waited = self.clock() - self._last
        if force or (shown != self._shown and waited >= self.every_s) or waited >= 4 * self.every_s:
            self._last, self._shown = self.clock(), shown
            self.line(shown)

    def close(self) -> None:
        pass


class LiveDisplay:
    """A rich progress row per stage under the scrolling lines; for a terminal."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=16),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            transient=True,  # a stage's row goes when it ends; its outcome stays as a line
        )
        self._task: TaskID | None = None
        self._progress.start()

    def line(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def stage(self, name: str, total: int | None, done: int = 0) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(name, total=total, completed=done, status="")

    def status(self, done: int, text: str, force: bool = False) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=done, status=text)

    def close(self) -> None:
        self._progress.stop()


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


_DISPLAYS: dict[str, Display] = {}


def register(sweep_id: str, display: Display) -> None:
    _DISPLAYS[sweep_id] = display


def unregister(sweep_id: str) -> None:
    _DISPLAYS.pop(sweep_id, None)


def display_for(sweep_id: str) -> Display:
    """The display the sweep's driver registered; plain lines for one that registered none."""
    display = _DISPLAYS.get(sweep_id)
    if display is None:
        display = _DISPLAYS[sweep_id] = PlainDisplay()
    return display
