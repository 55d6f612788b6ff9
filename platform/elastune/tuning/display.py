"""Where a running sweep tells a person how it goes: one live line on a terminal, plain lines elsewhere.

A sweep runs in stages: the reference run, the search (`budget.max_trials` proposals, screened-out
ones included) and the confirmation runs. What each stage has done, of how many, what runs, the
best so far and an ETA are its *status*; a finished trial or a stage's outcome is a *line*.

- `LiveDisplay` (stderr is a terminal): the lines scroll above one rich progress row per stage
  (spinner, bar, done/total, elapsed, ETA, status), redrawn in place; a line longer than the
  terminal is wrapped at spaces, its continuation indented (`wrap`), so no word is cut.
- `PlainDisplay` (a pipe, a log file, `ray job submit`): every line as it comes, one line per event
  however long (logs are grepped), and the status as a line of its own when a trial ends, or when
  it changed at most every `every_s` seconds, or, with no change, every four intervals (a sign of
  life during long trials), so a log reads well.

The ETA (`eta_s`) comes from the units (trials, runs) the stage saw start and end (`started`,
`ended`): their mean duration, how long the running ones have run, how many still wait and how
many run at once. Until a unit has ended there is none, and none is shown. The live row computes
it whenever rich redraws, so it counts down between trials.

Tune pickles its callbacks into the experiment state (that is how a resume gets them back), so
`SweepCallback` holds no display: it finds the sweep's through `display_for(sweep_id)`.

What a display prints may quote the MLflow store (a resume replays stored trials: their ids,
parameters and errors), which anyone who can write to it could have filled: both displays pass
every line and status through `printable` (elastune/text.py), so no escape sequence reaches the
terminal and no stored line break splits a line; they print without rich markup.
"""

from __future__ import annotations

import heapq
import statistics
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from elastune.text import printable

__all__ = [
    "KEEP",
    "Display",
    "LiveDisplay",
    "PlainDisplay",
    "StageClock",
    "display_for",
    "eta_s",
    "eta_text",
    "register",
    "step_line",
    "unregister",
    "wrap",
]

PRINT_EVERY_S = 15.0
INDENT = 4  # a wrapped line's continuation
# A space that a wrapped line never breaks at ("sparse opt=sgd" stays whole); shown as a space.
KEEP = "\u00a0"


def wrap(text: str, width: int, indent: int = INDENT) -> list[str]:
    """`text` as lines of at most `width` columns, broken at spaces (never inside a word, nor at a
    `KEEP`), each line after the first indented by `indent`; a word longer than a whole line is the
    one thing cut. `KEEP`s come out as plain spaces."""
    lines = []
    for paragraph in text.split("\n"):  # a line break of its own stays
        lines += textwrap.wrap(
            paragraph,
            width=max(width, indent + 10),
            subsequent_indent=" " * indent,
            break_on_hyphens=False,  # "2.04x-2.29x", "--from-sweep" stay whole
        ) or [""]
    return [line.replace(KEEP, " ") for line in lines]


def step_line(step: int, steps: int, loss: float, samples_per_s: float | None) -> str:
    """A training step's progress line. Its rate is the running mean over the timed steps so far
    (warm-up left out), which early on sits well below the steady rate a run's result reports
    (its steady windows alone), so it says "running mean"."""
    rate = f"{samples_per_s:,.0f} samples/s running mean" if samples_per_s else "warming up"
    return f"  step {step:>5}/{steps}  loss {loss:.4f}  {rate}"


def eta_s(durations: Sequence[float], running: Sequence[float], waiting: int, concurrency: int) -> float | None:
    """Seconds until a stage's last unit ends, or None until one has ended (nothing to go by).

    Each unit is taken to last the mean of `durations` (the ended units'): a running one the rest
    of that mean after its `running` seconds so far (at least a second: one past the mean ends any
    moment), and the `waiting` ones (not started yet) one after another in whichever of the
    `concurrency` slots frees up first."""
    if not durations:
        return None
    mean = statistics.fmean(durations)
    slots = [max(mean - ran, 1.0) for ran in running]
    slots += [0.0] * max(concurrency - len(slots), 0)
    heapq.heapify(slots)
    for _ in range(max(waiting, 0)):
        heapq.heapreplace(slots, slots[0] + mean)
    return max(slots, default=0.0)


