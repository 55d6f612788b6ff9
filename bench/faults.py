"""Fault matrix: quick sweeps, each with one fault injected at a random moment, checked against the
MLflow store afterwards (issue: sweeps survive what clusters do).

Every episode is a tiny sweep (4 grid proposals of a tiny DLRM, 6 steps each, 2 at a time; about
half of the episodes with a confirmation stage of the best config, one round) in a fresh folder:
its own ELASTUNE_HOME, HOME, Ray temp dir and MLflow store, and a Ray the sweep starts itself on
127.0.0.1 (the job-server fault: a `ray start --head` cluster on 127.0.0.1 and `ray job submit`).
The fault comes at a moment drawn uniformly from the first `WINDOW_S` seconds after the sweep's
first line (its parent run exists by then); where the sweep ended first, the episode is still
checked and says the fault missed. The seed, the moment and what the fault hit are kept per episode.

The faults, and how each is made:

- driver-kill: SIGKILL to the driver (real); then `elastune sweep --resume` once the sweep reads
  back stale (ELASTUNE_HEARTBEAT_S=1, so within seconds).
- driver-term: SIGTERM to the driver (real): exit 143, the sweep reads back interrupted, the last
  line resumes it; then that resume.
- worker-kill: SIGKILL to a trial's Ray worker (real): the driver's descendant whose title Ray set
  to `ray::ImplicitFunc...` (Tune's function trainable; the reference and confirmation runs too).
- oom: Ray's memory monitor, for real: the driver's Ray gets RAY_memory_usage_threshold above what
  the machine uses when the episode starts (+6 GiB: what a sweep adds, and room for the machine's
  other users; at most 0.6), and once a trial runs, a hog process outside Ray takes memory (at most
  8 GiB) until the node is over it; the monitor kills a worker (OutOfMemoryError), the hog lets go.
  Ray kills at that threshold whenever the machine crosses it, hog or not, so failed trials are
  expected anywhere in an oom episode. Run alone (`--jobs` never overlaps it): memory is shared.
- store-outage: the `mlflow server` (127.0.0.1, SQLite) stopped, SIGKILL or SIGTERM drawn per
  episode, for 10-120 s, then started again on the same port and database (sooner if the driver
  ended meanwhile: nothing it does depends on the rest). A driver that ended with the store down
  names `elastune sync`, which is then run.
- job-server: the head's job server (Ray's dashboard process and its module subprocesses, where
  the job HTTP API lives) SIGKILLed while the sweep runs as a Ray job, down for 0-10 s, then started
  again with its own command line and environment; the job must end SUCCEEDED.
- disk-full: the sweep's state folder ($ELASTUNE_HOME/sweeps) is a 16 MiB tmpfs (needs root to
  mount; the episode is skipped elsewhere); at the moment a filler file takes all of it for 5-30 s.
  A driver may stop on it (exit 1, saying so: a traceback counts); it is resumed once the space is
  back. The tmpfs's files are copied to the episode's folder before it is unmounted.

After each episode (and any resume or sync it needed), the checks, each a count with target 0:

- records lost: a trial the consoles announced (or Tune ran) that the store lacks, or holds with
  another status or samples/s than the last announcement; a proposal or the reference missing; an
  ok trial without its figures; the sweep's final record incomplete (status, trials_total,
  trials.csv); a confirmation said but not stored; journal lines left unwritten.
- trials run twice: two child runs for one trial (a proposal number, whatever its Tune trial id);
  samples/s logged twice on one run; a final status announced again by a resume after the store
  held it; a trial (or the reference) trained again, per Tune's result files, after that.
- wrong final statuses: the sweep not finished; a trial not in a final status, or whose MLflow
  run status disagrees with it; a trial failed where nothing killed one; an exit code other than
  the fault's; a sweep that does not read back interrupted after SIGTERM, or stale after SIGKILL.
- tracebacks shown without -v: consoles (no `-v` here) that show "Traceback (most recent call last)".

Besides: how each trial a fault killed was recorded (notes), and any episode process listening
beyond 127.0.0.1 (a problem). tests/unit/test_faults_bench.py shows each count moving when its
kind of damage is made (a deleted child run is one record lost, a second run one trial run twice).

    python bench/faults.py                        # 60 episodes, every fault, seed 0 (45-90 min on 2 cores)
    python bench/faults.py --episodes 7 --seed 1  # each fault once
    python bench/faults.py --faults oom,driver-kill --episodes 4
    python bench/faults.py --seed 1 --only 3      # episode 3 of that seed's plan alone (a reproduction;
                                                  # the plan's first episodes are the same for any --episodes)

Episode folders (/tmp/efN-*) are removed unless the episode found a problem (`--keep`: always
kept). Every process an episode starts carries its folder in ELASTUNE_FAULTS_EPISODE and is killed
with the episode. The record goes to bench/records/ (or $ELASTUNE_BENCH_RECORDS).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

PYTHON = sys.executable
ELASTUNE = [PYTHON, "-m", "elastune.cli"]
RAY = str(Path(PYTHON).parent / "ray")
# The process a Ray head's job server lives in (with its module subprocesses), found without importing ray.
DASHBOARD = str(Path(getattr(importlib.util.find_spec("ray"), "origin", "")).parent / "dashboard" / "dashboard.py")
MARK = "ELASTUNE_FAULTS_EPISODE"  # in the environment of every process an episode starts, and theirs
TRACEBACK = "Traceback (most recent call last)"
WINDOW_S = 25.0  # a tiny sweep's run after its first line on this 2-core machine: 20 s idle, 40 s busy
DRIVER_TIMEOUT_S = 400.0
STALE_TIMEOUT_S = 30.0  # 4 missed beats of 1 s, and a busy machine
FAULTS = ("driver-kill", "driver-term", "worker-kill", "oom", "store-outage", "job-server", "disk-full")
FINAL = frozenset({"ok", "infeasible", "oom", "pruned", "failed"})  # records.FINAL_TRIAL_STATUSES
RUN_STATUS = {"ok": "FINISHED", "infeasible": "FINISHED", "pruned": "KILLED", "oom": "FAILED", "failed": "FAILED"}
FROM_OUTSIDE = ("worker process died", "memory monitor", "could not be reached")  # progress.KILLED_FROM_OUTSIDE
SWEEP_LINE = re.compile(r"^sweep (\S+): \d+ proposals", re.M)
# how the console says a trial ended (progress.trial_line), and the reference (sweep._run_reference)
TRIAL_LINE = re.compile(
    r"^trial (?P<label>\S+) (?:(?P<status>ok|oom|pruned|failed|interrupted|infeasible)|not run):(?P<rest>.*)$", re.M
)
REFERENCE_LINE = re.compile(r"^reference(?::(?P<rest> [\d,]+ samples/s)| did not finish \((?P<status>\w+):)", re.M)
MAX_TRIALS = 4
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def tiny_spec(confirm: bool) -> dict[str, Any]:
    """tests/integration/sweep_specs.py's tiny spec: full vs hashed x micro 64/128, 6 steps each."""
    return {
        "name": "faults",
        "base": {
            "device": "cpu",
            "data": {"rows_scale": 0.005},
            "model": {"embedding_dim": 8},
            "workload_options": {"bottom_mlp": [16], "top_mlp": [16]},
            "eval": {"samples": 512},
            "warmup_steps": 1,
        },
        "parameters": {
            "embedding.strategy": {"type": "choice", "values": ["full", "hashed"]},
            "batch.micro": {"type": "choice", "values": [64, 128]},
        },
        "constraints": {"effective_batch": 128, "quality_tolerance": 0.5, "reference": {"batch.micro": 128}},
        "budget": {"max_trials": MAX_TRIALS, "max_concurrent": 2, "trial_samples": 768},
        "confirm": {"top": 1, "rounds": 1} if confirm else {"top": 0},
        "search": {"algorithm": "grid", "scheduler": "none", "seed": 0},
        "resources": {"cpus_per_trial": 1},
        "edo": {"mode": "off"},
    }


