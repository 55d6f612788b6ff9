"""A sweep in MLflow: one parent run per sweep, one child run per trial, and the record read back.

The only module in elastune that imports mlflow. It writes what `tracking/records.py` describes
and reads it back losslessly, from MLflow alone.

Where each field lives, and why:
- Params (the spec and each trial's resolved config, flattened to dotted keys) and metrics
  (throughput, memory, quality, counts) are for people browsing `mlflow ui`: they sort, filter
  and compare there. Both are lossy for our purposes: params are write-once strings of bounded
  length, metrics are floats without None.
- The record itself (the sweep's fields, or one trial's) is stored as compact JSON in the run's
  tags `elastune.record.0..N-1` (chunked under the tag length limit; `elastune.record.chunks` =
  N). Tags, unlike params, can be overwritten, so re-logging a trial or updating a sweep stays
  in place; and `search_runs` returns tags, so reading a sweep of any size back is one query
  (plus paging), not one artifact download per trial. JSON keeps ints, floats (exactly: repr
  round-trips), bools and None.
- The driver is the only writer (trials report to it), so this module caches which child run
  belongs to which trial instead of searching for it on every `log_trial`. A trial run that holds
  a final status (ok, infeasible, oom, pruned, failed) is never written again, whoever asks.
- A running sweep's driver beats: `Heartbeat` sets the parent's `elastune.heartbeat` tag every
  ELASTUNE_HEARTBEAT_S seconds (default 15) from its own thread. A sweep recorded as running whose
  last beat is more than `STALE_AFTER_BEATS` beats old reads back as `stale`: its driver was
  killed (SIGKILL, a lost machine) before it could say so.
- A store that stops answering mid-sweep (a server restarted, a lost node) costs the sweep
  nothing: MLflow's HTTP retries are bounded (below), so the driver notices within seconds, and
  what it cannot write goes to the sweep's journal on disk and reaches the store, in order, once
  it answers again (tracking/journal.py; `write_journal` for `elastune sync`).
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

# Read by MLflow when it acts, so setting them here is enough; a user's own setting wins.
# Artifact downloads would draw a tqdm bar on stderr, and every run ended on a server would print
# two "View run" lines to stdout (and cost a request each): the driver prints its own progress.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
# A request to a server that went away must fail in seconds, not after MLflow's default 7 retries
# with backoff factor 2 and a 120 s timeout (about 4 minutes of silence): one retry, 1 s backoff,
# 10 s per attempt. A stopped server is then noticed in about a second, a host that no longer
# answers at all in at most 2 x 10 s + the backoff + a 5 s /health probe (`SweepTracker.answers`).
# Nothing is lost by giving up early: what the driver cannot write is journaled (journal.py).
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException

from elastune.dotted import flatten
from elastune.errors import ElastuneError, InputError, Problem
from elastune.text import printable
from elastune.tracking.artifacts import as_text, best_config_yaml, pareto_png, trials_csv
from elastune.tracking.encoding import TAG_MAX, mlflow_key, param_value, read_record, record_tags
from elastune.tracking.journal import Entry, Journal, active_journal, journaled_view, journaling_to, view_while_down
from elastune.tracking.records import FINAL_TRIAL_STATUSES, RecordError, SweepRecord, TrialRecord
from elastune.tracking.uri import (
    artifact_location,
    check_server,
    is_http,
    mlflow_run_url,
    resolve_tracking_uri,
    server_problem,
    sqlite_path,
)

__all__ = [
    "ARTIFACTS",
    "DEFAULT_EXPERIMENT",
    "STALE_AFTER_BEATS",
    "Heartbeat",
    "SweepSummary",
    "SweepTracker",
    "artifact_path",
    "check_writable",
    "heartbeat_interval",
    "list_sweeps",
    "load_sweep",
    "mark_interrupted",
    "mlflow_run_url",
    "newest_sweep_id",
    "resolve_tracking_uri",
    "sweep_summaries",
    "trial_run_name",
    "write_journal",
]

DEFAULT_EXPERIMENT = "elastune"
ARTIFACTS = ("best_config.yaml", "trials.csv", "pareto.png", "spec.yaml")

# Creating a SQLite store runs its migrations and says so at INFO, line by line.
for _name in ("alembic", "mlflow.store.db.utils", "mlflow.store.tracking.sqlalchemy_store"):
    logging.getLogger(_name).setLevel(logging.WARNING)

_SWEEP_ID, _TRIAL_ID, _KIND, _STATUS = "elastune.sweep_id", "elastune.trial_id", "elastune.kind", "elastune.status"
_JOB_ID, _NODE, _ERROR, _NUMBER = "elastune.job_id", "elastune.node", "elastune.error", "elastune.number"
_SWEEP_STATUS = "elastune.sweep_status"  # a parent run's; a trial run's is elastune.status
_PRUNED, _NOTE = "elastune.pruned", "mlflow.note.content"  # the note is the run's description in `mlflow ui`
_PRUNED_NOTE = (
    "Stopped early by ASHA (pruned): its throughput was behind the others' at a rung. Not a failure; "
    "its samples/s is the running mean of the steps it ran."
)
_BEAT, _BEAT_EVERY = "elastune.heartbeat", "elastune.heartbeat_s"
STALE_AFTER_BEATS = 4  # missed beats before a running sweep reads back as stale
_PARENT = "mlflow.parentRunId"  # the tag `mlflow ui` nests child runs under
_SAFE_VALUE = re.compile(r"^[\w.:@+\-]+$")  # ids we can quote inside a search filter as they are

_SWEEP_RUN_STATUS = {
    "running": "RUNNING",
    "finished": "FINISHED",
    "failed": "FAILED",
    "interrupted": "KILLED",
    "stale": "RUNNING",  # never written: what a running sweep without a recent beat reads back as
}
# An infeasible trial was screened out on purpose, not a failure; a pruned one was stopped by ASHA
# because its throughput was behind, which is the search working, not a failure (MLflow shows KILLED
# like a crash): FINISHED, with the tag elastune.pruned=true and a note that says so.
_TRIAL_RUN_STATUS = {
    "ok": "FINISHED",
    "infeasible": "FINISHED",
    "pruned": "FINISHED",
    "oom": "FAILED",
    "failed": "FAILED",
    "running": "RUNNING",
    "interrupted": "KILLED",
}
_TRIAL_METRICS = (
    "samples_per_s",
    "peak_memory_bytes",
    "estimated_peak_bytes",
    "quality",
    "oom_retries",
)

# ---------------------------------------------------------------------------------------------
# The store.


def _client(uri: str, check: bool = True) -> MlflowClient:
    """A client for a resolved URI; a SQLite file's folder is created, a server must answer /health
    (unless not `check`)."""
    path = sqlite_path(uri)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif is_http(uri) and check:
        check_server(uri)
    return MlflowClient(tracking_uri=uri)


def check_writable(uri: str, experiment: str = DEFAULT_EXPERIMENT) -> None:
    """Write one tag to the store at a resolved `uri` and remove it again: raises where the store
    cannot be reached or written. The tag goes on `experiment` where it exists, else on the store's
    Default experiment, which every MLflow store has, so nothing is created and nothing is left."""
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None and found.lifecycle_stage == "active" else "0"
    key = "elastune.doctor.write_check"
    client.set_experiment_tag(experiment_id, key, str(time.time()))
    client.delete_experiment_tag(experiment_id, key)


def _ensure_experiment(client: MlflowClient, uri: str, name: str) -> str:
    if not name.strip():
        raise InputError(str(Problem("--experiment", name, "must not be empty; the default is 'elastune'")))
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return str(client.create_experiment(name, artifact_location=artifact_location(uri)))
        except MlflowException:  # created meanwhile by another process: use theirs
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    return str(experiment.experiment_id)


# ---------------------------------------------------------------------------------------------
# Writing.


@dataclass
class _RunState:
    """What a run already holds that matters for writing to it again."""

    run_id: str
    params: set[str] = field(default_factory=set)  # params are write-once in MLflow
    tags: set[str] = field(default_factory=set)
    final: bool = False  # a trial run that ended on its own: never written again


class SweepTracker:
    """Writes one sweep (or several, one after another) into an MLflow experiment.

    `start_sweep` and `log_trial` set `record.mlflow_run_id` / `trial.mlflow_run_id` on the
    records they are given, so what `load_sweep` returns equals what was logged (a trial's write
    that went to the journal sets none). While a sweep's driver journals (journal.py), every write
    of that sweep goes through its journal and, through it, one tracker: `apply` and `replay` are
    that tracker's side.
    """

    def __init__(self, tracking_uri: str, experiment: str = DEFAULT_EXPERIMENT) -> None:
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.experiment = experiment
        # A server that does not answer fails here, with the fix; except in a driver that journals
        # to it: its sweep callback builds a tracker whenever Tune starts it, outage or not, and
        # writes through the journal's tracker anyway.
        offline_ok = journaling_to(self.tracking_uri)
        self._client = _client(self.tracking_uri, check=not offline_ok)  # a SQLite store is created here, once
        self._experiment: str | None = None
        if not offline_ok:
            self._experiment = _ensure_experiment(self._client, self.tracking_uri, experiment)
        self._runs: dict[str, _RunState] = {}  # run id -> what it holds
        self._children: dict[str, dict[str, str]] = {}  # parent run id -> trial id -> child run id

    @property
    def _experiment_id(self) -> str:
        """Looked up (created where missing) on first use."""
        if self._experiment is None:
            self._experiment = _ensure_experiment(self._client, self.tracking_uri, self.experiment)
        return self._experiment

    def start_sweep(self, record: SweepRecord) -> str:
        """Create the sweep's parent run, or reopen it when one with this sweep_id exists (resume)."""
        existing = _find_parent(self._client, self._experiment_id, record.sweep_id)
        if existing is None:
            run = self._client.create_run(
                self._experiment_id,
                start_time=_ms(record.started_at),
                tags={_SWEEP_ID: record.sweep_id, _KIND: "sweep"},
                run_name=f"sweep-{record.sweep_id}",
            )
            state = _RunState(run.info.run_id)
            self._children[state.run_id] = {}
        else:
            state = _RunState(existing.info.run_id, set(existing.data.params), set(existing.data.tags))
            if existing.info.status != "RUNNING":
                self._client.update_run(state.run_id, status="RUNNING")
            self._children[state.run_id] = self._load_children(state.run_id)
        self._runs[state.run_id] = state
        record.mlflow_run_id = state.run_id
        params = {key: as_text(value) for key, value in flatten(record.spec).items()}
        if record.memory_ceiling_bytes is not None:
            params["memory_ceiling_bytes"] = str(record.memory_ceiling_bytes)
        if record.quality_tolerance is not None:
            params["quality_tolerance"] = repr(record.quality_tolerance)
        self._write(state, params=params, tags=self._sweep_tags(record))
        self._client.log_text(state.run_id, yaml.safe_dump(record.spec, sort_keys=False), "spec.yaml")
        self._log_data_artifact(state.run_id, record.spec.get("base"))
        return state.run_id

    def _log_data_artifact(self, run_id: str, base: Any) -> None:
        """A file source's data artifact (of the spec's base config: the file every trial reads) on
        the parent run, so a model can be served from what MLflow holds: a table's vocabulary as
        vocabulary/vocabulary.json, a text's tokenizer as tokenizer/tokenizer.json. The spec was
        validated, so the artifact is in the cache: no file is re-read."""
        from elastune.data.artifacts import data_artifact

        artifact = data_artifact(base) if isinstance(base, dict) else None
        if artifact is not None:
            self._client.log_text(run_id, artifact.text, artifact.mlflow_path)

    def log_trial(self, record: SweepRecord, trial: TrialRecord) -> str | None:
        """Create or update the trial's child run (one per sweep_id and trial_id, never two); its
        run id (None for a trial whose first write went to the journal)."""
        self._send(Entry("trial", record, trial))
        return trial.mlflow_run_id

    def log_confirmation(self, record: SweepRecord, trial: TrialRecord) -> None:
        """The confirmation stage's figures on a trial that has ended (tuning/confirm.py): its
        record again, and the ratios as metrics (confirmed_speedup_low/_median/_high)."""
        self._send(Entry("confirmation", record, trial))

    def update_sweep(self, record: SweepRecord) -> None:
        """Best-so-far and counts on the parent run: a few rows in one batch, cheap after every trial."""
        self._send(Entry("sweep", record))

    def finish_sweep(self, record: SweepRecord) -> None:
        """Artifacts on the parent (best_config.yaml, trials.csv, pareto.png), then end it per status.
        An interrupted sweep gets none (they come when a resume finishes it): its driver may have
        only the 3 s `ray job stop` allows, and drawing the plot alone can take that."""
        if record.status == "running":
            raise ValueError("finish_sweep needs a final status (finished, failed or interrupted), not 'running'")
        self._send(Entry("end", record))

    # -- the writes themselves, and a journal's ----------------------------------------------

    def _send(self, entry: Entry) -> None:
        journal = active_journal(entry.sweep.sweep_id, self.tracking_uri)
        if journal is None:
            self.apply(entry)
        else:
            journal.write(entry)

    def apply(self, entry: Entry) -> None:
        """Write one entry to the store (journal.py's `Writer`)."""
        if entry.kind == "trial":
            assert entry.trial is not None
            self._log_trial(entry.sweep, entry.trial)
        elif entry.kind == "confirmation":
            assert entry.trial is not None
            self._log_confirmation(entry.sweep, entry.trial)
        elif entry.kind == "sweep":
            self._update_sweep(entry.sweep)
        else:
            self._finish_sweep(entry.sweep)

    def replay(self, entries: Sequence[Entry]) -> None:
        """A journal's entries, in order: each trial's and confirmation's as they came; of the
        sweep's own, the last alone (each holds all of the sweep's fields), with the trials the
        store holds once the others are written. Idempotent: a trial that ended keeps its first
        word, and run ids are looked up by sweep and trial id, not taken from the journal."""
        if not entries:
            return
        sweep_id = entries[0].sweep.sweep_id
        parent = _find_parent(self._client, self._experiment_id, sweep_id)
        if parent is None:
            why = f"holds no sweep {sweep_id!r}: give the store the sweep was recorded in"
            raise InputError(str(Problem("--tracking-uri", self.tracking_uri, why)))
        run_id = parent.info.run_id
        # Read again: a run whose creation reached the store but whose answer did not is found, not made twice.
        self._children[run_id] = self._load_children(run_id)
        for entry in entries:
            if entry.trial is not None:
                sweep = replace(entry.sweep, mlflow_run_id=run_id)
                self.apply(Entry(entry.kind, sweep, replace(entry.trial, mlflow_run_id=None)))
        last = next((entry for entry in reversed(entries) if entry.trial is None), None)
        if last is not None:
            trials = _trials(self._client, self._experiment_id, run_id)
            self.apply(Entry(last.kind, replace(last.sweep, mlflow_run_id=run_id, trials=trials)))

    def answers(self) -> bool:
        """Whether the store takes requests now: a server's /health (one request, 5 s at most),
        then one read (a server whose database is gone answers /health but nothing else)."""
        if is_http(self.tracking_uri) and server_problem(self.tracking_uri, timeout_s=5.0) is not None:
            return False
        try:
            self._client.search_experiments(max_results=1)
        except Exception:  # whatever went wrong, the store did not answer
            return False
        return True

    def _log_trial(self, record: SweepRecord, trial: TrialRecord) -> None:
        parent = self._parent_id(record)
        if parent not in self._children:
            self._children[parent] = self._load_children(parent)
        children = self._children[parent]
        run_id = children.get(trial.trial_id)
        if run_id is None and trial.mlflow_run_id:  # logged by another tracker meanwhile (the sweep's callback)
            children = self._children[parent] = self._load_children(parent)
            run_id = children.get(trial.trial_id)
        existed = run_id is not None
        if run_id is None:
            run = self._client.create_run(
                self._experiment_id,
                tags={_PARENT: parent, _SWEEP_ID: record.sweep_id, _TRIAL_ID: trial.trial_id, _KIND: "trial"},
                run_name=trial_run_name(trial),
            )
            run_id = children[trial.trial_id] = run.info.run_id
            self._runs[run_id] = _RunState(run_id)
        state = self._runs[run_id]
        trial.mlflow_run_id = run_id
        if state.final:  # a resumed or restarted driver reporting it again: the first word stands
            return
        params = {key: as_text(value) for key, value in flatten(trial.config).items()}
        params |= {f"search.{key}": as_text(value) for key, value in flatten(trial.params).items()}
        metrics = {name: float(getattr(trial, name)) for name in _TRIAL_METRICS if getattr(trial, name) is not None}
        # Each eval metric as val_NAME (a click model's: val_logloss, val_auc, val_baseline_logloss).
        metrics |= {f"val_{name}": value for name, value in trial.metrics.items()}
        if trial.units and trial.units_per_s is not None:
            metrics[f"{trial.units}_per_s"] = trial.units_per_s
        if trial.samples_per_s_quartiles:  # the spread over the trial's timed windows
            low, median, high = trial.samples_per_s_quartiles
            metrics |= {"samples_per_s_p25": low, "samples_per_s_median": median, "samples_per_s_p75": high}
        tags = {
            _SWEEP_ID: record.sweep_id,
            _TRIAL_ID: trial.trial_id,
            _KIND: "trial",
            _STATUS: trial.status,
            _NUMBER: str(trial.number),
            _JOB_ID: record.job_id,
            _NODE: trial.node,
            _ERROR: trial.error[-TAG_MAX:] if trial.error else None,  # the end of a traceback says most
            _PRUNED: "true" if trial.status == "pruned" else None,
            _NOTE: _PRUNED_NOTE if trial.status == "pruned" else None,
            **record_tags(trial.to_dict()),
        }
        self._write(state, params=params, metrics=metrics, tags=tags)
        if _TRIAL_RUN_STATUS[trial.status] == "RUNNING":
            if existed:  # a new run starts out RUNNING; an old one may have been ended before a resume
                self._client.update_run(run_id, status="RUNNING")
        else:
            self._client.set_terminated(run_id, status=_TRIAL_RUN_STATUS[trial.status])
        state.final = trial.status in FINAL_TRIAL_STATUSES

    def _log_confirmation(self, record: SweepRecord, trial: TrialRecord) -> None:
        run_id = trial.mlflow_run_id or self._load_children(self._parent_id(record)).get(trial.trial_id)
        if run_id is None or not trial.confirmed_speedup:
            return
        trial.mlflow_run_id = run_id
        low, median, high = trial.confirmed_speedup
        metrics = {"confirmed_speedup_low": low, "confirmed_speedup_median": median, "confirmed_speedup_high": high}
        tags: dict[str, str | None] = {**record_tags(trial.to_dict())}
        self._write(_RunState(run_id), metrics=metrics, tags=tags)

    def _update_sweep(self, record: SweepRecord) -> None:
        state = self._runs.get(self._parent_id(record)) or _RunState(self._parent_id(record))
        counts = record.counts()
        metrics: dict[str, float] = {f"trials_{status}": float(n) for status, n in counts.items()}
        metrics["trials_total"] = float(len(record.trials))
        best = record.best()
        if best is not None and best.samples_per_s is not None:
            metrics["best_samples_per_s"] = best.samples_per_s
            if best.peak_memory_bytes is not None:
                metrics["best_peak_memory_bytes"] = float(best.peak_memory_bytes)
            if record.reference_samples_per_s:
                metrics["speedup_over_reference"] = best.samples_per_s / record.reference_samples_per_s
            if best.confirmed_speedup:  # the confirmation stage's ratio, measured interleaved
                metrics["best_confirmed_speedup"] = best.confirmed_speedup[1]
        if record.reference_samples_per_s is not None:
            metrics["reference_samples_per_s"] = record.reference_samples_per_s
        if record.reference_quality is not None:
            metrics[f"reference_{record.quality_metric}"] = record.reference_quality
        # The step is the number of trials so far: the MLflow UI then plots best-so-far per trial.
        self._write(state, metrics=metrics, tags=self._sweep_tags(record), step=len(record.trials))

    def _finish_sweep(self, record: SweepRecord) -> None:
        self._update_sweep(record)
        run_id = self._parent_id(record)
        if record.status != "interrupted":
            self._log_artifacts(run_id, record)
        end = _ms(record.ended_at) or int(time.time() * 1000)
        self._client.set_terminated(run_id, status=_SWEEP_RUN_STATUS[record.status], end_time=end)

    def _log_artifacts(self, run_id: str, record: SweepRecord) -> None:
        with tempfile.TemporaryDirectory(prefix="elastune-artifacts-") as folder:
            out = Path(folder)
            best = best_config_yaml(record)
            if best is not None:  # no feasible trial, no best config (load_sweep / results say so)
                (out / "best_config.yaml").write_text(best)
            (out / "trials.csv").write_text(trials_csv(record))
            (out / "pareto.png").write_bytes(pareto_png(record))
            self._client.log_artifacts(run_id, folder)

    # -- helpers ----------------------------------------------------------------------------

    def _parent_id(self, record: SweepRecord) -> str:
        if record.mlflow_run_id:
            return record.mlflow_run_id
        parent = _find_parent(self._client, self._experiment_id, record.sweep_id)
        if parent is None:
            raise ValueError(f"sweep {record.sweep_id!r} has no parent run: call start_sweep first")
        record.mlflow_run_id = parent.info.run_id
        return record.mlflow_run_id

    def _load_children(self, parent: str) -> dict[str, str]:
        """trial id -> child run id for a parent written before (a resume, or another tracker)."""
        children: dict[str, str] = {}
        for run in _search(self._client, self._experiment_id, f"tags.`{_PARENT}` = '{parent}'"):
            trial_id = run.data.tags.get(_TRIAL_ID)
            if trial_id is not None and trial_id not in children:
                children[trial_id] = run.info.run_id
                final = run.data.tags.get(_STATUS) in FINAL_TRIAL_STATUSES
                self._runs[run.info.run_id] = _RunState(
                    run.info.run_id, set(run.data.params), set(run.data.tags), final=final
                )
        return children

    def _sweep_tags(self, record: SweepRecord) -> dict[str, str | None]:
        fields = {k: v for k, v in record.to_dict().items() if k != "trials"}
        return {
            _SWEEP_ID: record.sweep_id,
            _KIND: "sweep",
            _SWEEP_STATUS: record.status,
            _JOB_ID: record.job_id,
            **record_tags(fields),
        }

    def _write(
        self,
        state: _RunState,
        params: dict[str, str] | None = None,
        metrics: dict[str, float] | None = None,
        tags: dict[str, str | None] | None = None,
        step: int = 0,
    ) -> None:
        """One log_batch per ~100 params/tags: MLflow's batch limits, new params only (write-once)."""
        now = int(time.time() * 1000)
        new_params = [
            Param(key, param_value(value))
            for key, value in ((mlflow_key(k), v) for k, v in (params or {}).items())
            if key not in state.params
        ]
        metric_rows = [Metric(mlflow_key(k), v, now, step) for k, v in (metrics or {}).items()]
        tag_rows = [RunTag(mlflow_key(k), v) for k, v in (tags or {}).items() if v is not None]
        # A tag whose value became None (an error that was cleared) must not linger.
        for key in [mlflow_key(k) for k, v in (tags or {}).items() if v is None and mlflow_key(k) in state.tags]:
            self._client.delete_tag(state.run_id, key)
            state.tags.discard(key)
        while new_params or tag_rows or metric_rows:
            params_now, new_params = new_params[:100], new_params[100:]
            tags_now, tag_rows = tag_rows[:100], tag_rows[100:]
            metrics_now, metric_rows = metric_rows[:800], metric_rows[800:]
            self._client.log_batch(state.run_id, metrics=metrics_now, params=params_now, tags=tags_now)
            state.params |= {p.key for p in params_now}
            state.tags |= {t.key for t in tags_now}


