"""The driver's view of a running sweep: a Ray Tune callback that turns trial events into
`TrialRecord`s, logs each to MLflow (the driver is the only writer) and shows progress on the
sweep's display (display.py).

It is pickled into Tune's experiment state (that is how `--resume` gets it back), so it holds only
plain data; the MLflow client and the record are rebuilt in `setup()`.

Two rules keep the record honest across stops and resumes: a trial recorded with a final status
(ok, infeasible, oom, pruned, failed) is never recorded again, and once the driver is stopping
(`STOPPING` holds the sweep's id) a trial that ends without its final report was interrupted,
not pruned or failed, and the sweep stays recorded as interrupted.
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

from elastune.tracking.ranking import same_as_reference
from elastune.tracking.records import FINAL_TRIAL_STATUSES, SweepRecord, TrialRecord, shown_value
from elastune.tuning.display import KEEP, display_for
from elastune.tuning.keys import ESTIMATE_KEY, META_PREFIX, NUMBER_KEY
from elastune.tuning.report import TrialReport
from elastune.tuning.results import RUNNING_MEAN, short_bytes, short_name, trial_label

__all__ = ["STOPPING", "SweepCallback", "searched", "status_text", "trial_line"]

STOPPING: set[str] = set()  # ids of the sweeps whose driver was told to stop (a signal), in this process


class SweepCallback(Callback):
    def __init__(self, sweep_id: str, tracking_uri: str, spec: dict[str, Any]) -> None:
        self.sweep_id = sweep_id
        self.tracking_uri = tracking_uri
        self.spec = spec
        self._tracker: Any = None
        self._record: SweepRecord | None = None
        self._spec: Any = None  # the validated SweepSpec, rebuilt in _ensure (plain data is what pickles)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tracker": None, "_record": None, "_spec": None}

    # -- Tune's hooks (all run in the driver, one at a time)

    def setup(
        self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None, **info: Any
    ) -> None:
        self._ensure()

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._save(self._from_trial(trial, status="running", metrics={}))
        display_for(self.sweep_id).started(str(trial.trial_id))  # the ETA's input (on_step_end saw it first)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        base = self._from_trial(trial, status="running", metrics={})
        last = TrialReport.from_metrics(dict(trial.last_result or {}))
        done = last.to_record(base.trial_id, base.number, base.params, base.config)
        done.estimated_peak_bytes = done.estimated_peak_bytes or base.estimated_peak_bytes
        if self.sweep_id in STOPPING and done.status in {"pruned", "failed"}:
            done.status, done.error = "interrupted", "stopped with the sweep's driver; a resume runs it again"
        self._save(done, announce=True)
        display_for(self.sweep_id).ended(base.trial_id)  # also one _save left alone (a resume's replay)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        record = self._from_trial(trial, status="failed", metrics={})
        record.error = _error_text(trial)
        if self.sweep_id in STOPPING:
            record.status = "interrupted"
        self._save(record, announce=True)
        display_for(self.sweep_id).ended(record.trial_id)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        from elastune.tuning.search import SCREENED, records_for_screened

        queued = SCREENED.pop(self.sweep_id, [])
        if queued:
            self._ensure()
            for trial in records_for_screened(self._spec, queued):
                self._save(trial, announce=True)
        record = self._ensure()
        display = display_for(self.sweep_id)
        for live in trials:
            # a trial's time counts from when it takes its slot: Tune's on_trial_start comes only
            # once its actor runs, seconds later (a process to start, torch to import)
            if live.status in {"PENDING", "RUNNING"}:
                display.started(str(live.trial_id))
        display.status(searched(record), status_text(record))

    # -- helpers

    def _ensure(self) -> SweepRecord:
        if self._tracker is None:
            from elastune.tracking.mlflow import SweepTracker, load_sweep
            from elastune.tuning.spec import SweepSpec

            self._tracker = SweepTracker(self.tracking_uri)
            self._record = load_sweep(self.sweep_id, self.tracking_uri)
            self._spec = SweepSpec.model_validate(self.spec)
        assert self._record is not None
        return self._record

    def _save(self, trial: TrialRecord, announce: bool = False) -> None:
        record = self._ensure()
        before = next((t for t in record.trials if t.trial_id == trial.trial_id), None)
        if before is not None and before.status in FINAL_TRIAL_STATUSES:
            return  # it ended before (a resumed sweep replaying it): the first word stands
        if self.sweep_id in STOPPING:
            record.status = "interrupted"
        record.trials = [t for t in record.trials if t.trial_id != trial.trial_id] + [trial]
        self._tracker.log_trial(record, trial)
        self._tracker.update_sweep(record)
        if announce:
            display = display_for(self.sweep_id)
            display.line(trial_line(trial, record.reference()))
            # ended just before the new count: a redraw between them would count the trial twice
            display.ended(trial.trial_id)
            display.status(searched(record), status_text(record), force=True)

    def _from_trial(self, trial: Any, status: str, metrics: dict[str, Any]) -> TrialRecord:
        self._ensure()
        config = dict(trial.config)
        params = {k: v for k, v in config.items() if not k.startswith(META_PREFIX)}
        cfg = self._spec.trial_config(params)
        return TrialRecord(
            trial_id=str(trial.trial_id),
            number=int(config.get(NUMBER_KEY, -1)),
            status=status,  # type: ignore[arg-type]
            params=params,
            config=cfg.to_dict(),
            estimated_peak_bytes=config.get(ESTIMATE_KEY),
        )


def searched(record: SweepRecord) -> int:
    """The search's proposals that have ended (screened-out ones included; the reference aside)."""
    return sum(t.status in FINAL_TRIAL_STATUSES for t in record.trials if t.trial_id != "reference")


