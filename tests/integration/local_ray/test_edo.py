"""EDO end to end: a real broker actor, real trial processes (Ray actors) training on the virtual
device, and the faults EDO promises to survive.

Trials here are tiny DLRMs whose memory is dominated by the micro-batch (about 40 MB at 1024, 20 MB
at 256). Their demands are measured at the start of the module (`demand`), not assumed, so the
device capacities below are in the same units as what the probes will see. Trials pause at chosen
steps on `Gates` (a Ray actor), so each scenario happens in the order the test needs, without sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from elastune.edo.broker import BrokerConfig, ensure_broker, read_status, shutdown_broker
from elastune.edo.client import Demand, edo_session
from elastune.edo.policy import DeviceSpec
from elastune.errors import EdoError, OutOfMemory
from elastune.training.loop import train
from elastune.training.probe import VirtualProbe
from elastune.validate import load_run_config

pytestmark = pytest.mark.integration

HEARTBEAT_S = 1.0
MiB = 2**20
EDO_CFG = [
    "data.rows_scale=0.0005",
    "model.embedding_dim=64",
    "workload_options.bottom_mlp=[64]",
    "workload_options.top_mlp=[64]",
    "optimizer.sparse=rowwise_adagrad",
    "batch.micro=1024",
    "batch.accum=1",
    "warmup_steps=1",
    "eval.samples=512",
    "eval.batch=256",
    "device=cpu",
]
MIN_MICRO = 256


@ray.remote(num_cpus=0)
class Gates:
    """Named rendezvous points: a trial `arrive`s and waits until the test `open`s its gate."""

    def __init__(self) -> None:
        self._arrived: dict[str, asyncio.Event] = {}
        self._opened: dict[str, asyncio.Event] = {}

    async def arrive(self, name: str) -> None:
        self._arrived.setdefault(name, asyncio.Event()).set()

    async def wait_arrival(self, name: str) -> None:
        await self._arrived.setdefault(name, asyncio.Event()).wait()

    async def open(self, name: str) -> None:
        self._opened.setdefault(name, asyncio.Event()).set()

    async def wait_open(self, name: str) -> None:
        await self._opened.setdefault(name, asyncio.Event()).wait()


@ray.remote(num_cpus=0, max_restarts=0)
class TrialRunner:
    """A trial process: trains one config inside an EDO session on the virtual device."""

    def __init__(self) -> None:
        torch.set_num_threads(1)  # several trials share two cores

    def pid(self) -> int:
        return os.getpid()

    def measure(self, overrides: list[str]) -> int:
        """The highest step peak of a short run on the virtual device, without EDO (what a grant must
        cover; the build before the first step and the evaluation after the last are not steps)."""
        cfg = load_run_config(None, [*EDO_CFG, *overrides])
        probe = VirtualProbe(1 << 40)
        peaks: list[int] = []

        class Record:
            def check(self, state: Any) -> None:
                pass

            def at_boundary(self, state: Any, model: Any) -> None:
                peaks.append(probe.window_peak(reset=True))

        train(cfg, probe=probe, boundary=Record())
        return max(peaks[1:])  # peaks[0] is the build's window

    def run(self, trial_id: str, job: dict[str, Any]) -> dict[str, Any]:
        cfg = load_run_config(None, [*EDO_CFG, *job["overrides"]])
        probe = VirtualProbe(job["capacity"])
        gates, pauses, done = job.get("gates"), set(job.get("pauses", ())), set()

        def fault(step: int, micro_index: int) -> None:
            if micro_index == 0 and step in pauses and step not in done:
                done.add(step)
                ray.get(gates.arrive.remote(f"{trial_id}@{step}"))
                ray.get(gates.wait_open.remote(f"{trial_id}@{step}"))
            if job.get("hog_bytes") and step >= job["hog_from"] and micro_index == 0:
                hog = torch.ones(job["hog_bytes"] // 4)  # touched, so resident: far beyond the grant
                del hog

        out: dict[str, Any] = {"pid": os.getpid(), "ok": False}
        with edo_session(trial_id=trial_id, device=job["device"], demand=job["demand"], probe=probe) as boundary:
            try:
                result = train(cfg, probe=probe, boundary=boundary, fault=fault)
                out.update(ok=True, oom_retries=result.oom_retries, micro=result.micro_batch, steps=result.steps)
                out.update(samples=result.samples, effective=result.effective_batch)
            except (OutOfMemory, EdoError) as exc:
                out.update(error=f"{type(exc).__name__}: {exc}")
            out["history"] = boundary.history
        return out


# -- fixtures


@pytest.fixture(scope="module")
def pool(ray_local: Any) -> Iterator[list[Any]]:
    """Trial processes kept across tests (starting one costs seconds of imports); a killed one is
    replaced by `runner()`."""
    runners = [TrialRunner.remote() for _ in range(3)]
    ray.get([r.pid.remote() for r in runners])
    yield runners
    for r in runners:  # the Ray outlives this module (local_ray/conftest.py)
        ray.kill(r)


def runner(pool: list[Any], i: int) -> Any:
    try:
        ray.get(pool[i].pid.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        pool[i] = TrialRunner.remote()  # the one before was killed on purpose
    return pool[i]


@pytest.fixture(scope="module")
def demand(pool: list[Any]) -> Demand:
    """Measured, then padded: want covers the configured shape, min the smallest (micro 256)."""
    full, small = ray.get(
        [
            pool[0].measure.remote(["steps=4"]),
            pool[1].measure.remote(["steps=4", f"batch.micro={MIN_MICRO}", f"batch.accum={1024 // MIN_MICRO}"]),
        ]
    )
    assert full > small * 1.3, f"the fixture needs micro-batch-dominated memory: {full} vs {small}"
    return Demand(want_bytes=int(full * 1.3), min_bytes=int(small * 1.2), min_micro=MIN_MICRO)


@pytest.fixture
def gates(ray_local: Any) -> Iterator[Any]:
    handle = Gates.remote()
    yield handle
    ray.kill(handle)


@pytest.fixture
def device(ray_local: Any, request: pytest.FixtureRequest) -> Iterator[Callable[[int], DeviceSpec]]:
    """A factory: a fresh broker with one virtual device of the given capacity; stopped after the test."""

    def start(capacity: int) -> DeviceSpec:
        spec = DeviceSpec(f"virtual:{request.node.name}", capacity_bytes=capacity)
        ensure_broker([spec], BrokerConfig(heartbeat_s=HEARTBEAT_S))
        return spec

    yield start
    shutdown_broker()


def job(spec: DeviceSpec, demand: Demand, steps: int, **extra: Any) -> dict[str, Any]:
    overrides = [f"steps={steps}", *extra.pop("overrides", [])]
    return {"device": spec.name, "capacity": spec.capacity_bytes, "demand": demand, "overrides": overrides, **extra}


def trials(status: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    assert status is not None, "the broker is gone"
    return {t["trial_id"]: t for d in status["devices"] for t in d["trials"]}


def assert_never_over_capacity(status: dict[str, Any], spec: DeviceSpec) -> None:
    """Replay the timeline: at every point the grants held add up to at most the budget."""
    held: dict[str, int] = {}
    for point in status["timeline"]:
        if point["device"] == spec.name:
            held[point["trial_id"]] = point["grant_bytes"]
            assert sum(held.values()) <= spec.budget_bytes, f"over capacity at {point}"


def events(result: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in result["history"] if e["event"] == kind]


# -- a trial arrives, shrinks the running one, finishes; the running one grows back, unharmed


@pytest.fixture(scope="module")
def shrink_and_grow(pool: list[Any], demand: Demand, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # Room for both minimums plus half of one trial's slack: the second trial cannot start until
    # the first confirms a shrink.
    capacity = 2 * demand.min_bytes + (demand.want_bytes - demand.min_bytes) // 2
    spec = DeviceSpec("virtual:shrink", capacity_bytes=capacity)
    ensure_broker([spec], BrokerConfig(heartbeat_s=HEARTBEAT_S))
    gates = Gates.remote()
    ckpt = tmp_path_factory.mktemp("edo") / "a.ckpt"
    try:
        a = runner(pool, 0).run.remote(
            "a", job(spec, demand, 30, gates=gates, pauses=[5, 18], overrides=[f"checkpoint.path={ckpt}"])
        )
        ray.get(gates.wait_arrival.remote("a@5"), timeout=120)
        alone = trials(read_status())["a"]
        b = runner(pool, 1).run.remote("b", job(spec, demand, 8))
        ray.get(gates.open.remote("a@5"))
        b_result = ray.get(b, timeout=120)
        ray.get(gates.wait_arrival.remote("a@18"), timeout=120)
        after_b = trials(read_status())["a"]  # b has released: its memory went back to a
        ray.get(gates.open.remote("a@18"))
        a_result = ray.get(a, timeout=120)
        status = read_status()
    finally:
        shutdown_broker()
        ray.kill(gates)
    return {
        "a": a_result,
        "b": b_result,
        "alone": alone,
        "after_b": after_b,
        "status": status,
        "spec": spec,
        "ckpt": ckpt,
    }


def test_arriving_trial_shrinks_the_running_one_and_both_keep_training(
    shrink_and_grow: dict[str, Any], demand: Demand
) -> None:
    a, b = shrink_and_grow["a"], shrink_and_grow["b"]
    assert a["ok"] and b["ok"], (a.get("error"), b.get("error"))
    assert shrink_and_grow["alone"]["grant_bytes"] == demand.want_bytes  # alone, a had all it wanted
    shrink, confirm = events(a, "shrink"), events(a, "confirm")
    assert shrink and shrink[0]["micro"] < 1024 and 5 <= shrink[0]["step"] < 18, a["history"]
    assert confirm and confirm[0]["limit_bytes"] < demand.want_bytes  # two-phase: re-shaped, then confirmed
    assert a["steps"] == 30 and b["steps"] == 8  # both trained to the end
    assert a["oom_retries"] == 0 and b["oom_retries"] == 0  # within their grants: no OOM, anywhere
    assert_never_over_capacity(shrink_and_grow["status"], shrink_and_grow["spec"])


def test_finished_trials_memory_is_re_granted(shrink_and_grow: dict[str, Any], demand: Demand) -> None:
    assert shrink_and_grow["after_b"]["grant_bytes"] == demand.want_bytes
    grow = [e for e in events(shrink_and_grow["a"], "grow") if e["step"] >= 18]
    assert grow and shrink_and_grow["a"]["micro"] == 1024, shrink_and_grow["a"]["history"]


def test_parameters_after_shrink_and_grow_match_the_undisturbed_run(
    shrink_and_grow: dict[str, Any], tmp_path: Path
) -> None:
    undisturbed = tmp_path / "undisturbed.ckpt"
    train(load_run_config(None, [*EDO_CFG, "steps=30", f"checkpoint.path={undisturbed}"]))
    disturbed = torch.load(shrink_and_grow["ckpt"], weights_only=False)
    assert (disturbed["loop"]["micro"] * disturbed["loop"]["accum"]) == 1024  # same effective batch
    reference = torch.load(undisturbed, weights_only=False)["model"]
    for key, value in reference.items():
        torch.testing.assert_close(disturbed["model"][key], value, atol=1e-5, rtol=0, msg=lambda m, k=key: f"{k}: {m}")


# -- faults


def test_killed_trials_grant_is_reclaimed_within_two_heartbeats(
    pool: list[Any], demand: Demand, device: Callable[[int], DeviceSpec], gates: Any, wait_until: Callable[..., None]
) -> None:
    spec = device(demand.want_bytes + demand.min_bytes // 2)  # a second trial fits only beside a shrunk first
    victim = runner(pool, 2)
    victim_pid = ray.get(victim.pid.remote())  # now: once it runs, its calls queue behind the run
    running = victim.run.remote("victim", job(spec, demand, 50, gates=gates, pauses=[3]))
    ray.get(gates.wait_arrival.remote("victim@3"), timeout=120)  # paused mid-step: it cannot confirm
    waiter = runner(pool, 0).run.remote("waiter", job(spec, demand, 6))
    wait_until(lambda: trials(read_status()).get("waiter", {}).get("state") == "waiting", 60, "the waiter to queue")
    killed_at = time.monotonic()
    os.kill(victim_pid, signal.SIGKILL)
    wait_until(lambda: "victim" not in trials(read_status()), 10, "the victim's lease to expire", interval_s=0.02)
    reclaimed_after = time.monotonic() - killed_at
    assert reclaimed_after <= 2 * HEARTBEAT_S, f"reclaimed {reclaimed_after:.2f} s after the kill"
    result = ray.get(waiter, timeout=120)
    assert result["ok"] and result["oom_retries"] == 0 and result["steps"] == 6
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(running)


def test_broker_killed_mid_run_comes_back_without_losing_or_doubling_a_grant(
    pool: list[Any], demand: Demand, device: Callable[[int], DeviceSpec], gates: Any, wait_until: Callable[..., None]
) -> None:
    spec = device(2 * demand.want_bytes)
    pids = ray.get([runner(pool, 0).pid.remote(), runner(pool, 1).pid.remote()])
    runs = [
        runner(pool, i).run.remote(tid, job(spec, demand, 30, gates=gates, pauses=[4, 20]))
        for i, tid in enumerate("pq")
    ]
    ray.get([gates.wait_arrival.remote(f"{tid}@4") for tid in "pq"], timeout=120)
    before = {tid: t["grant_bytes"] for tid, t in trials(read_status()).items()}
    broker = ray.get_actor("elastune_edo_broker", namespace="elastune")
    old = ray.get(broker.incarnation.remote())
    os.kill(ray.get(broker.pid.remote()), signal.SIGKILL)
    # The trials train on while the broker is down, then wait at step 20 until the rebuilt state has
    # been read. Without that second gate they raced the restart: the rest of the run takes about as
    # long as a restart (2-3 s), and a trial that finished first released its grant and was gone
    # from the broker for good, so "both re-registered" could never be seen again.
    ray.get([gates.open.remote(f"{tid}@4") for tid in "pq"])

    def rebuilt() -> bool:
        try:
            if ray.get(broker.incarnation.remote(), timeout=5) == old:
                return False
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return False  # still restarting
        return set(trials(read_status())) == {"p", "q"}

    wait_until(rebuilt, 120, "the broker to restart and both trials to re-register")
    after = {tid: t["grant_bytes"] for tid, t in trials(read_status()).items()}
    assert after == before == {"p": demand.want_bytes, "q": demand.want_bytes}
    ray.get([gates.open.remote(f"{tid}@20") for tid in "pq"])
    results = ray.get(runs, timeout=120)
    assert all(r["ok"] and r["oom_retries"] == 0 and r["steps"] == 30 for r in results), results
    assert [r["pid"] for r in results] == pids  # no trial restarted


def test_trial_that_allocates_far_beyond_its_grant_is_the_only_one_affected(
    pool: list[Any], demand: Demand, device: Callable[[int], DeviceSpec]
) -> None:
    spec = device(2 * demand.want_bytes)
    hog = runner(pool, 0).run.remote("hog", job(spec, demand, 20, hog_bytes=3 * demand.want_bytes, hog_from=3))
    calm = runner(pool, 1).run.remote("calm", job(spec, demand, 20))
    hog_result, calm_result = ray.get([hog, calm], timeout=180)
    assert not hog_result["ok"] and "cannot be halved" in hog_result["error"]  # the loop's OOM path ran out
    assert events(hog_result, "over"), hog_result["history"]
    assert calm_result["ok"] and calm_result["oom_retries"] == 0 and calm_result["steps"] == 20
    status = read_status()
    assert status is not None
    calm_grants = [p["grant_bytes"] for p in status["timeline"] if p["trial_id"] == "calm" and p["grant_bytes"]]
    assert calm_grants and min(calm_grants) == demand.want_bytes  # its grant was never touched
    hog_grants = [p["grant_bytes"] for p in status["timeline"] if p["trial_id"] == "hog"]
    assert max(hog_grants) <= demand.want_bytes  # the hog was never granted more than it asked
    assert hog_grants[-1] == 0  # and its memory went back to the pool when it failed
    assert_never_over_capacity(status, spec)


# -- elastune edo status


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "elastune"
    return subprocess.run([str(exe), "edo", "status", *args], capture_output=True, text=True, timeout=120, check=False)


def test_edo_status_cli(ray_local: Any, device: Callable[[int], DeviceSpec]) -> None:
    address = ray_local.address_info["gcs_address"]
    shutdown_broker()
    none = _cli("--address", address)
    assert none.returncode == 0 and "no EDO broker is running on this cluster" in none.stdout, none.stderr
    spec = device(64 * MiB)
    shown = _cli("--address", address, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    (dev,) = json.loads(shown.stdout)["devices"]
    assert (dev["device"], dev["capacity_bytes"], dev["free_bytes"], dev["trials"]) == (
        spec.name,
        64 * MiB,
        64 * MiB,
        [],
    )
    table = _cli("--address", address)
    assert table.returncode == 0 and spec.name in table.stdout and "64.00 MiB" in table.stdout, table.stdout