def trial_run_name(trial: TrialRecord) -> str:
    """A trial's run name in `mlflow ui`: `reference`, or `trial-007-<Tune's id>` in proposal order.
    Only for people: runs are found by their elastune.trial_id tag, so a sweep recorded under the
    names of an older release (`trial--01-reference`) reads back and resumes the same."""
    if trial.trial_id == "reference":
        return "reference"
    return f"trial-{trial.number:03d}-{trial.trial_id}"


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def heartbeat_interval() -> float:
    """Seconds between a driver's beats: ELASTUNE_HEARTBEAT_S, default 15, at least 0.2."""
    raw = os.environ.get("ELASTUNE_HEARTBEAT_S", "15")
    try:
        seconds = float(raw)
    except ValueError:
        raise InputError(str(Problem("ELASTUNE_HEARTBEAT_S", raw, "must be a number of seconds, e.g. 15"))) from None
    if not 0.2 <= seconds <= 3600:
        raise InputError(str(Problem("ELASTUNE_HEARTBEAT_S", raw, "must be between 0.2 and 3600 seconds")))
    return seconds


class Heartbeat:
    """Beats on a sweep's parent run from a thread of its own (its own client), until stopped.

    A beat that fails (a busy SQLite file, a server that blinked) is skipped: the next one comes
    soon, and a sweep reads back as stale only after `STALE_AFTER_BEATS` missed beats in a row.
    """

    def __init__(self, tracking_uri: str, run_id: str, every_s: float | None = None) -> None:
        self.every_s = heartbeat_interval() if every_s is None else every_s
        self._client = _client(resolve_tracking_uri(tracking_uri))
        self._run_id = run_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="elastune-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._beat()  # the first beat before anything else, so a reader never sees a running sweep without one
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._beat()

    def _beat(self) -> None:
        tags = [RunTag(_BEAT, f"{time.time():.3f}"), RunTag(_BEAT_EVERY, repr(self.every_s))]
        try:
            self._client.log_batch(self._run_id, tags=tags)
        except Exception as exc:  # a missed beat is what the reader tolerates
            logging.getLogger(__name__).debug("heartbeat skipped: %s", exc)