# -- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    index: int
    fault: str
    seed: int  # its draws (moment, confirm, hold, how) come from Random(seed)
    moment_s: float  # after the sweep's first line
    confirm: bool
    hold_s: float = 0.0  # store-outage: planned downtime; disk-full: time full; job-server: downtime
    how: str = ""  # store-outage: the signal that stops the server


def plan(episodes: int, faults: list[str], seed: int, window_s: float = WINDOW_S) -> list[Plan]:
    """Faults in shuffled rounds (each as often as the others), each episode with its own draws."""
    order: list[str] = []
    shuffle = random.Random(seed)
    while len(order) < episodes:
        round_ = list(faults)
        shuffle.shuffle(round_)
        order += round_
    plans = []
    for index, fault in enumerate(order[:episodes]):
        own = seed * 1000 + index
        rng = random.Random(own)
        moment, confirm = round(rng.uniform(0, window_s), 1), rng.random() < 0.5
        hold, how = 0.0, ""
        if fault == "store-outage":
            hold, how = round(rng.uniform(10, 120), 1), rng.choice(["SIGKILL", "SIGTERM"])
        elif fault == "disk-full":
            hold = round(rng.uniform(5, 30), 1)
        elif fault == "job-server":
            hold = round(rng.uniform(0, 10), 1)
        plans.append(Plan(index, fault, own, moment, confirm, hold, how))
    return plans


# -- processes ---------------------------------------------------------------------------------


