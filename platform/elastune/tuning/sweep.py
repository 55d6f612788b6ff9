"""Run a sweep: spec -> preflight -> Ray -> reference run -> Tune (Optuna + ASHA) -> MLflow.

`run_sweep` reads top to bottom. The driver is the only MLflow writer: trials report to Tune, and
`SweepCallback` (in the driver) turns each report into the trial's child run, so a SQLite store is
enough on one machine. Resuming (`resume=SWEEP_ID`) restores Tune's experiment from the sweep's
local state folder (tuning/state.py) and runs the spec kept there, on the cluster `--address` or
RAY_ADDRESS names, else a new local Ray: the MLflow store is shared and untrusted, so nothing read
from it names a folder, a spec to run or a cluster to dial. Finished trials are not run again
(`TrialContext.finished`), and MLflow logging is idempotent per trial, so no run is duplicated.

A sweep ends finished, or interrupted (SIGINT, SIGTERM, `ray job stop`: see `Interruption`). One
whose driver died without a word (SIGKILL) stops beating (`Heartbeat`) and reads back as stale.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ray.exceptions import AuthenticationError

from elastune.cluster import address_problem, auth_problem
from elastune.compat import loopback_only_ray
from elastune.config import elastune_home
from elastune.errors import ConfigError, ElastuneError, InputError, Problem, StoreUnreachable, SweepInterrupted
from elastune.text import printable
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.display import Display, PlainDisplay, register, unregister
from elastune.tuning.progress import STOPPING, SweepCallback, error_line, searched
from elastune.tuning.report import TrialReport
from elastune.tuning.results import short_bytes
from elastune.tuning.spec import SweepSpec
from elastune.tuning.state import (
    SPEC_FILE,
    check_sweep_id,
    create_state,
    private_files,
    read_local_spec,
    trusted_state,
    write_local_spec,
)
from elastune.units import human_bytes
from elastune.workloads.quality import QualityMetric, unlearned_warning

__all__ = [
    "Interruption",
    "SweepInterrupted",
    "SweepOptions",
    "check_ceiling",
    "check_cluster",
    "connect_ray",
    "new_sweep_id",
    "reference_report",
    "run_sweep",
    "sweeps_home",
    "trial_concurrency",
]


@dataclass
class SweepOptions:
    address: str | None = None  # Ray cluster; None: RAY_ADDRESS, else a local Ray on 127.0.0.1
    tracking_uri: str | None = None  # MLflow; None: MLFLOW_TRACKING_URI, else ./mlflow.db
    home: Path | None = None  # where Tune keeps sweep state (for --resume); default sweeps_home()
    echo: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))
    # where progress goes (tuning/display.py); None: plain lines through `echo`
    display: Display | None = None
    verbose: bool = False  # let Ray, Tune and Optuna print what they print (else only the sweep's own lines)
    local_cpus: int | None = None  # CPUs of the local Ray started when there is no cluster
    local_gpus: int | None = None


def sweeps_home() -> Path:
    return elastune_home() / "sweeps"


def new_sweep_id(spec: SweepSpec) -> str:
    return f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def run_sweep(spec: SweepSpec | None, options: SweepOptions, resume: str | None = None) -> SweepRecord:
    """Run (or resume) a sweep to its end and return its record; a SIGINT or SIGTERM ends it as
    interrupted instead (recorded so, then `SweepInterrupted`, which says how to resume)."""
    from elastune.tracking.mlflow import resolve_tracking_uri

    # -- preflight: every input problem before anything is launched or written
    uri = resolve_tracking_uri(options.tracking_uri)
    home = (options.home or sweeps_home()).expanduser().resolve()
    notes: list[str] = []
    if resume is not None:
        spec, record, notes = _resume_state(resume, uri, home, spec, options)
    else:
        assert spec is not None, "a spec or a sweep id to resume"
        check_ceiling(spec)
        record = SweepRecord(
            sweep_id=new_sweep_id(spec),
            spec=spec.model_dump(mode="json"),
            status="running",
            memory_ceiling_bytes=spec.constraints.memory_ceiling,
            quality_tolerance=spec.constraints.quality_tolerance,
            started_at=time.time(),
            job_id=ray_job_id(),
        )
    display = options.display or PlainDisplay(options.echo)
    echo = display.line
    for note in notes:
        echo(note)
    if not options.verbose:
        quiet_libraries()
    with private_files():  # Tune's state, and a local Ray's files, are this user's alone
        return _run(spec, record, options, uri, home, display, resumed=resume is not None)


def _run(
    spec: SweepSpec,
    record: SweepRecord,
    options: SweepOptions,
    uri: str,
    home: Path,
    display: Display,
    resumed: bool,
) -> SweepRecord:
    """The sweep's stages once its inputs are checked: Ray, the reference, the search, the
    confirmation, the record's end. What the store cannot take meanwhile is journaled in the
    sweep's state folder (tracking/journal.py); a sweep that ends with the journal unwritten raises
    `StoreUnreachable`, which names the command that writes it."""
    from elastune.tracking.journal import journaling
    from elastune.tracking.mlflow import Heartbeat, SweepTracker

    echo = display.line
    if resumed:
        _write_pending_journal(home, record, uri, echo)
    connect_ray(options)
    record.ray_address = _cluster_address(options)
    concurrency = trial_concurrency(spec, echo)
    _keep_state(home, record.sweep_id, spec)  # every input is checked: from here on the sweep leaves state
    if spec.uses_edo:
        from elastune.edo.broker import ensure_broker

        ensure_broker()  # trials register their devices; `elastune edo status` shows them meanwhile
    # Tune saves its experiment state (what a resume restores) every few seconds instead of its
    # default ten or more, so a stopped driver leaves less to redo; TrialContext.finished covers the rest.
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")
    tracker = SweepTracker(uri)
    started = time.time()
    register(record.sweep_id, display)
    resume_line = resume_command(record.sweep_id, options.tracking_uri)
    with (
        unregistered(record.sweep_id),
        Interruption(record.sweep_id, uri, resume_line, echo) as stop,
        journaling(record.sweep_id, home / record.sweep_id, tracker, echo) as journal,
    ):
        failure: str | None = None  # why the engine stopped the sweep, where it did
        try:
            record.mlflow_run_id = stop.run_id = tracker.start_sweep(record)
            with Heartbeat(uri, record.mlflow_run_id):
                ceiling = spec.constraints.memory_ceiling
                echo(
                    f"sweep {record.sweep_id}: {spec.budget.max_trials} proposals, {spec.budget.max_concurrent} "
                    f"at a time, ceiling {short_bytes(ceiling) if ceiling else 'none'}"
                )
                _measure_reference(spec, record, tracker, home, stop, display)
                if not stop.signum:
                    display.stage("search", spec.budget.max_trials, done=searched(record), concurrency=concurrency)
                    _search(spec, record, uri, home, concurrency, resumed=resumed)
                if not stop.signum:
                    _confirm(spec, record.sweep_id, uri, tracker, home, stop, display)
        except ElastuneError:
            raise
        except Exception as exc:
            # Stopping can break what was under way (a trial's actor killed mid-call): the
            # signal, not this, is what ended the sweep. Without a signal the engine failed
            # where the sweep cannot go on (Tune re-raises Ray's OutOfMemoryError from fit()):
            # the sweep ends interrupted, resumable, said in one line (the traceback with -v).
            if not stop.signum:
                failure = error_line(f"{type(exc).__name__}: {exc} {exc.__cause__!r}")
                if options.verbose:
                    traceback.print_exc()
        if record.mlflow_run_id is None:  # stopped before anything was recorded: nothing to resume
            raise SweepInterrupted(record, stop.signum or signal.SIGTERM, "", recorded=False, reason=failure)
        stopped = bool(stop.signum) or failure is not None
        record = _end_record(record.sweep_id, uri, tracker, journal, interrupted=stopped, join=stop.join)
    if stop.signum or failure is not None:  # the resume writes the journal first
        raise SweepInterrupted(record, stop.signum or signal.SIGTERM, stop.resume, reason=failure)
    if journal.pending:
        raise StoreUnreachable(record, uri, journal.path, sync_command(record.sweep_id, options.tracking_uri))
    echo(f"sweep {record.sweep_id} finished in {time.time() - started:.0f} s")
    return record


def quiet_libraries() -> None:
    """Only the sweep's own lines on the console (`--verbose` keeps the libraries' own): Tune's
    legacy reporter, silent at verbose=0 (its newer one prints an experiment box and TensorBoard
    hints whatever the verbosity), and no INFO or WARNING logs from Ray, Tune or Optuna (what
    matters to a sweep reaches the user as the sweep's own line or error)."""
    import optuna

    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    logging.getLogger("ray").setLevel(logging.ERROR)
    # Tune logs a failed trial's whole traceback (Ray's OOM dump included) at ERROR: the sweep says
    # it in one line (progress.py `error_line`) and keeps the text in the trial's error file
    logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    optuna.logging.set_verbosity(optuna.logging.ERROR)


@contextlib.contextmanager
def unregistered(sweep_id: str) -> Iterator[None]:
    """Forget the sweep's display when the sweep ends (its driver may run another)."""
    try:
        yield
    finally:
        unregister(sweep_id)


def _measure_reference(
    spec: SweepSpec, record: SweepRecord, tracker: Any, home: Path, stop: Interruption, display: Display
) -> None:
    """The reference: measured once per sweep (a resume keeps it), the bar for quality and the
    base of speed-ups. One stopped half-way is not recorded: a resume measures it again."""
    from elastune.tuning.trial import TrialContext

    if stop.signum or any(t.trial_id == "reference" for t in record.trials):
        return
    display.stage("reference", None)
    context = TrialContext(spec=spec.model_dump(mode="json"))
    reference = _run_reference(spec, record, _trainable(context), home, display.line)
    if not stop.signum:
        record.trials.append(reference)
        tracker.log_trial(record, reference)
        tracker.update_sweep(record)


def _search(spec: SweepSpec, record: SweepRecord, uri: str, home: Path, concurrency: int, resumed: bool) -> None:
    """The search: Optuna proposes, the estimator screens, the engine runs (a Ray Train worker
    group when a trial has several workers), ASHA prunes; `SweepCallback` records each trial."""
    from ray import tune

    from elastune.tuning.trial import TrialContext
    from elastune.tuning.worker_group import WorkerGroupReaper

    context = TrialContext(
        spec=spec.model_dump(mode="json"),
        reference_quality=record.reference_quality,
        edo=spec.uses_edo,
        finished=_finished_reports(record),
        reference=reference_report(record),
    )
    trainable = _trainable(context)
    experiment = home / record.sweep_id  # the validated id's folder (tuning/state.py), checked on a resume
    # A driver killed after Tune wrote its tuner but before its first experiment state restores to
    # an experiment that runs one trial and ends "finished": start it anew instead (finished trials
    # are still never run again: TrialContext.finished).
    saved = any(experiment.glob("experiment_state*.json"))
    if resumed and saved and tune.Tuner.can_restore(str(experiment)):
        # Errored trials stay as they ended; one that finished never runs again (TrialContext.finished).
        tuner = tune.Tuner.restore(str(experiment), trainable=trainable, resume_unfinished=True, resume_errored=False)
    else:
        callback = SweepCallback(record.sweep_id, uri, spec.model_dump(mode="json"))
        tuner = tune.Tuner(
            trainable,
            tune_config=_tune_config(spec, record.sweep_id, concurrency),
            run_config=tune.RunConfig(
                name=record.sweep_id, storage_path=str(home), callbacks=[callback, WorkerGroupReaper()], verbose=0
            ),
        )
    tuner.fit()


def _confirm(
    spec: SweepSpec, sweep_id: str, uri: str, tracker: Any, home: Path, stop: Interruption, display: Display
) -> None:
    """The confirmation stage (tuning/confirm.py), on the trials as MLflow holds them; each run is
    a one-trial Tune run of the same trainable, as the reference's is. A resume that finds the
    stage done (a confirmed trial) does not run it again. The store is not trusted: a trial runs
    again only if its stored parameters are a point of this sweep's space, applied to the spec the
    driver holds (never the store's copy)."""
    from elastune.tracking.mlflow import load_sweep
    from elastune.tuning.confirm import confirm_best, confirmation_candidates
    from elastune.tuning.trial import TrialContext

    current = load_sweep(sweep_id, uri)
    if spec.confirm.top == 0 or any(t.confirmed_speedup for t in current.trials):
        return
    admitted = []
    for trial in current.trials:
        problem = None if trial.trial_id == "reference" else spec.point_problem(trial.params)
        if problem is None:
            admitted.append(trial)
        elif trial.feasible:
            display.line(
                f"confirmation: trial {printable(trial.trial_id)} left out, its stored parameters are not "
                f"this sweep's ({printable(problem)})"
            )
    current.trials = admitted
    trainable = _trainable(TrialContext(spec=spec.model_dump(mode="json"), reference_quality=current.reference_quality))
    runs = spec.confirm.rounds * (len(confirmation_candidates(current, spec.confirm)) + 1)
    done = 0
    display.stage("confirmation", runs)

    names = {t.trial_id: f"trial {t.number}" if t.number >= 0 else "the reference" for t in current.trials}

    def measure(params: Any, name: str) -> float | None:
        nonlocal done
        _, round_, trial_id = name.split("-", 2)  # confirm_best's run names: confirm-ROUND-TRIAL_ID
        display.status(done, f"round {round_}: {names.get(trial_id, trial_id)}")
        display.started(name)
        report = _run_once(trainable, params, f"{sweep_id}-{name}", home)
        if report.error is not None and not stop.signum:  # once more: a run killed from outside proves nothing
            who = names.get(trial_id, trial_id)
            display.line(f"confirmation: {who} round {round_} failed ({report.error}); once more")
            report = _run_once(trainable, params, f"{sweep_id}-{name}-again", home)
        display.ended(name)
        done += 1
        display.status(done, "")
        return report.samples_per_s if report.status == "ok" and report.quality_ok is not False else None

    for trial in confirm_best(
        current,
        spec.confirm,
        spec.constraints.reference,
        measure,
        stopped=lambda: bool(stop.signum),
        echo=display.line,
    ):
        tracker.log_confirmation(current, trial)


def _run_once(trainable: Any, params: Any, name: str, home: Path) -> TrialReport:
    """One config, trained to its end as a one-trial Tune run; its final report."""
    from ray import tune

    from elastune.tuning.worker_group import WorkerGroupReaper

    tuner = tune.Tuner(
        trainable,
        param_space=dict(params),
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=tune.RunConfig(name=name, storage_path=str(home), callbacks=[WorkerGroupReaper()], verbose=0),
    )
    try:
        result = tuner.fit()[0]
    except RuntimeError as exc:  # Tune re-raises what it does not handle (Ray's OutOfMemoryError) this way
        return TrialReport(status="failed", error=error_line(f"{exc} {exc.__cause__!r}"))
    if result.error is not None:  # ended from outside (Ray's memory monitor, a lost node, a kill) or crashed
        return TrialReport(status="failed", error=error_line(f"{type(result.error).__name__}: {result.error}"))
    return TrialReport.from_metrics(dict(result.metrics or {}))


def _end_record(
    sweep_id: str, uri: str, tracker: Any, journal: Any, interrupted: bool, join: Callable[[], None]
) -> SweepRecord:
    """Read the sweep back from MLflow (the source of truth; while the store lacks what the journal
    holds, the driver's own view) and end it: finished, or interrupted with its unfinished trials
    marked so (a resume runs them again). Artifacts either way. No trial of an ended sweep stays
    running: nothing would ever end it."""
    from elastune.tracking.mlflow import load_sweep

    join()  # the quick interrupted mark, if one is on its way, lands first
    journal.catch_up(now=True)  # a store that answers again gets the journal before the end
    record = load_sweep(sweep_id, uri)
    record.ended_at = time.time()
    record.status = "interrupted" if interrupted else "finished"
    for trial in record.trials:
        if trial.status == "running":
            trial.status, trial.error = _unended(interrupted)
            tracker.log_trial(record, trial)
    tracker.finish_sweep(record)
    return record


def _unended(interrupted: bool) -> tuple[Literal["interrupted", "failed"], str]:
    """The status and reason of a trial still running when its sweep ends. In a sweep that finished,
    Tune ended every trial, so the trial's own end never reached the record (a callback that failed
    on it): it is recorded failed, since nothing runs it again."""
    if interrupted:
        return "interrupted", "stopped with the sweep's driver; a resume runs it again"
    return "failed", "the sweep finished without this trial's end being recorded (its last report was lost)"


def _write_pending_journal(home: Path, record: SweepRecord, uri: str, echo: Callable[[str], None]) -> None:
    """A resume first writes the journal its sweep's last driver left (the store was down when it
    ended), then takes the trials from the store, now whole. Refused when the journal ended the sweep."""
    from elastune.tracking.mlflow import load_sweep, write_journal

    written = write_journal(home / record.sweep_id, record.sweep_id, uri)
    if not written:
        return
    echo(f"resume: {written} journaled record(s) written to {uri}")
    stored = load_sweep(record.sweep_id, uri)
    if stored.status == "finished":
        raise InputError(
            f"--resume {record.sweep_id}: the sweep finished (its journal, now written, says so); "
            f"`elastune results {record.sweep_id}` shows it"
        )
    record.trials = stored.trials


def sync_command(sweep_id: str, tracking_uri: str | None) -> str:
    """The command that writes a sweep's journal (the tracking URI when one was given explicitly)."""
    command = ["elastune", "sync", sweep_id]
    if tracking_uri:
        command += ["--tracking-uri", tracking_uri]
    return shlex.join(command)


def _finished_reports(record: SweepRecord) -> dict[str, TrialReport]:
    """What each trial that already ended reported last (see TrialContext.finished)."""
    from elastune.tracking.records import FINAL_TRIAL_STATUSES

    ceiling, metric = record.memory_ceiling_bytes, QualityMetric(record.quality_metric, record.quality_direction)
    return {
        t.trial_id: TrialReport.replay(t, ceiling, record.quality_tolerance, record.reference_quality, metric)
        for t in record.trials
        if t.status in FINAL_TRIAL_STATUSES and t.trial_id != "reference" and not t.trial_id.startswith("screened-")
    }


def reference_report(record: SweepRecord) -> TrialReport | None:
    """The reference run's last report, for a proposal of the reference's own config to repeat
    (TrialContext.reference), its quality held to the reference's (its own: within any
    tolerance); None where the reference measured nothing (that proposal then trains)."""
    reference = record.reference()
    if reference is None or reference.status not in {"ok", "infeasible"} or reference.samples_per_s is None:
        return None
    metric = QualityMetric(record.quality_metric, record.quality_direction)
    report = TrialReport.replay(
        reference, record.memory_ceiling_bytes, record.quality_tolerance, record.reference_quality, metric
    )
    held = record.quality_tolerance is not None and record.reference_quality is not None
    return report.model_copy(update={"quality_ok": True if held else None})


def resume_command(sweep_id: str, tracking_uri: str | None) -> str:
    """The command that resumes a sweep (the tracking URI when one was given explicitly)."""
    command = ["elastune", "sweep", "--resume", sweep_id]
    if tracking_uri:
        command += ["--tracking-uri", tracking_uri]
    return shlex.join(command)


class Interruption:
    """SIGINT (Ctrl-C) and SIGTERM (`ray job stop`, `kill`) while a sweep runs.

    The first signal is recorded (the sweep id joins `STOPPING`) and the MLflow parent is marked
    interrupted at once, from a thread: `ray job stop` allows a driver 3 s before SIGKILL, so the
    word must not wait for the rest. Then Tune is asked to stop the way its own Ctrl-C handler
    does (SIGUSR1: trials end, the experiment state is saved for the resume), and the driver
    records the rest (`_end_record`). A second signal stops at once (KeyboardInterrupt). Handlers
    and Tune's SIGINT setting are restored on exit.
    """

    def __init__(self, sweep_id: str, tracking_uri: str, resume: str, echo: Callable[[str], None]) -> None:
        self.sweep_id, self.tracking_uri, self.resume, self.echo = sweep_id, tracking_uri, resume, echo
        self.signum: int | None = None
        self.run_id: str | None = None  # set once the parent run exists
        self._marker: threading.Thread | None = None
        self._saved: dict[int, Any] = {}
        self._tune_sigint: str | None = None

    def __enter__(self) -> Interruption:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only; an embedding caller handles them
        # Tune would install its own SIGINT handler inside each fit (and swallow the signal): it
        # hears it from this one instead, through SIGUSR1, which it always listens to in a fit.
        self._tune_sigint = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            self._saved[signum] = signal.getsignal(signum)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # outside a fit, the forwarded signal is a no-op
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        if self._saved:
            if self._tune_sigint is None:
                os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
            else:
                os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = self._tune_sigint
        STOPPING.discard(self.sweep_id)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # asked twice: stop now
        self.signum = signum
        STOPPING.add(self.sweep_id)
        # The resume command now as well as last: a SIGKILL may follow (`ray job stop`: 3 s later).
        self.echo(
            f"{signal.Signals(signum).name}: stopping sweep {self.sweep_id} (again to stop at once); "
            f"resume it with: {self.resume}"
        )
        if self.run_id is not None:
            self._marker = threading.Thread(target=self._mark, name="elastune-interrupted", daemon=True)
            self._marker.start()
        os.kill(os.getpid(), signal.SIGUSR1)

    def _mark(self) -> None:
        from elastune.tracking.mlflow import mark_interrupted

        assert self.run_id is not None
        try:
            mark_interrupted(self.tracking_uri, self.run_id)
        except Exception as exc:  # the full record follows from the main thread
            self.echo(f"could not mark the sweep interrupted yet ({exc}); the driver will when it ends")

    def join(self) -> None:
        if self._marker is not None:
            self._marker.join(timeout=30)


def _trainable(context: Any) -> Any:
    from ray import tune

    from elastune.tuning.trial import run_trial
    from elastune.tuning.worker_group import DRIVER_MEMORY

    res = SweepSpec.model_validate(context.spec).resources
    resources: dict[str, float] = {"CPU": res.cpus_per_trial}
    if res.gpus_per_trial:
        resources["GPU"] = res.gpus_per_trial
    if res.workers_per_trial > 1:
        # The trial only drives its worker group, which Ray Train places with the CPUs/GPUs itself
        # (a placement group of its own, outside Tune's); a CPU here would be one the workers
        # cannot have. Tune refuses an empty request: a little memory, what a driver uses.
        resources = {"memory": DRIVER_MEMORY}
    return tune.with_resources(tune.with_parameters(run_trial, context=context), resources)


def trial_concurrency(spec: SweepSpec, echo: Callable[[str], None]) -> int:
    """Trials at once: budget.max_concurrent, or fewer when that many worker groups do not fit in
    the cluster (Tune does not count a group's resources: more trials would only wait for them).
    Raises InputError when not even one group fits. Needs a connected Ray."""
    import ray

    res = spec.resources
    workers = res.workers_per_trial
    if workers == 1:
        return spec.budget.max_concurrent
    need = {"CPU": workers * res.cpus_per_trial}
    if res.gpus_per_trial:
        need["GPU"] = workers * res.gpus_per_trial
    have = ray.cluster_resources()
    fits = min(int(have.get(kind, 0) // amount) for kind, amount in need.items())
    group = f"{workers} workers x {res.cpus_per_trial:g} CPU" + (
        f" + {res.gpus_per_trial:g} GPU" if res.gpus_per_trial else ""
    )
    if fits == 0:
        raise InputError(
            f"resources: a trial's worker group ({group}) needs {need} but the cluster has "
            f"{ {k: have.get(k, 0) for k in need} }; lower resources.workers_per_trial or the per-worker "
            "CPUs/GPUs, or add nodes"
        )
    if fits < spec.budget.max_concurrent:
        echo(
            f"resources: {fits} worker group(s) of {group} fit in this cluster; {fits} trial(s) at a time "
            f"(budget.max_concurrent={spec.budget.max_concurrent})"
        )
    return min(fits, spec.budget.max_concurrent)


def _tune_config(spec: SweepSpec, sweep_id: str, concurrency: int) -> Any:
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import ConcurrencyLimiter

    from elastune.tuning.search import ScreeningSearch

    searcher = ScreeningSearch(spec, sweep_id, metric="samples_per_s", mode="max")
    scheduler: Any = FIFOScheduler()
    if spec.search.scheduler == "asha":
        # Rungs are in percent of a trial's own steps, so trials with different effective
        # batches are compared at the same share of their work.
        scheduler = ASHAScheduler(
            time_attr="progress_pct",
            metric="samples_per_s",
            mode="max",
            max_t=100,
            grace_period=max(1, int(spec.search.grace_fraction * 100)),
            reduction_factor=spec.search.reduction_factor,
        )
    return tune.TuneConfig(
        search_alg=ConcurrencyLimiter(searcher, max_concurrent=concurrency),
        scheduler=scheduler,
        num_samples=-1,  # the searcher ends the sweep: screened proposals count, Ray trials alone would not
        time_budget_s=spec.budget.time_limit_s,
        trial_dirname_creator=trial_dirname,
    )


def trial_dirname(trial: Any) -> str:
    """Short trial folders (Tune's default spells out every parameter)."""
    return f"trial_{trial.trial_id}"


def _run_reference(
    spec: SweepSpec, record: SweepRecord, trainable: Any, home: Path, echo: Callable[[str], None]
) -> TrialRecord:
    """Train the reference config once, as a one-trial Tune run of the same trainable, so it is
    measured on the same path (one process, or a worker group) as every trial."""
    cfg = spec.reference_config()
    echo(
        f"reference: {cfg.embedding.strategy} · {cfg.precision} · batch {cfg.batch.micro}×{cfg.batch.accum} · "
        f"{cfg.steps} steps"
    )
    last = _run_once(trainable, spec.constraints.reference, f"{record.sweep_id}-reference", home)
    trial = last.to_record("reference", -1, dict(spec.constraints.reference), cfg.to_dict())
    if trial.status in {"ok", "infeasible"} and trial.quality is not None:
        record.quality_metric = last.quality_metric or record.quality_metric
        record.quality_direction = last.quality_direction or record.quality_direction
        record.reference_quality = trial.quality
        record.reference_samples_per_s = trial.samples_per_s
        better = "lower" if record.quality_direction == "min" else "higher"
        echo(
            f"reference: {trial.samples_per_s or 0:,.0f} samples/s, eval {record.quality_metric} {trial.quality:.4f} "
            f"({better} is better)"
        )
        # a reference that learned nothing makes every quality check a comparison with noise
        unlearned = unlearned_warning(trial.metrics, last.loss) if last.loss is not None else None
        if unlearned is not None:
            echo(f"warning: the reference's {unlearned}")
    else:
        echo(f"reference did not finish ({trial.status}: {trial.error}); the quality check is off for this sweep")
    return trial


def check_ceiling(spec: SweepSpec) -> None:
    """Refuse a ceiling below the cheapest config the space can propose (nothing could run), and a
    reference predicted over it unless the spec allows one (its figures would come from a config no
    trial may use)."""
    ceiling = spec.constraints.memory_ceiling
    if ceiling is None:
        return
    from elastune.tuning.pricing import cheapest_estimate, predicted_peak

    smallest, params = cheapest_estimate(spec, enough=ceiling)  # stops at the first point that fits
    if smallest > ceiling:
        raise ConfigError(
            [
                Problem(
                    "constraints.memory_ceiling",
                    human_bytes(ceiling),
                    f"is below the smallest config this space can propose ({human_bytes(smallest)} predicted with the "
                    f"estimator's screening margin, for {params or 'the base config'}); raise the ceiling to at least "
                    f"{human_bytes(smallest)} or add cheaper choices",
                )
            ]
        )
    reference = predicted_peak(spec, dict(spec.constraints.reference))
    if reference > ceiling and spec.constraints.reference_over_ceiling == "refuse":
        raise ConfigError(
            [
                Problem(
                    "constraints.reference",
                    spec.constraints.reference,
                    f"is predicted at {human_bytes(reference)}, over the memory ceiling {human_bytes(ceiling)}: "
                    "pick a reference that fits (e.g. a smaller batch.micro), raise the ceiling, or set "
                    "constraints.reference_over_ceiling: allow to run it over the ceiling anyway",
                )
            ]
        )


def ray_job_id() -> str | None:
    """The submission id when this driver runs as a Ray job (`ray job submit`), else None. The job
    supervisor hands the driver its metadata, the submission id included, in this variable."""
    import json

    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return str(json.loads(raw).get("metadata", {}).get("job_submission_id")) or None
    except (ValueError, AttributeError):
        return None


def connect_ray(options: SweepOptions) -> None:
    import ray

    if ray.is_initialized():
        return
    address = options.address or os.environ.get("RAY_ADDRESS")
    if address:
        check_cluster(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level=_ray_log_level(options))
        except ConnectionError as exc:
            raise InputError(
                f"--address={address!r}: no Ray cluster answers there ({exc}); start one with "
                "`ray start --head` or leave --address out for a local Ray"
            ) from None
        except AuthenticationError as exc:
            raise InputError(str(auth_problem(address, exc))) from None
        return
    # The embedded default: a new local Ray on loopback only ("local": never attach to a cluster
    # someone else started on this machine with `ray start`).
    with loopback_only_ray():
        ray.init(
            address="local",
            num_cpus=options.local_cpus,
            num_gpus=options.local_gpus,
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=False,
            logging_level=_ray_log_level(options),
        )


def _ray_log_level(options: SweepOptions) -> int:
    return logging.INFO if options.verbose else logging.ERROR


def check_cluster(address: str) -> None:
    """Refuse, at once and with the fix, an address no driver could use (elastune/cluster.py):
    nothing listens there, Ray would dial it elsewhere, or the cluster wants another token."""
    problem = address_problem(address)
    if problem is not None:
        raise InputError(str(problem))


def _cluster_address(options: SweepOptions) -> str | None:
    """The connected cluster's GCS address, kept with the sweep so `--resume` returns to it; None
    for the local Ray a sweep starts itself (a resume starts a new one)."""
    import ray

    if not (options.address or os.environ.get("RAY_ADDRESS")):
        return None
    return str(ray.get_runtime_context().gcs_address)


def _keep_state(home: Path, sweep_id: str, spec: SweepSpec) -> None:
    """The sweep's local state folder (tuning/state.py), what a resume trusts: made with the spec
    for a new sweep; a resumed one whose folder lacks the spec (kept only in the store by an older
    elastune, or stopped before the search) gets the spec it runs now."""
    state = home / sweep_id
    if not state.is_dir():
        create_state(home, sweep_id, spec)
    elif not (state / SPEC_FILE).is_file():
        write_local_spec(state, spec)


def _resume_state(
    sweep_id: str, uri: str, home: Path, given: SweepSpec | None, options: SweepOptions
) -> tuple[SweepSpec, SweepRecord, list[str]]:
    """What a resume runs, and the notes to print: the spec kept in the sweep's local state folder
    (or the spec file given, for a sweep whose folder has none), the trials the store records.
    The store is shared and untrusted: it names no folder (the id given here does), no spec to run
    (a differing copy is reported, not used) and no cluster (the one recorded is a hint, never
    dialled). Raises InputError (exit 2, nothing started) where the state cannot be trusted."""
    from elastune.tracking.mlflow import load_sweep

    state = check_sweep_id(sweep_id, home)
    local = None
    if os.path.lexists(state):
        trusted_state(home, state)  # before anything in it is read: Tune's restore unpickles it
        local = read_local_spec(state)
    record = load_sweep(sweep_id, uri)
    if record.sweep_id != sweep_id:
        raise InputError(
            f"--resume {sweep_id}: the store's record of this sweep names another sweep id "
            f"({printable(record.sweep_id)!r}); it was altered, so it is not resumed: start a new sweep"
        )
    if given is not None and local is not None and given.model_dump(mode="json") != local.model_dump(mode="json"):
        raise InputError(
            f"--resume {sweep_id}: the spec given differs from the one this sweep started with ({state / SPEC_FILE}); "
            "resume without a spec file (the sweep's own copy is used) or start a new sweep"
        )
    spec = local or given
    if spec is None:
        raise InputError(
            f"--resume {sweep_id}: no copy of the sweep's spec at {state / SPEC_FILE} (the store's copy is not "
            "trusted: anyone who can write the store could have changed it); pass the spec file the sweep started "
            f"with: elastune sweep SPEC.yaml --resume {sweep_id}, on the machine that ran the driver"
        )
    notes = []
    if record.spec != spec.model_dump(mode="json"):
        notes.append(
            f"resume: the store's copy of the spec differs from {'the local one' if local else 'the spec given'}; "
            "running the local one (the store is shared and not trusted)"
        )
    if record.status == "finished":
        raise InputError(f"--resume {sweep_id}: the sweep finished; `elastune results {sweep_id}` shows it")
    # A driver that still beats would run every trial a second time beside this one.
    if record.status == "running" and record.heartbeat_at is not None:
        from elastune.tracking.mlflow import STALE_AFTER_BEATS

        age = time.time() - (record.heartbeat_at or time.time())
        job = f", Ray job {printable(record.job_id)}" if record.job_id else ""
        raise InputError(
            f"--resume {sweep_id}: the sweep is still running (its driver beat {age:.0f} s ago{job}); stop it first "
            "(Ctrl-C, or `ray job stop`), or, if its driver is gone, retry once it shows as stale (after "
            f"{STALE_AFTER_BEATS} missed beats)"
        )
    searched = any(t.trial_id != "reference" for t in record.trials)  # stopped in the reference: none yet
    if searched and not state.is_dir():
        raise InputError(
            f"--resume {sweep_id}: no sweep state at {state}; resume on the machine that ran the "
            "driver, or set ELASTUNE_HOME to the folder that holds it"
        )
    if state.is_dir():
        _check_searcher_state(sweep_id, state)
    if record.ray_address and not (options.address or os.environ.get("RAY_ADDRESS")):
        notes.append(
            f"resume: the store records that the sweep ran on the Ray cluster at {printable(record.ray_address)}; "
            "a resume never dials an address read from the store: pass --address to resume there. "
            "Resuming on a new local Ray"
        )
    record.spec = spec.model_dump(mode="json")
    record.memory_ceiling_bytes = spec.constraints.memory_ceiling
    record.quality_tolerance = spec.constraints.quality_tolerance
    record.status = "running"
    record.job_id = ray_job_id() or record.job_id
    return spec, record, notes


def _check_searcher_state(sweep_id: str, state: Path) -> None:
    """The searcher state Tune will restore is one this elastune wrote (JSON): a state from an
    earlier release, or a file planted there, is refused before Ray starts, not mid-restore."""
    from elastune.tuning.search import load_search_state

    saved = sorted(state.glob("searcher-state-*.pkl"), key=lambda p: p.stat().st_mtime)
    if saved:
        try:
            load_search_state(saved[-1])
        except ValueError as exc:
            raise InputError(f"--resume {sweep_id}: {exc}") from None