def mark_interrupted(tracking_uri: str, run_id: str) -> None:
    """The quick word that a sweep's driver is stopping: status interrupted, the run KILLED. It
    comes first (`ray job stop` allows a driver 3 s before SIGKILL); the full record, artifacts
    included, follows when the driver gets that far (`finish_sweep`)."""
    client = _client(resolve_tracking_uri(tracking_uri))
    client.set_tag(run_id, _SWEEP_STATUS, "interrupted")
    client.set_terminated(run_id, status="KILLED")


# ---------------------------------------------------------------------------------------------
# Reading back.


def list_sweeps(tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT) -> list[SweepRecord]:
    """Every sweep in the experiment, newest first; trials left empty (one query, whatever the size)."""
    store = _open_store(tracking_uri, experiment)
    if store is None:
        return []
    client, experiment_id = store
    records = [_sweep_from_run(run) for run in _search(client, experiment_id, f"tags.`{_KIND}` = 'sweep'")]
    records.sort(key=lambda r: r.started_at or 0.0, reverse=True)
    return records


@dataclass(frozen=True)
class SweepSummary:
    """A line of `elastune sweeps`: what the parent run's tags and metrics say, no trial read."""

    sweep_id: str
    name: str
    status: str
    started_at: float | None
    trials: int | None  # every trial recorded so far, the reference and screened-out ones included
    best_samples_per_s: float | None
    best_confirmed_speedup: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def sweep_summaries(tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT) -> list[SweepSummary]:
    """Every sweep in the experiment, newest first, from its parent run alone (one query)."""
    store = _open_store(tracking_uri, experiment)
    if store is None:
        return []
    client, experiment_id = store
    summaries = []
    for run in _search(client, experiment_id, f"tags.`{_KIND}` = 'sweep'"):
        record, metrics = _sweep_from_run(run), run.data.metrics
        trials = _finite(metrics.get("trials_total"))
        summaries.append(
            SweepSummary(
                sweep_id=record.sweep_id,
                name=str(record.spec.get("name") or record.sweep_id),
                status=record.status,
                started_at=record.started_at,
                trials=int(trials) if trials is not None else None,
                best_samples_per_s=_finite(metrics.get("best_samples_per_s")),
                best_confirmed_speedup=_finite(metrics.get("best_confirmed_speedup")),
            )
        )
    summaries.sort(key=lambda s: s.started_at or 0.0, reverse=True)
    return summaries