class Hung(Exception):
    """Something the episode waited for never came: a wrong status of its own (a hung sweep)."""


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise Hung(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def marked(mark: str) -> list[psutil.Process]:
    """Every live process whose environment carries `mark` (it, or what started it, was ours)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.pid != os.getpid() and proc.environ().get(MARK) == mark:
                found.append(proc)
    return found


@dataclass
class Command:
    """An elastune command of the episode: its console (stdout and stderr, kept apart)."""

    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def text(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def said(self) -> str:
        return self.err.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None


class Episode:
    """One episode's folder, environment, store and processes; `close()` ends every process it
    started (by process group, then by the mark in their environment: a `ray start`'s daemons,
    Ray agents that outlive a killed driver) and unmounts what it mounted."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        # short: Ray's socket paths under it must stay within 108 bytes
        self.folder = Path(tempfile.mkdtemp(prefix=f"ef{plan.index}-", dir="/tmp"))
        self.home = self.folder / "home"
        self.uri = f"sqlite:///{self.folder / 'mlflow.db'}"
        self.spec = self.folder / "spec.yaml"
        self.spec.write_text(yaml.safe_dump(tiny_spec(plan.confirm), sort_keys=False))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "ELASTUNE_", "MLFLOW_"))}
        (self.folder / "user").mkdir()
        self.env = env | {
            MARK: str(self.folder),
            "HOME": str(self.folder / "user"),  # no ~/.ray/auth_token: Ray without token auth
            "ELASTUNE_HOME": str(self.home),
            "ELASTUNE_HEARTBEAT_S": "1",
            "RAY_TMPDIR": str(self.folder),
            "TMPDIR": str(self.folder),
            "PYTHONUNBUFFERED": "1",
        }
        self.started: list[subprocess.Popen[bytes]] = []
        self.commands: list[Command] = []
        self.consoles: list[str] = []  # besides the commands': a Ray job's driver log
        self.exits: list[tuple[str, int | None, frozenset[int]]] = []
        self.interim: list[str] = []  # wrong statuses seen on the way (read back after a signal, ...)
        self.finals_at: list[tuple[float, frozenset[str], int]] = []  # at each resume: what was final
        self.mounted: Path | None = None
        self.sweep_id: str | None = None
        self.exposed: set[str] = set()  # what an episode's process listened on beyond loopback

    def popen(self, args: list[str], name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.out").open("ab") as out, (self.folder / f"{name}.err").open("ab") as err:
            proc = subprocess.Popen(
                args, cwd=self.folder, env=env or self.env, stdout=out, stderr=err, start_new_session=True
            )
        self.started.append(proc)
        return proc

    def elastune(self, args: list[str], name: str, extra_env: dict[str, str] | None = None) -> Command:
        proc = self.popen([*ELASTUNE, *args], name, {**self.env, **(extra_env or {})})
        command = Command(name, proc, self.folder / f"{name}.out", self.folder / f"{name}.err")
        self.commands.append(command)
        return command

    def finish(self, command: Command, expect: set[int]) -> int | None:
        """Wait for a command to end; its exit code is checked against `expect`."""
        try:
            command.proc.wait(timeout=DRIVER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.exits.append((command.name, None, frozenset(expect)))
            raise Hung(f"{command.name} still running after {DRIVER_TIMEOUT_S:.0f} s") from None
        self.exits.append((command.name, command.proc.returncode, frozenset(expect)))
        return command.proc.returncode

    def moment(self, console: str, start: float | None) -> tuple[str, float]:
        """At the fault: the sweep's stage, seconds since its first line; and what listens (loopback only)."""
        self.check_loopback()
        return stage_of(console), time.monotonic() - (start or time.monotonic())

    def check_loopback(self) -> None:
        for proc in marked(str(self.folder)):
            with contextlib.suppress(psutil.Error):
                for conn in proc.net_connections("inet"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr.ip not in LOOPBACK:
                        self.exposed.add(f"{_cmdline(proc)[:1]} on {conn.laddr.ip}:{conn.laddr.port}")

    def close(self) -> None:
        self.check_loopback()
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        family = marked(str(self.folder))
        for proc in family:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(family, timeout=30)
        for proc in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if self.mounted is not None:  # its files (Tune's state, the journal) kept for a look afterwards
            shutil.copytree(self.mounted, self.folder / "sweeps-from-tmpfs", symlinks=True, dirs_exist_ok=True)
            subprocess.run(["umount", "-l", str(self.mounted)], capture_output=True)


class MlflowServer:
    """An `mlflow server` on 127.0.0.1 (SQLite, proxied artifacts), stopped and started again on the
    same port and database."""

    def __init__(self, episode: Episode) -> None:
        self.episode, self.port = episode, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root = episode.folder
        self.command = [PYTHON, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)]
        self.command += ["--backend-store-uri", f"sqlite:///{root / 'server.db'}", "--artifacts-destination"]
        self.command += [str(root / "artifacts"), "--workers", "1"]
        self.env = episode.env | {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = self.episode.popen(self.command, "mlflow-server", self.env)
        wait_until(lambda: self._up(), 120, f"mlflow server at {self.url}")

    def stop(self, signum: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise Hung(f"mlflow server exited {self.proc.returncode} at start")
        return http_status(f"{self.url}/health") == 200


class RayHead:
    """A `ray start --head` cluster on 127.0.0.1 (its daemons carry the episode's mark) whose job
    server can be killed and started again with its own command line."""

    def __init__(self, episode: Episode) -> None:
        self.episode = episode
        names = ["port", "dashboard-port", "ray-client-server-port", "dashboard-agent-listen-port"]
        names += ["runtime-env-agent-port", "metrics-export-port", "dashboard-agent-grpc-port"]
        self.ports = {name: free_port() for name in names}
        self.jobs = f"http://127.0.0.1:{self.ports['dashboard-port']}"
        self.env = episode.env | {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "DASHBOARD_METRIC_PORT": str(free_port()),
            "AUTOSCALER_METRIC_PORT": str(free_port()),
        }

    def start(self) -> None:
        command = [RAY, "start", "--head", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1"]
        command += [f"--{name}={port}" for name, port in self.ports.items()]
        command += ["--num-cpus=2", "--disable-usage-stats"]
        proc = self.episode.popen(command, "ray-start", self.env)
        if proc.wait(timeout=180) != 0:
            raise Hung(f"ray start exited {proc.returncode}")
        wait_until(lambda: http_status(f"{self.jobs}/api/version") == 200, 120, "the head's job server")

    def submit(self, spec: Path, uri: str, submission_id: str) -> None:
        command = [RAY, "job", "submit", "--address", self.jobs, "--no-wait", "--submission-id", submission_id]
        command += ["--", PYTHON, "-m", "elastune.jobs.sweep", str(spec), "--tracking-uri", uri]
        proc = self.episode.popen(command, "ray-job-submit", self.env)
        if proc.wait(timeout=120) != 0:
            raise Hung(f"ray job submit exited {proc.returncode}")

    def job_status(self, submission_id: str) -> str | None:
        try:
            with urllib.request.urlopen(f"{self.jobs}/api/jobs/{submission_id}", timeout=5) as response:
                return str(json.loads(response.read())["status"])
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return None

    def restart_job_server(self, down_s: float) -> str:
        """SIGKILL the dashboard process and its module subprocesses (JobHead among them), then start
        it again as it was started; returns what was done."""
        (dashboard,) = [proc for proc in marked(str(self.episode.folder)) if _cmdline(proc)[1:2] == [DASHBOARD]]
        command, env, cwd = dashboard.cmdline(), dashboard.environ(), dashboard.cwd()
        family = [dashboard, *dashboard.children(recursive=True)]
        for proc in family:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(family, timeout=30)
        time.sleep(down_s)
        began = time.monotonic()
        with (self.episode.folder / "dashboard-again.log").open("ab") as log:
            proc = subprocess.Popen(
                command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.episode.started.append(proc)
        wait_until(lambda: http_status(f"{self.jobs}/api/version") == 200, 120, "the restarted job server")
        back = time.monotonic() - began
        return f"job server (pid {dashboard.pid}, {len(family) - 1} module processes) killed, back in {back:.0f} s"


def _cmdline(proc: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return proc.cmdline()
    return []


def trial_workers(root: psutil.Process | None) -> list[psutil.Process]:
    """The Ray workers running a Tune trial under `root` (titles `ray::ImplicitFunc...`)."""
    if root is None:
        return []
    with contextlib.suppress(psutil.Error):
        return [p for p in root.children(recursive=True) if (_cmdline(p) or [""])[0].startswith("ray::ImplicitFunc")]
    return []


def _process(pid: int) -> psutil.Process | None:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid)
    return None


# -- the store ---------------------------------------------------------------------------------


def store_status(episode: Episode, uri: str) -> tuple[str | None, frozenset[str], list[str]]:
    """The sweep's status as the store reads back (stale included), the trials (by label: "ref" or
    the proposal's number) it holds with a final status, and those still running."""
    from elastune.tracking.mlflow import list_sweeps, load_sweep

    if episode.sweep_id is None:
        sweeps = list_sweeps(uri)
        if not sweeps:
            return None, frozenset(), []
        episode.sweep_id = sweeps[0].sweep_id
    record = load_sweep(episode.sweep_id, uri)
    final = frozenset(label(t.trial_id, t.number) for t in record.trials if t.status in FINAL)
    return record.status, final, [label(t.trial_id, t.number) for t in record.trials if t.status == "running"]


def label(trial_id: str, number: int | None) -> str:
    """How the console names a trial (progress.trial_line): `ref`, or its proposal's number."""
    return "ref" if trial_id == "reference" else str(number)


def drive_to_end(episode: Episode, command: Command, code: int | None, uri: str) -> None:
    """After the driver ended (`code`), do what its last lines and the store say until the sweep is
    finished: `elastune sync` where the store was down at its end, `--resume` once interrupted or stale."""
    for attempt in range(3):
        if code == 2 and attempt:  # a resume refused: it would be refused again
            return
        if code == 1 and "elastune sync" in command.said():
            assert episode.sweep_id is not None
            command = episode.elastune(["sync", episode.sweep_id, "--tracking-uri", uri], f"sync-{attempt + 1}")
            code = episode.finish(command, {0})
            continue
        status, final, _ = store_status(episode, uri)
        if status is None or status == "finished":
            return
        if status == "running":
            try:
                wait_until(lambda: store_status(episode, uri)[0] != "running", STALE_TIMEOUT_S, "stale", 1.0)
            except Hung:
                episode.interim.append(f"still 'running' {STALE_TIMEOUT_S:.0f} s after its driver ended")
                return
            status, final, _ = store_status(episode, uri)
        if status not in {"interrupted", "stale"}:
            episode.interim.append(f"the sweep reads back {status!r} after its driver ended: not resumable")
            return
        assert episode.sweep_id is not None
        episode.finals_at.append((time.time(), final, len(episode.commands)))  # the resume's console
        resume = ["sweep", "--resume", episode.sweep_id, "--tracking-uri", uri]
        command = episode.elastune(resume, f"resume-{attempt + 1}")
        code = episode.finish(command, {0})
    if code == 0 and store_status(episode, uri)[0] != "finished":  # the checks say what else went wrong
        episode.interim.append("not finished after 3 resumes or syncs")


def run_to_end(episode: Episode, command: Command, expect: set[int]) -> None:
    drive_to_end(episode, command, episode.finish(command, expect), episode.uri)


def await_sweep(episode: Episode, read: Callable[[], str], alive: Callable[[], bool]) -> float | None:
    """When the sweep's first line came (monotonic s), or None if the driver ended before it."""
    found: list[str] = []

    def said() -> bool:
        found[:] = SWEEP_LINE.findall(read())
        return bool(found) or not alive()

    wait_until(said, 300, "the sweep's first line", 0.2)
    if not found:
        return None
    episode.sweep_id = found[0]
    return time.monotonic()


def stage_of(console: str) -> str:
    """How far the sweep got, from its console: start, reference, search, confirmation, end."""
    stage = "start"
    for line in console.splitlines():
        if re.match(r"reference: .* samples/s", line) or line.lstrip().startswith(("trial ", "search ")):
            stage = "search"
        elif line.startswith("reference:"):
            stage = "reference"
        elif line.startswith(("confirmation", "  round", "confirmed best")):
            stage = "confirmation"
        elif re.match(r"sweep \S+ finished", line):
            stage = "end"
    return stage


# -- the faults --------------------------------------------------------------------------------


@dataclass
class Injection:
    landed: bool  # the fault hit a sweep still running
    stage: str
    at_s: float | None = None  # after the sweep's first line
    detail: str = ""


def first_driver(episode: Episode, extra_env: dict[str, str] | None = None) -> tuple[Command, float | None]:
    driver = episode.elastune(["sweep", str(episode.spec), "--tracking-uri", episode.uri], "driver", extra_env)
    return driver, await_sweep(episode, driver.said, driver.alive)


def wait_moment(start: float | None, moment_s: float, alive: Callable[[], bool]) -> bool:
    """Sleep until the episode's moment; False if the sweep ended first."""
    if start is None:
        return False
    while time.monotonic() < start + moment_s:
        if not alive():
            return False
        time.sleep(0.1)
    return alive()


def missed(episode: Episode, driver: Command) -> Injection:
    """The sweep ended before the moment: it is still checked, as a sweep without a fault (an oom
    episode's Ray may have killed trials at its threshold all the same)."""
    if episode.plan.fault in {"worker-kill", "oom"}:
        run_killed_to_end(episode, driver)
    else:
        run_to_end(episode, driver, {0})
    return Injection(False, "end", detail="the sweep ended before the moment")


def fault_driver_signal(episode: Episode, signum: int) -> Injection:
    driver, start = first_driver(episode)
    if not wait_moment(start, episode.plan.moment_s, driver.alive):
        return missed(episode, driver)
    stage, at = episode.moment(driver.said(), start)
    driver.proc.send_signal(signum)
    if signum == signal.SIGKILL:
        code = episode.finish(driver, {-signal.SIGKILL})
        status, _, _ = store_status(episode, episode.uri)
        if status not in {"running", "stale"}:
            episode.interim.append(f"after SIGKILL the sweep reads back {status!r}, not running or stale")
    else:
        # 0 (or -15, Python's default handler back): the signal came as the sweep ended on its own
        code = episode.finish(driver, {128 + signum, 0, -signum})
        if code == 128 + signum:
            check_interrupted(episode, driver)
    drive_to_end(episode, driver, code, episode.uri)
    return Injection(True, stage, at, f"{signal.Signals(signum).name} to the driver (exit {code})")


def check_interrupted(episode: Episode, driver: Command) -> None:
    """What a SIGTERM must leave: the sweep interrupted, no trial running, the resume line last."""
    status, _, running = store_status(episode, episode.uri)
    if status != "interrupted":
        episode.interim.append(f"after SIGTERM (exit 143) the sweep reads back {status!r}, not interrupted")
    if running:
        episode.interim.append(f"after SIGTERM trials still read back running: {running}")
    lines = [line for line in driver.said().splitlines() if line.strip()]
    if not lines or not lines[-1].strip().startswith(f"elastune sweep --resume {episode.sweep_id}"):
        episode.interim.append(f"after SIGTERM the last line is not the resume command: {lines[-1:]}")


def a_trial_running(driver: Command, timeout_s: float = 60) -> list[psutil.Process]:
    """The driver's trial workers once one runs (none if the driver ends or none runs in time)."""
    root = _process(driver.proc.pid)
    found: list[psutil.Process] = []

    def seen() -> bool:
        found[:] = trial_workers(root)
        return bool(found) or not driver.alive()

    with contextlib.suppress(Hung):
        wait_until(seen, timeout_s, "a trial", 0.1)
    return found if driver.alive() else []


def fault_worker_kill(episode: Episode) -> Injection:
    driver, start = first_driver(episode)
    if not wait_moment(start, episode.plan.moment_s, driver.alive):
        return missed(episode, driver)
    workers = a_trial_running(driver)
    stage, at = episode.moment(driver.said(), start)
    detail = "no trial ran after the moment"
    if workers:
        detail = f"SIGKILL to pid {workers[0].pid} ({(_cmdline(workers[0]) or ['?'])[0]})"
        with contextlib.suppress(psutil.Error):
            workers[0].send_signal(signal.SIGKILL)
    run_killed_to_end(episode, driver)
    return Injection(bool(workers), stage, at, detail)


def run_killed_to_end(episode: Episode, driver: Command) -> None:
    """As run_to_end, where the fault kills trials: a sweep none of whose proposals completed rightly
    exits 1 saying so (tuning/outcome.py), and so does one the engine could not go on with (Tune
    re-raising Ray's OutOfMemoryError from its fit(): the sweep ends interrupted, its last line the
    resume command, which is then run)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        driver.proc.wait(timeout=DRIVER_TIMEOUT_S)
    said = driver.said()
    engine = "interrupted by an engine failure" in said
    if engine:
        lines = [line for line in said.splitlines() if line.strip()]
        if not lines[-1].strip().startswith(f"elastune sweep --resume {episode.sweep_id}"):
            episode.interim.append(f"after an engine failure the last line is not the resume command: {lines[-1:]}")
    run_to_end(episode, driver, {0, 1} if "no trial completed" in said or engine else {0})


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def fault_oom(episode: Episode) -> Injection:
    memory = psutil.virtual_memory()
    # what the machine uses now, plus what a sweep adds (driver, Ray, two trials: under 2 GiB), plus a
    # margin for the machine's other users (a CI run moves by GiBs); never above 0.6, so the hog never
    # takes the machine from them
    threshold = min(0.6, (memory.total - memory.available + 6 * 2**30) / memory.total)
    extra = {"RAY_memory_usage_threshold": f"{threshold:.3f}", "RAY_memory_monitor_refresh_ms": "100"}
    driver, start = first_driver(episode, extra)
    if not wait_moment(start, episode.plan.moment_s, driver.alive):
        return missed(episode, driver)
    workers = a_trial_running(driver)
    stage, at = episode.moment(driver.said(), start)
    if not workers:
        run_killed_to_end(episode, driver)
        return Injection(False, stage, at, "no trial ran after the moment")
    target = int(threshold * memory.total) + 512 * 2**20
    hog = episode.popen([PYTHON, "-c", HOG, str(target), str(HOG_MAX)], "hog")
    killed: list[int] = []

    def a_worker_died() -> bool:
        killed[:] = [w.pid for w in workers if gone(w)]
        return bool(killed) or not driver.alive()

    with contextlib.suppress(Hung):
        wait_until(a_worker_died, 30, "the memory monitor", 0.1)
    now = psutil.virtual_memory()
    hog.kill()
    hog.wait(timeout=30)
    detail = f"threshold {threshold:.3f} of {memory.total / 2**30:.0f} GiB, a hog to {target / 2**30:.1f} GiB used: "
    used = (now.total - now.available) / 2**30
    detail += f"worker(s) {killed} gone" if killed else f"no worker died ({used:.1f} GiB used)"
    run_killed_to_end(episode, driver)
    return Injection(bool(killed), stage, at, detail)


# A process outside Ray that takes memory (pages touched) until the machine uses `target` bytes, and
# never more than HOG_MAX itself (others' use may grow meanwhile).
HOG = """
import sys, time, psutil
target, most, held = int(sys.argv[1]), int(sys.argv[2]), []
while True:
    memory = psutil.virtual_memory()
    if memory.total - memory.available < target and len(held) * (64 << 20) < most:
        held.append(b"\\x01" * (64 << 20))
    else:
        time.sleep(0.05)
"""
HOG_MAX = 8 * 2**30


def fault_store_outage(episode: Episode) -> Injection:
    server = MlflowServer(episode)
    server.start()
    episode.uri = server.url
    driver, start = first_driver(episode)
    if not wait_moment(start, episode.plan.moment_s, driver.alive):
        return missed(episode, driver)
    stage, at = episode.moment(driver.said(), start)
    server.stop(getattr(signal, episode.plan.how))
    down = time.monotonic()
    while time.monotonic() < down + episode.plan.hold_s and driver.alive():
        time.sleep(0.2)
    ended, downtime = not driver.alive(), time.monotonic() - down
    server.start()
    run_to_end(episode, driver, {0, 1})
    detail = f"server {episode.plan.how}, down {downtime:.0f} s of {episode.plan.hold_s:.0f}"
    return Injection(True, stage, at, detail + (" (the driver ended meanwhile)" if ended else ""))


def fault_job_server(episode: Episode) -> Injection:
    head = RayHead(episode)
    head.start()
    submission = f"faults-{episode.plan.index}"
    head.submit(episode.spec, episode.uri, submission)
    sessions = sorted(p for p in (episode.folder / "ray").glob("session_2*") if p.is_dir())
    log = sessions[-1] / "logs" / f"job-driver-{submission}.log"
    episode.consoles.append(str(log))

    def running() -> bool:
        return head.job_status(submission) in {None, "PENDING", "RUNNING"}

    start = await_sweep(episode, lambda: _read(log), running)
    landed = wait_moment(start, episode.plan.moment_s, running)
    stage, at = episode.moment(_read(log), start)
    detail = head.restart_job_server(episode.plan.hold_s) if landed else "the job ended before the moment"
    wait_until(lambda: not running(), DRIVER_TIMEOUT_S, "the job")
    status = head.job_status(submission)
    if status != "SUCCEEDED":
        episode.interim.append(f"the Ray job ended {status}")
    return Injection(landed, stage if landed else "end", at if landed else None, detail)


def fault_disk_full(episode: Episode) -> Injection:
    state = episode.home / "sweeps"
    state.mkdir(parents=True, mode=0o700)
    options = f"size=16m,mode=0700,uid={os.getuid()},gid={os.getgid()}"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(state)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        raise Skipped(f"cannot mount a tmpfs on the state folder (needs root): {mounted.stderr.strip()[:200]}")
    episode.mounted = state
    driver, start = first_driver(episode)
    if not wait_moment(start, episode.plan.moment_s, driver.alive):
        return missed(episode, driver)
    stage, at = episode.moment(driver.said(), start)
    filler = state / "filler"
    # unbuffered: the write that finds no space raises here, not in close()
    with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 2**20)
    full = time.monotonic()
    while time.monotonic() < full + episode.plan.hold_s and driver.alive():
        time.sleep(0.2)
    filler.unlink()
    detail = f"state folder full for {time.monotonic() - full:.0f} s"
    run_to_end(episode, driver, {0, 1})  # 1: a driver may stop on a full disk, if it says so (no traceback)
    return Injection(True, stage, at, detail)


class Skipped(Exception):
    """The fault cannot be made on this machine."""


INJECT: dict[str, Callable[[Episode], Injection]] = {
    "driver-kill": lambda ep: fault_driver_signal(ep, signal.SIGKILL),
    "driver-term": lambda ep: fault_driver_signal(ep, signal.SIGTERM),
    "worker-kill": fault_worker_kill,
    "oom": fault_oom,
    "store-outage": fault_store_outage,
    "job-server": fault_job_server,
    "disk-full": fault_disk_full,
}


# -- what the store and Tune hold afterwards ---------------------------------------------------


@dataclass
class StoredTrial:
    trial_id: str
    run_id: str
    number: int | None
    status: str | None  # elastune.status
    run_status: str  # MLflow's
    samples_per_s: float | None
    samples_logged: int  # values of samples_per_s in the run's history
    error: str | None
    confirmed: bool


@dataclass
class Evidence:
    """Everything the checks read, gathered after the episode (`gather`): plain data, so the checks
    are pure and their failures can be shown on made-up evidence (tests/unit/test_faults_bench.py)."""

    fault: str
    confirm: bool
    sweep_status: str | None = None  # None: no sweep in the store at all
    parent_run_status: str | None = None
    trials_total: float | None = None
    artifacts: list[str] = field(default_factory=list)
    children: list[StoredTrial] = field(default_factory=list)  # every trial run tagged with the sweep
    reference_samples_per_s: float | None = None
    consoles: list[str] = field(default_factory=list)  # in the order they ran
    executions: dict[str, list[float]] = field(default_factory=dict)  # label -> start of each process that trained it
    # at each resume: when, the labels the store held with a final status, the resume's console (index)
    finals_at: list[tuple[float, frozenset[str], int]] = field(default_factory=list)
    journal_lines: int = 0
    exits: list[tuple[str, int | None, frozenset[int]]] = field(default_factory=list)
    interim: list[str] = field(default_factory=list)
    killed: bool = False  # the fault may have killed a trial's process (failed trials are expected)


def gather(episode: Episode, injection: Injection) -> Evidence:
    evidence = Evidence(
        episode.plan.fault,
        episode.plan.confirm,
        consoles=[c.text() for c in episode.commands] + [_read(Path(p)) for p in episode.consoles],
        finals_at=list(episode.finals_at),
        exits=list(episode.exits),
        interim=list(episode.interim),
        # an oom episode's Ray kills at its threshold whenever the machine crosses it, hog or not
        killed=episode.plan.fault == "oom" or (injection.landed and episode.plan.fault == "worker-kill"),
    )
    status, _, _ = store_status(episode, episode.uri)
    if status is None or episode.sweep_id is None:
        return evidence
    read_store(evidence, episode.sweep_id, episode.uri)
    sweeps = episode.home / "sweeps"
    labels = {c.trial_id: _label(c) for c in evidence.children}
    evidence.executions = tune_executions(sweeps, episode.sweep_id, labels)
    journal = sweeps / episode.sweep_id / "journal.jsonl"
    evidence.journal_lines = len(journal.read_text().splitlines()) if journal.is_file() else 0
    return evidence


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def read_store(evidence: Evidence, sweep_id: str, uri: str) -> None:
    """The sweep as the store holds it: the parent run, and every trial run tagged with the sweep
    (whatever parent it names), each with its history of samples/s."""
    from elastune.tracking.mlflow import load_sweep
    from mlflow import MlflowClient

    record = load_sweep(sweep_id, uri)
    client = MlflowClient(uri)
    evidence.sweep_status = record.status
    evidence.reference_samples_per_s = record.reference_samples_per_s
    parent = client.get_run(record.mlflow_run_id or "")
    evidence.parent_run_status = parent.info.status
    evidence.trials_total = parent.data.metrics.get("trials_total")
    evidence.artifacts = [a.path for a in client.list_artifacts(parent.info.run_id)]
    confirmed = {t.trial_id for t in record.trials if t.confirmed_speedup}
    runs = client.search_runs(
        [parent.info.experiment_id],
        f"tags.`elastune.sweep_id` = '{sweep_id}' and tags.`elastune.kind` = 'trial'",
        max_results=1000,
    )
    for run in runs:
        tags, trial_id = run.data.tags, run.data.tags.get("elastune.trial_id", "?")
        number = tags.get("elastune.number")
        evidence.children.append(
            StoredTrial(
                trial_id=trial_id,
                run_id=run.info.run_id,
                number=int(number) if number is not None else None,
                status=tags.get("elastune.status"),
                run_status=run.info.status,
                samples_per_s=run.data.metrics.get("samples_per_s"),
                samples_logged=len(client.get_metric_history(run.info.run_id, "samples_per_s")),
                error=tags.get("elastune.error"),
                confirmed=trial_id in confirmed,
            )
        )


def tune_executions(sweeps: Path, sweep_id: str, labels: dict[str, str]) -> dict[str, list[float]]:
    """Trial label -> when each process that trained it began, from Tune's result files: a process
    that trained sends progress reports before its final one (a resumed sweep's replay of an ended
    trial sends its final report alone). A Tune trial is labelled as the store labels its id, else by
    its config's proposal number, else by its id."""
    found: dict[str, list[float]] = {}
    files = [(_tune_label(p.parent, labels), p) for p in (sweeps / sweep_id).glob("trial_*/result.json")]
    files += [("ref", p) for p in (sweeps / f"{sweep_id}-reference").glob("*/result.json")]
    for name, path in files:
        starts: dict[int, float] = {}
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                row = json.loads(line)
                if not row.get("elastune_final"):
                    starts[row["pid"]] = min(starts.get(row["pid"], float("inf")), float(row["timestamp"]))
        found.setdefault(name, []).extend(sorted(starts.values()))
    return found


def _tune_label(trial_dir: Path, labels: dict[str, str]) -> str:
    trial_id = trial_dir.name.removeprefix("trial_")
    if trial_id in labels:
        return labels[trial_id]
    with contextlib.suppress(OSError, ValueError, KeyError):
        return str(json.loads((trial_dir / "params.json").read_text())["elastune_number"])
    return f"Tune trial {trial_id}"


# -- the checks (pure) -------------------------------------------------------------------------


@dataclass
class Findings:
    lost: list[str] = field(default_factory=list)
    twice: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # counted nowhere: worth a look


def announced(consoles: list[str]) -> list[tuple[int, str, str, str]]:
    """(console, label, status, rest of the line) for each trial's end the consoles show, in their
    order, the reference's included ("reference: N samples/s", "reference did not finish (failed: ...)")."""
    said = []
    for index, console in enumerate(consoles):
        found = [(m.start(), m["label"], m["status"] or "infeasible", m["rest"]) for m in TRIAL_LINE.finditer(console)]
        found += [(m.start(), "ref", m["status"] or "ok", m["rest"] or "") for m in REFERENCE_LINE.finditer(console)]
        said += [(index, name, status, rest) for _, name, status, rest in sorted(found)]
    return said


def check(ev: Evidence) -> Findings:
    """Every count the fault matrix reports, from one episode's evidence. Records lost and trials
    run twice count records (a trial's, the sweep's final one, the journal), each once however many
    ways it shows."""
    found = Findings()
    # one per console that shows any (a chained exception prints several headers)
    found.tracebacks = [f"console {i + 1}: {_raised(text)}" for i, text in enumerate(ev.consoles) if TRACEBACK in text]
    found.wrong += ev.interim
    found.wrong += [f"{name} exited {code}, expected {sorted(ok)}" for name, code, ok in ev.exits if code not in ok]
    if ev.sweep_status is None:
        found.lost.append("the sweep: not in the store")
        found.wrong.append("no sweep in the store")
        return found
    found.lost = _per_record(lost_records(ev))
    found.twice = _per_record(twice_run(ev))
    found.wrong += wrong_statuses(ev)
    found.notes = remarks(ev)
    return found


def lost_records(ev: Evidence) -> list[tuple[str, str]]:
    """(record, how it shows): an announced end the store lacks or holds otherwise, a trial Tune ran
    or a proposal the store lacks, an ok trial without figures, the sweep's final record incomplete,
    a confirmation said but not stored, journal lines left unwritten."""
    lost = []
    stored: dict[str, list[StoredTrial]] = {}
    for child in ev.children:  # a proposal run twice has two (counted in twice_run)
        stored.setdefault(_label(child), []).append(child)
    last = {name: (status, rest) for _, name, status, rest in announced(ev.consoles)}  # the last word counts
    for name, (status, rest) in last.items():
        children = stored.get(name, [])
        rates = [f" {_rate(c.samples_per_s)} samples/s" for c in children if c.status == status]
        if not children:
            lost.append((name, f"announced {status}, not in the store"))
        elif not rates:
            lost.append((name, f"announced {status}, the store says {[c.status for c in children]}"))
        elif status == "ok" and not any(rate in rest for rate in rates):
            said = rest.split(" samples/s")[0]
            lost.append((name, f"announced{said} samples/s, the store has {[c.samples_per_s for c in children]}"))
    lost += [(name, "Tune ran it, not in the store") for name in ev.executions if name not in stored]
    lost += [(name, "not in the store") for name in ["ref", *map(str, range(MAX_TRIALS))] if name not in stored]
    lost += [(_label(c), "ok without samples/s") for c in ev.children if c.status == "ok" and c.samples_per_s is None]
    # the final update counts every trial the store holds (more: a trial run deleted, shown above)
    if ev.sweep_status == "finished" and ((ev.trials_total or 0) < len(stored) or "trials.csv" not in ev.artifacts):
        lost.append(("the sweep", f"final record: trials_total {ev.trials_total} of {len(stored)}, {ev.artifacts}"))
    unconfirmed = re.search(r"unconfirmed|confirmation: skipped", ev.consoles[-1] if ev.consoles else "")
    if ev.confirm and ev.sweep_status == "finished" and not any(c.confirmed for c in ev.children) and not unconfirmed:
        lost.append(("the confirmation", "no trial is stored confirmed, and no console says why"))
    if ev.journal_lines:
        lost.append(("the journal", f"{ev.journal_lines} line(s) never written to the store"))
    return lost


def twice_run(ev: Evidence) -> list[tuple[str, str]]:
    """(trial, how it shows): two runs in the store for one trial, its samples/s logged twice, a
    final status announced again by a resume after the store held it, or (Tune's result files) a
    process that trained it again after that."""
    twice = []
    runs: dict[str, list[str]] = {}
    for child in ev.children:
        runs.setdefault(_label(child), []).append(child.trial_id)
    twice += [
        (name, f"{len(ids)} runs in the store (trial ids {', '.join(ids)})")
        for name, ids in runs.items()
        if len(ids) > 1
    ]
    twice += [(_label(c), f"samples/s logged {c.samples_logged} times") for c in ev.children if c.samples_logged > 1]
    said = announced(ev.consoles)
    for since, final, console in ev.finals_at:
        twice += [(name, f"{status} announced again by console {index + 1}") for index, name, status, _ in said
                  if index >= console and name in final and status in FINAL]  # fmt: skip
        twice += [(name, "trained again after the store held its final status") for name in sorted(final)
                  if any(start > since for start in ev.executions.get(name, []))]  # fmt: skip
    return twice


def wrong_statuses(ev: Evidence) -> list[str]:
    wrong = []
    if ev.sweep_status != "finished" or ev.parent_run_status != "FINISHED":
        wrong.append(f"the sweep ended {ev.sweep_status} (MLflow {ev.parent_run_status}), not finished")
    for child in ev.children:
        name = f"trial {_label(child)}"
        if child.status not in FINAL:
            wrong.append(f"{name}: {child.status}, not a final status")
        elif RUN_STATUS[child.status] != child.run_status:
            wrong.append(f"{name}: {child.status} but its MLflow run is {child.run_status}")
        elif child.status == "failed" and not ev.killed:
            wrong.append(f"{name}: failed ({child.error}) where no trial's process was killed")
    return wrong


def remarks(ev: Evidence) -> list[str]:
    """What counts toward no figure but is worth a look: how each trial a fault killed was recorded,
    and whether with elastune's one-line reason (progress.KILLED_FROM_OUTSIDE) or Ray's own text."""
    said = []
    for child in (c for c in ev.children if c.status == "failed" and ev.killed):
        error = child.error or ""
        if any(reason in error for reason in FROM_OUTSIDE):
            said.append(f"trial {_label(child)} recorded failed: {error[:120]}")
        else:
            said.append(
                f"trial {_label(child)} recorded failed with Ray's text, not the one-line reason: {error[:120]!r}"
            )
    return said


def _per_record(found: list[tuple[str, str]]) -> list[str]:
    """One line per record, saying every way it showed."""
    said: dict[str, list[str]] = {}
    for name, how in found:
        if how not in said.setdefault(name, []):
            said[name].append(how)
    return [
        f"{'trial ' if name.isdigit() or name == 'ref' else ''}{name}: {'; '.join(how)}" for name, how in said.items()
    ]


def _raised(console: str) -> str:
    """The last exception line of the console's last traceback."""
    tail = console[console.rindex(TRACEBACK) :].splitlines()
    raised = [line for line in tail[1:] if line and not line.startswith((" ", "\t"))]
    return raised[0][:200] if raised else "?"


def _label(child: StoredTrial) -> str:
    return label(child.trial_id, child.number)


def _rate(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "none"


# -- running them ------------------------------------------------------------------------------


@dataclass
class Result:
    plan: Plan
    injection: Injection | None
    findings: Findings
    wall_s: float
    commands: int
    harness: str | None = None  # the harness itself failed (not a finding about elastune)
    skipped: str | None = None
    folder: str | None = None
    exposed: list[str] = field(default_factory=list)  # listeners beyond loopback (every one should bind 127.0.0.1)

    def problems(self) -> int:
        f = self.findings
        return (
            len(f.lost)
            + len(f.twice)
            + len(f.wrong)
            + len(f.tracebacks)
            + (self.harness is not None)
            + len(self.exposed)
        )


def run_episode(plan: Plan, keep: bool) -> Result:
    began = time.monotonic()
    episode = Episode(plan)
    injection, harness, skipped, findings = None, None, None, Findings()
    try:
        try:
            injection = INJECT[plan.fault](episode)
        except Hung as exc:
            episode.interim.append(f"hung: {exc}")
        if injection is None:  # hung before it could say
            injection = Injection(False, stage_of(episode.commands[0].said()) if episode.commands else "start")
        findings = check(gather(episode, injection))
    except Skipped as exc:
        skipped = str(exc)
    except Exception as exc:  # the harness's own failure: reported as such, never as a finding
        harness = f"{type(exc).__name__}: {exc}"
    finally:
        episode.close()
    commands = len(episode.commands) + len(episode.consoles)
    result = Result(plan, injection, findings, time.monotonic() - began, commands, harness, skipped)
    result.exposed = sorted(episode.exposed)
    if keep or result.problems():
        result.folder = str(episode.folder)
    else:
        shutil.rmtree(episode.folder, ignore_errors=True)
    return result


def line(result: Result) -> str:
    p, i, f = result.plan, result.injection, result.findings
    head = f"#{p.index:<3} {p.fault:<12} moment {p.moment_s:5.1f} s{' +confirm' if p.confirm else '         '}"
    if result.skipped:
        return f"{head}  skipped: {result.skipped}"
    hit = f"{i.stage} @ {i.at_s:.1f} s" if i is not None and i.landed and i.at_s is not None else "missed"
    counts = f"lost {len(f.lost)} · twice {len(f.twice)} · wrong {len(f.wrong)} · tracebacks {len(f.tracebacks)}"
    out = f"{head}  {hit:<22} {result.commands} command(s) {result.wall_s:5.0f} s  {counts}"
    out += f"\n      {i.detail}" if i is not None and i.detail else ""
    for kind in ("lost", "twice", "wrong", "tracebacks", "notes"):
        out += "".join(f"\n      {kind}: {said}" for said in getattr(f, kind))
    if result.harness:
        out += f"\n      harness: {result.harness}"
    out += "".join(f"\n      listening beyond loopback: {said}" for said in result.exposed)
    if result.folder:
        out += f"\n      kept: {result.folder}"
    return out


def run_all(plans: list[Plan], jobs: int, keep: bool) -> list[Result]:
    """Episodes `jobs` at a time; the oom ones alone afterwards (the node's memory is shared)."""
    results: list[Result] = []
    printing = threading.Lock()

    def one(p: Plan) -> Result:
        result = run_episode(p, keep)
        with printing:
            print(line(result), flush=True)
        return result

    shared = [p for p in plans if p.fault != "oom"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results += pool.map(one, shared)
    results += [one(p) for p in plans if p.fault == "oom"]
    return sorted(results, key=lambda r: r.plan.index)


def summary(results: list[Result]) -> dict[str, dict[str, Any]]:
    per: dict[str, dict[str, Any]] = {}
    for r in results:
        row = per.setdefault(
            r.plan.fault,
            dict.fromkeys(("episodes", "landed", "lost", "twice", "wrong", "tracebacks", "harness", "skipped"), 0)
            | {"wall": []},
        )
        if r.skipped:
            row["skipped"] += 1
            continue
        row["episodes"] += 1
        row["landed"] += bool(r.injection and r.injection.landed)
        for kind in ("lost", "twice", "wrong", "tracebacks"):
            row[kind] += len(getattr(r.findings, kind))
        row["harness"] += r.harness is not None
        row["wall"].append(r.wall_s)
    return per


def fault_line(fault: str, s: dict[str, Any]) -> str:
    median = statistics.median(s["wall"]) if s["wall"] else 0
    return (
        f"{fault}: {s['episodes']} episode(s), {s['landed']} hit a running sweep · lost {s['lost']} · "
        f"twice {s['twice']} · wrong {s['wrong']} · tracebacks {s['tracebacks']} · harness errors {s['harness']} · "
        f"skipped {s['skipped']} · median {median:.0f} s"
    )


def record(args: argparse.Namespace, results: list[Result], wall_s: float) -> None:
    from record import Figure, write_record

    ran = [r for r in results if not r.skipped]
    totals = {k: sum(len(getattr(r.findings, k)) for r in ran) for k in ("lost", "twice", "wrong", "tracebacks")}
    figures = [
        Figure("episodes", len(ran), "", ">= 60", len(ran) >= 60),
        Figure("records lost", totals["lost"], "", "0", totals["lost"] == 0),
        Figure("trials run twice", totals["twice"], "", "0", totals["twice"] == 0),
        Figure("wrong final statuses", totals["wrong"], "", "0", totals["wrong"] == 0),
        Figure("tracebacks shown without -v", totals["tracebacks"], "", "0", totals["tracebacks"] == 0),
        Figure("faults that hit a running sweep", sum(bool(r.injection and r.injection.landed) for r in ran), ""),
        Figure("median episode", round(statistics.median([r.wall_s for r in ran]) if ran else 0), "s"),
    ]
    notes = [fault_line(fault, counts) for fault, counts in summary(results).items()]
    columns = [
        "episode",
        "fault",
        "seed",
        "moment_s",
        "confirm",
        "hit",
        "stage",
        "at_s",
        "detail",
        "commands",
        "wall_s",
    ]
    columns += ["lost", "twice", "wrong", "tracebacks", "findings and notes"]
    rows = []
    for r in results:
        i, f = r.injection, r.findings
        said = [
            *f.lost,
            *f.twice,
            *f.wrong,
            *f.tracebacks,
            *(f"note: {note}" for note in f.notes),
            *(f"listening beyond loopback: {said}" for said in r.exposed),
            *([r.harness] if r.harness else []),
            *([r.skipped] if r.skipped else []),
        ]
        rows.append(
            [r.plan.index, r.plan.fault, r.plan.seed, r.plan.moment_s, r.plan.confirm, bool(i and i.landed),
             i.stage if i else None, round(i.at_s, 1) if i and i.at_s is not None else None, i.detail if i else None,
             r.commands, round(r.wall_s), len(f.lost), len(f.twice), len(f.wrong), len(f.tracebacks), "; ".join(said)]
        )  # fmt: skip
    write_record(
        "faults",
        "Fault matrix: quick sweeps with one fault each, checked against the MLflow store",
        figures,
        settings=vars(args) | {"wall_s": round(wall_s)},
        notes=notes,
        table={"columns": columns, "rows": rows},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=60, help="episodes (faults in shuffled rounds)")
    parser.add_argument("--seed", type=int, default=0, help="the plan's seed (each episode's draws follow from it)")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of: {', '.join(FAULTS)}")
    parser.add_argument("--jobs", type=int, default=1, help="episodes at a time (oom episodes always alone)")
    parser.add_argument(
        "--window",
        type=float,
        default=WINDOW_S,
        help="the fault's moment: uniform in this many s after the sweep's first line",
    )
    parser.add_argument("--only", help="comma-separated episode indices of the plan (a reproduction)")
    parser.add_argument(
        "--keep", action="store_true", help="keep every episode's folder (default: those with problems)"
    )
    parser.add_argument("--no-record", action="store_true", help="print only; write no record")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty or args.no_record)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        parser.error(f"--faults: unknown {unknown}; choose from {', '.join(FAULTS)}")
    plans = plan(args.episodes, faults, args.seed, args.window)
    if args.only:
        wanted = {int(i) for i in args.only.split(",")}
        plans = [p for p in plans if p.index in wanted]
    began = time.monotonic()
    results = run_all(plans, args.jobs, args.keep)
    wall = time.monotonic() - began
    print(f"\n{len(results)} episode(s) in {wall / 60:.1f} min")
    for fault, counts in summary(results).items():
        print(f"  {fault_line(fault, counts)}")
    if not args.no_record:
        record(args, results, wall)
    return 1 if any(r.problems() for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
