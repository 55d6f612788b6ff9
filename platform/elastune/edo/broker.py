"""EDO's broker: one named Ray actor per cluster that holds the policy (policy.py) and nothing else.

Thin on purpose: every decision is the pure policy's; the actor adds a clock, lazy lease
expiry, a timeline of grants and use per device, and a way to be found.

Lifetime: detached, named `elastune_edo_broker` in namespace `elastune`. One device is shared by
every trial on it, whichever sweep (driver) started them, so the broker must outlive any one driver:
a job-scoped actor dies with the driver that created it, taking the grants of the other sweeps'
trials with it. It holds no CPU (`num_cpus=0`) and little memory; `shutdown_broker()` removes it.

Failure: `max_restarts=-1`. Ray re-runs the constructor, so the devices given at creation come back;
the trials notice (their next call fails, then the broker does not know them) and re-register with
the grant they hold (and their device's spec), which rebuilds the state without losing or doubling
a grant. For one lease after a restart only re-registrations are admitted (`Policy.hold_new_until`),
so a new trial cannot take memory a running trial has not re-registered yet.

Leases expire lazily, at the start of every call: anyone who could use reclaimed memory (a waiting
trial polling, a running one heartbeating to grow, a status reader) makes a call, so each of them
sees the state exactly as a timer firing at the deadline would have left it, with no thread to race.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import ray
from ray.actor import ActorHandle

from elastune.edo.policy import DeviceSpec, Grant, Policy
from elastune.errors import ElastuneError, InputError

__all__ = [
    "BROKER_NAME",
    "NAMESPACE",
    "BrokerConfig",
    "EdoBroker",
    "broker_unreachable",
    "ensure_broker",
    "get_broker",
    "read_status",
    "shutdown_broker",
]

BROKER_NAME = "elastune_edo_broker"
NAMESPACE = "elastune"
# Errors that mean "the broker cannot answer now" (dead, restarting, slow), not "the call was wrong".
broker_unreachable = (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError)


@dataclass(frozen=True)
class BrokerConfig:
    """heartbeat_s: the heartbeat interval, which clients learn from the broker; they renew their
    lease three times per interval. lease_s: how long a silent trial keeps its grant; by default 1.5
    intervals, so a killed trial's memory is reclaimed within 2 intervals, while a live trial whose
    heartbeat thread stalls (a long GIL-holding call, a GC pause) for up to about one interval keeps
    its grant."""

    heartbeat_s: float = 1.0
    lease_s: float | None = None
    timeline_max: int = 100_000  # entries kept (about 8 MiB at most)

    def __post_init__(self) -> None:
        if not self.heartbeat_s > 0:
            raise InputError(f"heartbeat_s={self.heartbeat_s}: must be > 0 seconds")
        if self.lease_s is not None and not self.lease_s > self.heartbeat_s:
            raise InputError(
                f"lease_s={self.lease_s}: must exceed heartbeat_s={self.heartbeat_s}, or live trials expire"
            )

    @property
    def lease(self) -> float:
        return self.lease_s if self.lease_s is not None else 1.5 * self.heartbeat_s


class EdoBroker:
    """The actor's body (wrapped by `ensure_broker`). Ray runs one call at a time (max_concurrency
    1), so the policy needs no lock."""

    def __init__(self, devices: list[DeviceSpec], config: BrokerConfig) -> None:
        self._config = config
        self._policy = Policy(lease_s=config.lease)
        for spec in devices:
            self._policy.register_device(spec)
        self._incarnation = uuid.uuid4().hex
        self._timeline: deque[dict[str, Any]] = deque(maxlen=config.timeline_max)
        self._last: dict[str, tuple[str, int, int]] = {}  # trial -> (device, grant, used) last on the timeline
        if ray.get_runtime_context().was_current_actor_reconstructed:
            # Restarted: running trials re-register within a heartbeat or so; until the lease is over
            # they come first, so nobody new takes memory that is still in use.
            self._policy.hold_new_until = time.monotonic() + config.lease

    # -- what trials call

    def config(self) -> BrokerConfig:
        return self._config

    def register_device(self, spec: DeviceSpec) -> None:
        self._policy.register_device(spec)

    def device_spec(self, name: str) -> DeviceSpec | None:
        return self._policy.devices.get(name)

    def admit(
        self,
        trial_id: str,
        device: str,
        min_bytes: int,
        want_bytes: int,
        priority: float = 1.0,
        held_bytes: int = 0,
        spec: DeviceSpec | None = None,
    ) -> Grant:
        now = self._expire()
        if spec is not None and self._policy.devices.get(spec.name) != spec:
            # A re-registering trial brings its device back as it is now. After a restart the actor's
            # constructor re-ran with the devices it was *first* created with, which may be stale;
            # the policy refuses a different spec only while trials hold grants on that device.
            self._policy.register_device(spec)
        grant = self._policy.admit(
            trial_id, device, min_bytes=min_bytes, want_bytes=want_bytes, now=now, priority=priority,
            held_bytes=held_bytes,
        )  # fmt: skip
        self._record(device)
        return grant

    def heartbeat(self, trial_id: str, used_bytes: int) -> Grant:
        now = self._expire()
        grant = self._policy.heartbeat(trial_id, used_bytes, now)
        if grant.known:
            self._record(self._policy.trials[trial_id].device, always=trial_id)
        return grant

    def confirm(self, trial_id: str, grant_bytes: int) -> Grant:
        now = self._expire()
        device = self._policy.trials[trial_id].device if trial_id in self._policy.trials else None
        grant = self._policy.confirm(trial_id, grant_bytes, now)
        if device is not None:
            self._record(device)
        return grant

    def release(self, trial_id: str) -> None:
        now = self._expire()
        trial = self._policy.trials.get(trial_id)
        self._policy.release(trial_id, now)
        if trial is not None:
            self._record(trial.device)

    # -- what observers call

    def status(self, timeline_s: float = 600.0) -> dict[str, Any]:
        self._expire()
        devices = []
        for name, spec in sorted(self._policy.devices.items()):
            trials = [t for t in self._policy.trials.values() if t.device == name]
            devices.append(
                {
                    "device": name,
                    "capacity_bytes": spec.capacity_bytes,
                    "reserve_bytes": spec.reserve_bytes,
                    "free_bytes": self._policy.free_bytes(name),
                    "trials": [
                        {
                            "trial_id": t.trial_id,
                            "grant_bytes": t.grant_bytes,
                            "used_bytes": t.used_bytes,
                            "min_bytes": t.min_bytes,
                            "want_bytes": t.want_bytes,
                            # waiting | running | shrinking (asked, not yet confirmed) | over (used > grant)
                            "state": "over" if t.state != "waiting" and t.used_bytes > t.grant_bytes else t.state,
                        }
                        for t in sorted(trials, key=lambda t: t.seq)
                    ],
                }
            )
        since = time.time() - timeline_s
        return {"devices": devices, "timeline": [dict(e) for e in self._timeline if e["t"] >= since]}

    def pid(self) -> int:
        return os.getpid()

    def incarnation(self) -> str:
        """Changes with every (re)start of the actor."""
        return self._incarnation

    # -- internals

    def _expire(self) -> float:
        now = time.monotonic()
        devices = {t.device for t in self._policy.trials.values()}
        if self._policy.expire(now):
            for device in sorted(devices):
                self._record(device)
        return now

    def _record(self, device: str, always: str | None = None) -> None:
        """Append the trials on `device` whose grant or use changed (and `always`, for its use over
        time). Departures (a last point with grant 0) come first and then changes by how much the
        grant grew, smallest first, so every prefix of the timeline adds up within capacity."""
        t = time.time()
        for gone in [tid for tid, last in self._last.items() if last[0] == device and tid not in self._policy.trials]:
            del self._last[gone]
            self._timeline.append(_point(t, device, gone, 0, 0))
        changed = []
        for trial in self._policy.trials.values():
            point = (trial.grant_bytes, trial.used_bytes)
            last = self._last.get(trial.trial_id)
            if trial.device == device and (last != (device, *point) or trial.trial_id == always):
                changed.append((point[0] - (last[1] if last else 0), trial.trial_id, point))
        for _, trial_id, point in sorted(changed):
            self._last[trial_id] = (device, *point)
            self._timeline.append(_point(t, device, trial_id, *point))


def _point(t: float, device: str, trial_id: str, grant_bytes: int, used_bytes: int) -> dict[str, Any]:
    return {"t": t, "device": device, "trial_id": trial_id, "grant_bytes": grant_bytes, "used_bytes": used_bytes}


def ensure_broker(
    devices: list[DeviceSpec] | tuple[DeviceSpec, ...] = (), config: BrokerConfig | None = None
) -> ActorHandle:
    """The cluster's broker, started if none runs, with `devices` registered (idempotent; a device
    already registered with another capacity or reserve while trials use it is an InputError).
    Needs a connected Ray (`ray.init(...)`). `config` applies only when this call starts the broker."""
    _require_ray()
    handle: Any = (  # Ray's stubs do not type actor methods' .remote
        ray.remote(EdoBroker)
        .options(
            name=BROKER_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,  # two drivers starting at once get the same broker
            max_restarts=-1,  # the memory authority of the cluster: always come back (state rebuilt by trials)
            max_task_retries=0,  # a call during a restart fails fast; clients retry on their own schedule
            num_cpus=0,  # never takes a CPU a trial could use
        )
        .remote(list(devices), config or BrokerConfig())
    )
    for spec in devices:
        ray.get(handle.register_device.remote(spec))  # an existing broker learns them too
    return handle


def get_broker() -> ActorHandle | None:
    """The broker of the connected cluster, or None if none runs."""
    _require_ray()
    try:
        return ray.get_actor(BROKER_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def shutdown_broker() -> bool:
    """Stop the cluster's broker for good; False if none ran."""
    handle = get_broker()
    if handle is None:
        return False
    ray.kill(handle, no_restart=True)
    return True


def read_status(timeline_s: float = 600) -> dict[str, Any] | None:
    """Devices, grants, use and the timeline of the last `timeline_s` seconds, from the connected
    cluster's broker; None when no broker runs. Retries for a few seconds if it is restarting."""
    handle = get_broker()
    if handle is None:
        return None
    deadline = time.monotonic() + 10.0
    while True:
        try:
            status: Any = ray.get(handle.status.remote(timeline_s), timeout=5.0)
            return dict(status)
        except broker_unreachable as exc:
            if time.monotonic() > deadline:
                raise ElastuneError(f"the EDO broker did not answer for 10 s ({type(exc).__name__})") from exc
            time.sleep(0.2)  # a restart takes about a second; ask again shortly


def _require_ray() -> None:
    if not ray.is_initialized():
        raise ElastuneError("not connected to a Ray cluster: call ray.init(address=...) first")