def newest_sweep_id(tracking_uri: str | None = None, *, finished: bool = False) -> str | None:
    """The newest sweep's id (with `finished`, the newest that finished); None: there is none."""
    return next((r.sweep_id for r in list_sweeps(tracking_uri) if not finished or r.status == "finished"), None)


def load_sweep(
    sweep_id: str | None, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT
) -> SweepRecord:
    """The whole record, trials included (in proposal order), from MLflow alone. None: the newest.
    In a driver whose journal holds what the store lacks (journal.py), its own view of its sweep."""
    uri = resolve_tracking_uri(tracking_uri)
    kept = journaled_view(sweep_id, uri) if sweep_id is not None else None
    if kept is not None:
        return kept
    try:
        return _load_sweep(sweep_id, uri, experiment)
    except Exception:
        # the store went down since the driver's last write: its own view, as journaled_view's
        fallback = view_while_down(sweep_id, uri) if sweep_id is not None else None
        if fallback is None:
            raise
        return fallback


def _load_sweep(sweep_id: str | None, uri: str, experiment: str) -> SweepRecord:
    store = _open_store(uri, experiment)
    if store is None:
        raise InputError(
            f"no sweeps recorded in {uri} (experiment {experiment!r}); run `elastune sweep SPEC.yaml` first, "
            "or pass the --tracking-uri the sweep was recorded in"
        )
    client, experiment_id = store
    parent = _find_parent(client, experiment_id, sweep_id) if sweep_id is not None else _newest(client, experiment_id)
    if parent is None:
        raise _unknown_sweep(sweep_id, uri, experiment)
    record = _sweep_from_run(parent)
    record.trials = _trials(client, experiment_id, parent.info.run_id)
    return record