def status_text(record: SweepRecord) -> str:
    """What runs and how the ended trials went, and the best so far: short, for one status row."""
    counts = record.counts()
    parts = [f"running {counts['running']}"]
    parts += [f"{status} {counts[status]}" for status in ("infeasible", "pruned", "oom", "failed") if counts[status]]
    best = record.best()
    if best is not None and best.samples_per_s:
        parts.append(f"best {best.samples_per_s:,.0f}/s ({'trial ' if best.number >= 0 else ''}{trial_label(best)})")
    return " · ".join(parts)


def trial_line(trial: TrialRecord, reference: TrialRecord | None = None) -> str:
    """A trial's outcome, then its parameters by the names the results table gives them
    (`sparse opt=rowwise_adagrad`, floats to three significant digits) and its sizes as the table
    writes them (`51.1 MiB`). Each `name=value` holds `KEEP`s for spaces, so a display that wraps
    the line keeps it whole. A trial stopped early reported the running mean of its steps so far,
    and says so; a proposal of the `reference`'s own config says that, since its figures are the
    reference's (trial.py does not train it again)."""
    params = ", ".join(f"{short_name(k)}={shown_value(v)}".replace(" ", KEEP) for k, v in trial.params.items())
    name = f"trial {trial_label(trial)}" if trial.number >= 0 else trial.trial_id
    if trial.status == "infeasible" and trial.samples_per_s is None:
        predicted = short_bytes(trial.estimated_peak_bytes or 0)
        return f"{name} not run: predicted {predicted}, over the ceiling · {params}"
    if trial.status in {"ok", "infeasible", "pruned"} and trial.samples_per_s is not None:
        peak = short_bytes(trial.peak_memory_bytes) if trial.peak_memory_bytes else "n/a"
        quality = "" if trial.quality_ok is None else (", quality ok" if trial.quality_ok else ", quality too low")
        rate = f"{trial.samples_per_s:,.0f} samples/s" + (f" ({RUNNING_MEAN})" if trial.status == "pruned" else "")
        if same_as_reference(trial, reference):
            return f"{name} {trial.status}: the reference's own config, its figures: {rate}, peak {peak} · {params}"
        return f"{name} {trial.status}: {rate}, peak {peak}{quality} · {params}"
    return f"{name} {trial.status}: {trial.error or ''} · {params}"


def _error_text(trial: Any) -> str:
    path = getattr(trial, "error_file", None)
    try:
        if path:
            with open(path) as fh:
                text = fh.read().strip()
                return error_line(text) if text else "failed"
    except OSError:
        pass
    return "the trial failed (see the Ray logs)"


# What Ray says when something outside the trial ended it, and the line a reader is shown instead of
# Ray's dump (Ray's own text with `elastune sweep -v`, and in the trial's error file).
KILLED_FROM_OUTSIDE = {
    "OutOfMemoryError": "killed by Ray's memory monitor: its node ran low on host memory",
    "NodeDiedError": "its node was lost",
    "ActorDiedError": "its worker process died (killed from outside, or it crashed)",
    "WorkerCrashedError": "its worker process died (killed from outside, or it crashed)",
    "ActorUnavailableError": "its worker process could not be reached",
}


# What Ray's text says where its error file names no exception class (Ray 2.60's Tune writes the
# message alone): the phrase, and the class it stands for.
KILLED_FROM_OUTSIDE_TEXT = {
    "how to address the out of memory issue": "OutOfMemoryError",
    "The actor died unexpectedly": "ActorDiedError",
}


# The trial's own device running out (torch's OutOfMemoryError, whose class name Ray's memory monitor
# shares): said in the trial's words, never as the host's memory monitor.
TORCH_DEVICE_OOM = "CUDA out of memory"
ELASTUNE_OOM = "OutOfMemory: out of memory "  # errors.py's OutOfMemory, as a traceback's last line says it


def error_line(text: str) -> str:
    """One line for a trial's error: the line that says its device ran out of memory where it did;
    what ended it where something outside the trial did (Ray's memory monitor, a lost node, a killed
    worker); else the error's own last line."""
    lines = [line.strip() for line in text.splitlines()]
    out_of_memory = [ln for ln in lines if ELASTUNE_OOM in ln] or [ln for ln in lines if TORCH_DEVICE_OOM in ln]
    if out_of_memory:
        return out_of_memory[-1][:500]
    for phrase, name in KILLED_FROM_OUTSIDE_TEXT.items():
        if phrase in text:
            text = name
            break
    for name, said in KILLED_FROM_OUTSIDE.items():
        if name in text:
            return f"{said} ({name})"
    lines = text.strip().splitlines()
    return lines[-1][:500] if lines else "failed"