def eta_text(seconds: float | None) -> str:
    """`eta 0:01:05`, or nothing without an estimate."""
    if seconds is None:
        return ""
    whole = round(seconds)
    return f"eta {whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class StageClock:
    """When each of a stage's units started and how long the ended ones took; its ETA. Read by
    rich's refresh thread while the driver writes it, hence the lock."""

    def __init__(self, concurrency: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self.concurrency = concurrency
        self.clock = clock
        self._started: dict[str, float] = {}
        self._ended: set[str] = set()
        self._durations: list[float] = []
        self._lock = threading.Lock()

    def started(self, unit: str) -> None:
        """The first word counts (a trial is seen pending, then started); one that ended stays so."""
        with self._lock:
            if unit not in self._started and unit not in self._ended:
                self._started[unit] = self.clock()

    def ended(self, unit: str) -> None:
        with self._lock:
            began = self._started.pop(unit, None)
            self._ended.add(unit)
            if began is not None:
                self._durations.append(self.clock() - began)

    def eta(self, total: float | None, done: float) -> float | None:
        """Seconds left of a stage of `total` units with `done` ended; None for one of unknown
        length, and for one that is through (no "eta 0:00:00" on a finished stage)."""
        if total is None or done >= total:
            return None
        with self._lock:
            now = self.clock()
            running = [now - began for began in self._started.values()]
            durations = list(self._durations)
        return eta_s(durations, running, int(total - done) - len(running), self.concurrency)


class Display(Protocol):
    def line(self, text: str) -> None:
        """A line that stays: a finished trial, a stage's outcome."""

    def stage(self, name: str, total: int | None, done: int = 0, concurrency: int = 1) -> None:
        """A new stage of `total` units (None: one unit of unknown length), `done` of them already,
        `concurrency` of them at a time."""

    def started(self, unit: str) -> None:
        """One of the stage's units (a trial, a run) started: the ETA's input."""

    def ended(self, unit: str) -> None:
        """A unit that `started` ended (whatever its outcome)."""

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
        self._units = StageClock(clock=clock)
        self._last = 0.0
        self._shown = ""  # the status line printed last (its ETA aside, which moves every second)

    def line(self, text: str) -> None:
        self.write(printable(text).replace(KEEP, " "))  # one line, however long: a log is grepped

    def stage(self, name: str, total: int | None, done: int = 0, concurrency: int = 1) -> None:
        self._stage, self._total, self._last = name, total, self.clock()
        self._units = StageClock(concurrency, self.clock)

    def started(self, unit: str) -> None:
        self._units.started(unit)

    def ended(self, unit: str) -> None:
        self._units.ended(unit)

    def status(self, done: int, text: str, force: bool = False) -> None:
        of = f"{done}/{self._total}" if self._total is not None else "running"
        shown = " · ".join(part for part in (f"  {self._stage} {of}", text) if part)
        waited = self.clock() - self._last
        if force or (shown != self._shown and waited >= self.every_s) or waited >= 4 * self.every_s:
            self._last, self._shown = self.clock(), shown
            eta = eta_text(self._units.eta(self._total, done))
            self.line(f"{shown} · {eta}" if eta else shown)  # line() cleans it

    def close(self) -> None:
        pass


class _Count(MofNCompleteColumn):
    """done/total; nothing for a stage of unknown length (rich would show "0/?")."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.total is not None else Text("")


class _Eta(ProgressColumn):
    """The stage's ETA (`StageClock`), computed again at every redraw; nothing without one."""

    def render(self, task: Task) -> Text:
        units = task.fields.get("units")
        return Text(eta_text(units.eta(task.total, task.completed) if units is not None else None))


class LiveDisplay:
    """A rich progress row per stage under the scrolling lines; for a terminal."""

    def __init__(self, console: Console | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console or Console(stderr=True)
        self.clock = clock
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=16),
            _Count(),
            TimeElapsedColumn(),
            _Eta(),
            TextColumn("{task.fields[status]}", markup=False),
            console=self.console,
            transient=True,  # a stage's row goes when it ends; its outcome stays as a line
        )
        self._task: TaskID | None = None
        self._units = StageClock(clock=clock)
        self._progress.start()

    def line(self, text: str) -> None:
        # wrapped here, at spaces, so the terminal never cuts a word; soft_wrap: rich adds no breaks
        shown = "\n".join(wrap(printable(text), self.console.width))
        self.console.print(shown, highlight=False, markup=False, soft_wrap=True)

    def stage(self, name: str, total: int | None, done: int = 0, concurrency: int = 1) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._units = StageClock(concurrency, self.clock)
        self._task = self._progress.add_task(name, total=total, completed=done, status="", units=self._units)

    def started(self, unit: str) -> None:
        self._units.started(unit)

    def ended(self, unit: str) -> None:
        self._units.ended(unit)

    def status(self, done: int, text: str, force: bool = False) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=done, status=printable(text))

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