def write_journal(folder: Path, sweep_id: str, tracking_uri: str | None = None) -> int:
    """Write the journal a sweep's driver left in its state `folder` (journal.py) to the store, then
    remove it; how many entries it held (0: there is none). Every line is validated before anything
    is written. A store that stops answering half-way leaves the journal whole, to be written again
    (writing it twice changes nothing)."""
    journal = Journal(folder)
    if not journal.pending:
        return 0
    entries = journal.entries(sweep_id)
    uri = resolve_tracking_uri(tracking_uri)
    try:
        SweepTracker(uri).replay(entries)
    except MlflowException as exc:
        raise ElastuneError(
            f"the MLflow store at {uri} stopped answering while the journal was "
            f"written ({exc.message[:300]}); it stays at {journal.path}: run this again once the store answers"
        ) from None
    journal.remove()
    return len(entries)


def artifact_path(
    sweep_id: str, name: str, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT
) -> Path:
    """Download one of the parent run's artifacts into a new private temporary folder (never a
    shared, predictable one: another user of the machine could have planted a link there)."""
    if name not in ARTIFACTS:
        raise InputError(str(Problem("artifact", name, f"unknown artifact; one of {', '.join(ARTIFACTS)}")))
    uri = resolve_tracking_uri(tracking_uri)
    store = _open_store(uri, experiment)
    parent = _find_parent(store[0], store[1], sweep_id) if store is not None else None
    if store is None or parent is None:
        raise _unknown_sweep(sweep_id, uri, experiment)
    client, run_id = store[0], parent.info.run_id
    if name not in {f.path for f in client.list_artifacts(run_id)}:
        status = _sweep_from_run(parent).status
        if status in {"running", "interrupted", "stale"}:  # its artifacts come when it finishes
            raise InputError(_not_yet(sweep_id, status, name))
        why = "no trial was feasible" if name == "best_config.yaml" else ""
        raise InputError(
            f"sweep {sweep_id!r} has no {name}{f' ({why})' if why else ''}; artifacts are written when a sweep "
            "finishes, see `elastune results` for its state"
        )
    folder = tempfile.mkdtemp(prefix="elastune-artifacts-")
    return Path(client.download_artifacts(run_id, name, folder))


