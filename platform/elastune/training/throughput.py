"""The timed part of a training run: samples/s (and a workload's own units/s) from the first step
after warm-up, in windows of `every` steps, with the time a progress report takes left out.

samples/s counts the data reading too (a step's batch is read inside the timed stretch), because
that is what a user waits for, with one exception: a synthetic source's reads on a CPU device
(`read_left_out`). There the generator is a stand-in for a real pipeline, its work runs on the very
cores the step uses, one after the other, and what it costs (up to a tenth of a fast DLRM step on a
2-core machine) belongs to no config: counted, it would rank configs by a data cost no real run
pays. On a GPU the host reads while the device computes, so a read's time is not the step's lost
time, and stays in. The windows show how the rate moved within the run: leading ones
still warming up (`warm_up_windows`) are left out of the figure, and a tuner compares two trials
by their windows' spread.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

__all__ = ["Measured", "Throughput", "Window", "warm_up_windows"]

WARM_UP_SHORTFALL = 0.10  # a leading window this much slower than the steady rate is still warming up


@dataclass(frozen=True)
class Window:
    """A timed window: `every` steps (the reports' time left out)."""

    samples: int
    seconds: float
    units: int  # the workload's own units (an LM's real tokens), 0 where it counts none

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Measured:
    samples_per_s: float
    units_per_s: float | None  # None: the workload counts no units of its own
    elapsed_s: float  # the timed stretch, wall clock, less what was left out (reports, synthetic reads)
    window_rates: list[float] = field(default_factory=list)
    warmup_windows: int = 0  # the leading windows left out of the rates above
    synthetic_read_s: float = 0.0  # a synthetic source's reads in the timed stretch, left out of the rates


class Throughput:
    def __init__(self, every: int, device: torch.device, counts_units: bool, warmup_steps: int = 0) -> None:
        self.every, self.device, self.counts_units, self.warmup_steps = every, device, counts_units, warmup_steps
        self._start: tuple[float, int] | None = None  # (time, samples) when timing began
        self._window: tuple[float, int, int] = (0.0, 0, 0)  # the open window's start (time, samples, units)
        self._steps = 0  # steps in the open window
        self.units = 0  # units of the timed steps
        self.synthetic_read_s = 0.0  # time read_left_out took out of the timed stretch
        self.windows: list[Window] = []

    @property
    def started(self) -> bool:
        return self._start is not None

    def begin(self, samples: int) -> None:
        """Timing starts now, at `samples` trained."""
        self._start = (time.perf_counter(), samples)
        self._window = (*self._start, self.units)

    def step_begins(self, step: int, samples: int) -> None:
        """Step `step` begins with `samples` trained: timing starts at the first step after warm-up."""
        if self._start is None and step >= self.warmup_steps:
            self.begin(samples)

    def stepped(self, samples: int, units: int) -> None:
        """A step ended with `samples` trained in all; it held `units` of the workload's own."""
        if self._start is None:
            return
        self.units += units
        self._steps += 1
        if self._steps == self.every:
            self._sync()
            now = time.perf_counter()
            start, done, counted = self._window
            self.windows.append(Window(samples - done, now - start, self.units - counted))
            self._window, self._steps = (now, samples, self.units), 0

    def paused(self, seconds: float) -> None:
        """`seconds` that were the tuner's, not the config's (a progress report: a worker group's
        waits for its Ray Train controller's next poll): moved out of the timed stretch."""
        if self._start is not None:
            self._start = (self._start[0] + seconds, self._start[1])
            self._window = (self._window[0] + seconds, *self._window[1:])

    def read_left_out(self, seconds: float) -> None:
        """`seconds` spent reading a synthetic source on a CPU device: out of the timed stretch (see
        the module's docstring), and counted apart, so a run says how much it left out."""
        if self._start is not None:
            self.paused(seconds)
            self.synthetic_read_s += seconds

    def rate(self, samples: int) -> float | None:
        """samples/s of the timed stretch so far (None before it starts)."""
        if self._start is None:
            return None
        seconds = time.perf_counter() - self._start[0]
        return (samples - self._start[1]) / seconds if seconds > 0 else None

    def finish(self, samples: int) -> Measured:
        """The run's figures, at `samples` trained in all."""
        self._sync()  # queued kernels belong to the timed stretch
        if self._start is None:
            return Measured(0.0, None, 0.0)
        samples_per_s = self.rate(samples) or 0.0
        elapsed = time.perf_counter() - self._start[0]
        seconds = (samples - self._start[1]) / samples_per_s if samples_per_s else 0.0
        units_per_s = self.units / seconds if self.counts_units and seconds else None
        rates = [w.rate for w in self.windows]
        warmup = warm_up_windows(rates)
        if warmup:  # the run was still warming up after warmup_steps: its steady windows alone count
            steady = self.windows[warmup:]
            seconds = sum(w.seconds for w in steady)
            samples_per_s = sum(w.samples for w in steady) / seconds
            units_per_s = sum(w.units for w in steady) / seconds if self.counts_units else None
        return Measured(samples_per_s, units_per_s, elapsed, rates, warmup, self.synthetic_read_s)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the window's kernels, not only their launches


def warm_up_windows(rates: list[float]) -> int:
    """How many leading windows were still warming up: those slower than (1 - WARM_UP_SHORTFALL)
    times the steady rate (the median of the second half of the windows), at most half of them.
    `warmup_steps` is a guess made before the run; the windows show where the rate settled (a heap
    still growing, kernels still being picked, caches filling). Fewer than four windows: none,
    too few to tell a warm-up from noise."""
    if len(rates) < 4:
        return 0
    steady = statistics.median(rates[len(rates) // 2 :])
    count = 0
    while count < len(rates) // 2 and rates[count] < (1 - WARM_UP_SHORTFALL) * steady:
        count += 1
    return count