def _not_yet(sweep_id: str, status: str, name: str) -> str:
    """Why a sweep that has not finished has no `name` yet, and what to do: resume it, or wait."""
    if status == "running":
        return f"sweep {sweep_id!r} is still running: {name} is written when it finishes"
    command = f"elastune sweep --resume {shlex.quote(printable(sweep_id))}"
    return f"sweep {sweep_id!r} is {status}: {name} is written when it finishes; resume it with: {command}"


def _open_store(tracking_uri: str | None, experiment: str) -> tuple[MlflowClient, str] | None:
    """(client, experiment id), or None when nothing was ever recorded there (creates nothing)."""
    uri = resolve_tracking_uri(tracking_uri)
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        return None
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None or found.lifecycle_stage == "deleted":
        return None
    return client, str(found.experiment_id)


def _search(client: MlflowClient, experiment_id: str, filter_string: str) -> list[Run]:
    """All active runs matching the filter, oldest first, every page."""
    runs: list[Run] = []
    token: str | None = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string, max_results=1000, order_by=["attributes.start_time ASC"], page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _find_parent(client: MlflowClient, experiment_id: str, sweep_id: str) -> Run | None:
    if _SAFE_VALUE.match(sweep_id):
        runs = _search(client, experiment_id, f"tags.`{_KIND}` = 'sweep' and tags.`{_SWEEP_ID}` = '{sweep_id}'")
    else:  # quotes or odd characters cannot be put in a filter string safely: match here instead
        runs = [
            r
            for r in _search(client, experiment_id, f"tags.`{_KIND}` = 'sweep'")
            if r.data.tags.get(_SWEEP_ID) == sweep_id
        ]
    return runs[0] if runs else None


def _newest(client: MlflowClient, experiment_id: str) -> Run | None:
    page = client.search_runs(
        [experiment_id], f"tags.`{_KIND}` = 'sweep'", max_results=1, order_by=["attributes.start_time DESC"]
    )
    return page[0] if page else None


def _unknown_sweep(sweep_id: str | None, uri: str, experiment: str) -> InputError:
    known = [r.sweep_id for r in list_sweeps(uri, experiment)[:5]]
    listing = f"known sweeps, newest first: {', '.join(known)}" if known else "no sweeps are recorded there"
    return InputError(
        str(Problem("sweep_id", sweep_id, f"no such sweep in {uri} (experiment {experiment!r}); {listing}"))
    )


def _sweep_from_run(run: Run) -> SweepRecord:
    data = read_record(run.data.tags)
    if data is None:  # not written by this module: what the plain tags and run info say
        end = run.info.end_time
        data = {
            "sweep_id": run.data.tags.get(_SWEEP_ID, run.info.run_id),
            "spec": {},
            "status": run.data.tags.get(_SWEEP_STATUS, run.data.tags.get(_STATUS, "running")),
            "job_id": run.data.tags.get(_JOB_ID),
            "started_at": run.info.start_time / 1000 if run.info.start_time else None,
            "ended_at": end / 1000 if end else None,
        }
    data["mlflow_run_id"] = run.info.run_id
    data.pop("trials", None)
    if run.data.tags.get(_SWEEP_STATUS) == "interrupted":  # the quick mark, written before the full record
        data["status"] = "interrupted"
    beat, every = _number(run.data.tags.get(_BEAT)), _number(run.data.tags.get(_BEAT_EVERY)) or 15.0
    if beat is not None:
        data["heartbeat_at"] = beat
        if data.get("status") == "running" and time.time() - beat > STALE_AFTER_BEATS * every:
            data["status"] = "stale"
    return _from_dict(SweepRecord, data, run)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _number(text: str | None) -> float | None:
    """A finite float from a tag, else None (a tag is text anyone with the store could have set)."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _trials(client: MlflowClient, experiment_id: str, parent_run_id: str) -> list[TrialRecord]:
    """A sweep's trials as its child runs hold them, in proposal order."""
    children = _search(client, experiment_id, f"tags.`{_PARENT}` = '{parent_run_id}'")
    trials = [t for t in (_trial_from_run(run) for run in children) if t is not None]
    return sorted(trials, key=lambda t: (t.number, t.trial_id))


def _trial_from_run(run: Run) -> TrialRecord | None:
    data = read_record(run.data.tags)
    if data is None:
        return None  # a child run some other tool added under the parent: not a trial of ours
    data["mlflow_run_id"] = run.info.run_id
    return _from_dict(TrialRecord, data, run)


_R = TypeVar("_R", SweepRecord, TrialRecord)


def _from_dict(kind: type[_R], data: dict[str, Any], run: Run) -> _R:
    """A record read back from a run's tags; a damaged or foreign one is an error naming the run."""
    try:
        return kind.from_dict(data)
    except RecordError as exc:
        raise RecordError(f"MLflow run {run.info.run_id}: {exc}") from exc
