"""EDO's sharing policy: who may hold how much of each device's memory. Pure: no Ray, no torch, no
clock (every event carries `now`), so it is tested exhaustively (tests/unit/test_policy.py runs
thousands of random event sequences against the invariants below). The broker (broker.py) is a thin
actor that holds one `Policy` and calls it.

State: devices (capacity, reserve) and trials (device, minimum to run, want, priority, measured use,
last heartbeat, grant, target). Events: `admit`, `heartbeat` (with the measured peak), `confirm`
(the trial has shrunk), `release`, `expire` (leases not renewed). Output: each trial's `grant` (what
it may use now) and `target` (what the policy wants it to hold; `target < grant` is a shrink request).

The sharing rule (`share`), per device, budget = capacity - reserve:
1. Minimums first. Running trials keep at least their minimum (a running trial is never evicted);
   then waiting trials are admitted in order (higher priority first, then arrival) while their
   minimums fit. The order is strict, no back-filling: a large waiting trial is not starved by a
   stream of small ones arriving after it.
2. Then the slack (budget - sum of minimums) by priority-weighted water-filling, each trial capped at
   its want: every trial gets slack in proportion to its priority; one that reaches its want drops
   out and its unused share is split again among the rest. With equal priorities this is max-min
   fair: a trial that wants little is fully served and the others split the rest evenly. Why: a
   trial's throughput grows with memory but flattens (a larger micro-batch or cache helps less and
   less), so evening out the extra memory loses less total throughput than serving one trial fully;
   priority lets a sweep favour a trial it cares about (e.g. a promising one) without starving others.

Invariants (every event keeps them; `check_invariants` asserts them):
- I1 capacity: reserve + sum of grants <= capacity, on every device, after every event.
- I2 two-phase shrink: a grant decreases only by its trial's own `confirm` (sent at a step boundary,
  once it has shrunk) or to nothing by `release`/`expire`; the policy itself only lowers `target`.
- I3 freed memory is re-granted only after that confirm: grants grow only into free memory
  (budget - sum of grants), and free memory grows only by confirm, release or expire.
- I4 the memory of a finished or expired trial returns to the pool (it leaves the state whole).
- I5 a trial below its minimum is never started: a running trial's grant is >= its minimum, a waiting
  trial holds nothing. Targets respect the same bounds (min <= target <= want for running trials).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elastune.errors import InputError

__all__ = [
    "DeviceSpec",
    "Grant",
    "Policy",
    "TrialState",
    "share",
]

WAITING, RUNNING, SHRINKING = "waiting", "running", "shrinking"


@dataclass(frozen=True)
class DeviceSpec:
    """One device EDO shares: a name unique in the cluster (e.g. "node-1/cuda:0", "virtual:0"), its
    capacity and the reserve never granted (CUDA contexts and library workspaces live outside the
    allocator's limit, so the reserve must cover them: about 0.3-0.5 GiB per co-located trial)."""

    name: str
    capacity_bytes: int
    reserve_bytes: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("device.name='': give each device a name unique in the cluster, e.g. 'virtual:0'")
        if self.capacity_bytes <= 0:
            raise InputError(f"device.capacity_bytes={self.capacity_bytes}: must be > 0 (the device's memory in bytes)")
        if not 0 <= self.reserve_bytes < self.capacity_bytes:
            raise InputError(
                f"device.reserve_bytes={self.reserve_bytes}: must be >= 0 and below capacity_bytes="
                f"{self.capacity_bytes}, or nothing is left to grant"
            )

    @property
    def budget_bytes(self) -> int:
        return self.capacity_bytes - self.reserve_bytes


@dataclass
class TrialState:
    trial_id: str
    device: str
    min_bytes: int  # the least it can run with; never started below it
    want_bytes: int  # what it would use unconstrained (its predicted peak); never granted more
    priority: float
    seq: int  # arrival order: the tie-break among equal priorities
    last_heartbeat: float
    grant_bytes: int = 0  # what it may use now (0 while waiting)
    target_bytes: int = 0  # what the policy wants it to hold; below grant = a shrink request
    used_bytes: int = 0  # its last reported measured peak
    state: str = WAITING


@dataclass(frozen=True)
class Grant:
    """What a trial is told after each of its events."""

    trial_id: str
    known: bool  # False: the policy does not know it (expired, released, or the broker restarted)
    state: str = WAITING
    grant_bytes: int = 0
    target_bytes: int = 0

    @property
    def shrink_requested(self) -> bool:
        return self.state == SHRINKING and self.target_bytes < self.grant_bytes


def share(budget: int, trials: list[TrialState], admit_new: bool = True) -> dict[str, int]:
    """Each admitted trial's target on one device (the sharing rule in the module docstring).

    Running trials are always admitted; waiting ones in order while their minimums fit (none when
    `admit_new` is False). Trials left out get no entry. Targets sum to at most `budget`."""
    running = [t for t in trials if t.state != WAITING]
    waiting = sorted((t for t in trials if t.state == WAITING), key=lambda t: (-t.priority, t.seq))
    admitted, floor = list(running), sum(t.min_bytes for t in running)
    for trial in waiting if admit_new else []:
        if floor + trial.min_bytes > budget:
            break  # strict order: later trials wait behind this one (no starvation of big trials)
        admitted.append(trial)
        floor += trial.min_bytes
    targets = {t.trial_id: t.min_bytes for t in admitted}
    _water_fill(targets, {t.trial_id: t for t in admitted}, budget - floor)
    return targets


def _water_fill(targets: dict[str, int], trials: dict[str, TrialState], slack: int) -> None:
    """Split `slack` by priority, each trial capped at its want; redistribute what capped ones leave."""
    active = [tid for tid in targets if trials[tid].want_bytes > targets[tid]]
    while slack > 0 and active:
        weight = sum(trials[tid].priority for tid in active)
        offers = {tid: slack * trials[tid].priority / weight for tid in active}
        capped = [tid for tid in active if targets[tid] + offers[tid] >= trials[tid].want_bytes]
        if not capped:
            for tid in active:  # floor: the bytes lost to rounding stay free, never over-granted
                targets[tid] += int(offers[tid])
            return
        for tid in capped:
            slack -= trials[tid].want_bytes - targets[tid]
            targets[tid] = trials[tid].want_bytes
        active = [tid for tid in active if tid not in capped]


@dataclass
class Policy:
    """The state machine; each event returns what the trial concerned is told."""

    devices: dict[str, DeviceSpec] = field(default_factory=dict)
    trials: dict[str, TrialState] = field(default_factory=dict)
    lease_s: float = 3.0  # a trial not heard from for this long is gone
    hold_new_until: float = float("-inf")  # until then, admit only re-registrations (after a restart)
    _seq: int = 0

    # -- devices

    def register_device(self, spec: DeviceSpec) -> None:
        known = self.devices.get(spec.name)
        if known is not None and known != spec and any(t.device == spec.name for t in self.trials.values()):
            raise InputError(
                f"device {spec.name!r}: already registered as {known}, with trials on it; a device's "
                "capacity and reserve cannot change under running trials (register it under a new name)"
            )
        self.devices[spec.name] = spec

    def free_bytes(self, device: str) -> int:
        return self.devices[device].budget_bytes - sum(t.grant_bytes for t in self._on(device))

    # -- events

    def admit(
        self,
        trial_id: str,
        device: str,
        *,
        min_bytes: int,
        want_bytes: int,
        now: float,
        priority: float = 1.0,
        held_bytes: int = 0,
    ) -> Grant:
        """A trial asks for memory. `held_bytes` > 0: it re-registers a grant it already holds (the
        broker restarted or its lease lapsed); it gets that grant back if it is still free.
        Admitting a trial the policy knows changes nothing (re-registration is idempotent)."""
        if trial_id in self.trials:
            self.trials[trial_id].last_heartbeat = now
            return self._view(trial_id)
        self._check_demand(trial_id, device, min_bytes, want_bytes, priority)
        self._seq += 1
        trial = TrialState(trial_id, device, min_bytes, max(want_bytes, min_bytes), priority, self._seq, now)
        self.trials[trial_id] = trial
        if min_bytes <= held_bytes <= self.free_bytes(device):
            # Restore what it holds, so a broker restart neither loses nor doubles a grant.
            trial.grant_bytes = trial.target_bytes = held_bytes
            trial.state = RUNNING
        self._reconcile(device, now)
        return self._view(trial_id)

    def heartbeat(self, trial_id: str, used_bytes: int, now: float) -> Grant:
        trial = self.trials.get(trial_id)
        if trial is None:
            return Grant(trial_id, known=False)
        trial.last_heartbeat = now
        trial.used_bytes = max(0, int(used_bytes))
        self._reconcile(trial.device, now)
        return self._view(trial_id)

    def confirm(self, trial_id: str, grant_bytes: int, now: float) -> Grant:
        """The trial has shrunk to at most `grant_bytes` at a step boundary: the second phase of a
        shrink. Only now does its grant drop (never below its target), freeing memory for others.
        A confirm never raises a grant: one that arrives after the target rose above the grant (the
        trial confirmed a shrink the policy has since taken back) leaves it, and the grant grows only
        from free memory, as every grant does (I1)."""
        trial = self.trials.get(trial_id)
        if trial is None:
            return Grant(trial_id, known=False)
        trial.last_heartbeat = now
        trial.grant_bytes = min(trial.grant_bytes, max(int(grant_bytes), trial.target_bytes))
        self._reconcile(trial.device, now)
        return self._view(trial_id)

    def release(self, trial_id: str, now: float) -> None:
        trial = self.trials.pop(trial_id, None)
        if trial is not None:
            self._reconcile(trial.device, now)

    def expire(self, now: float) -> list[str]:
        """Drop every trial whose lease ran out (its process died or hung); its grant returns to the pool."""
        gone = [t for t in self.trials.values() if now - t.last_heartbeat > self.lease_s]
        for trial in gone:
            del self.trials[trial.trial_id]
        for device in sorted({t.device for t in gone}):
            self._reconcile(device, now)
        return [t.trial_id for t in gone]

    # -- views

    def view(self, trial_id: str) -> Grant:
        return self._view(trial_id) if trial_id in self.trials else Grant(trial_id, known=False)

    def check_invariants(self) -> None:
        """I1 and I5 (the others are about transitions; the property tests check those)."""
        for name, spec in self.devices.items():
            on = self._on(name)
            granted = sum(t.grant_bytes for t in on)
            assert spec.reserve_bytes + granted <= spec.capacity_bytes, f"{name}: over capacity"
            assert sum(t.target_bytes for t in on) <= spec.budget_bytes, f"{name}: targets over budget"
            for t in on:
                if t.state == WAITING:
                    assert t.grant_bytes == 0, f"{t.trial_id}: waiting but holds memory"
                else:
                    assert t.min_bytes <= t.grant_bytes, f"{t.trial_id}: running below its minimum"
                    assert t.min_bytes <= t.target_bytes <= t.want_bytes, f"{t.trial_id}: target out of bounds"

    # -- internals

    def _on(self, device: str) -> list[TrialState]:
        return [t for t in self.trials.values() if t.device == device]

    def _view(self, trial_id: str) -> Grant:
        t = self.trials[trial_id]
        return Grant(trial_id, True, t.state, t.grant_bytes, t.target_bytes)

    def _reconcile(self, device: str, now: float) -> None:
        """Move every trial on `device` toward its target: ask shrinkers, start waiters, grow growers.
        Memory is handed out only from what is free now, so I1 holds at every step."""
        on = self._on(device)
        targets = share(self.devices[device].budget_bytes, on, admit_new=now >= self.hold_new_until)
        free = self.free_bytes(device)
        # Waiting trials first (starting one matters more than growing one), then running ones.
        for trial in sorted(on, key=lambda t: (t.state != WAITING, -t.priority, t.seq)):
            target = targets.get(trial.trial_id, 0)
            if trial.state == WAITING:
                if target and free >= trial.min_bytes:
                    trial.grant_bytes = min(target, free)  # started at or above its minimum (I5)
                    free -= trial.grant_bytes
                    trial.state = RUNNING
                trial.target_bytes = target
                continue
            trial.target_bytes = target
            if target > trial.grant_bytes:
                grow = min(target - trial.grant_bytes, free)
                trial.grant_bytes += grow
                free -= grow
            # Below target is a request only: the grant drops when the trial confirms (I2).
            trial.state = SHRINKING if target < trial.grant_bytes else RUNNING

    def _check_demand(self, trial_id: str, device: str, min_bytes: int, want_bytes: int, priority: float) -> None:
        spec = self.devices.get(device)
        if spec is None:
            known = ", ".join(sorted(self.devices)) or "none"
            raise InputError(f"device={device!r}: not registered with the broker (known: {known}); register it first")
        if min_bytes <= 0:
            raise InputError(f"min_bytes={min_bytes}: must be > 0 (the least memory trial {trial_id!r} can run in)")
        if min_bytes > spec.budget_bytes:
            raise InputError(
                f"min_bytes={min_bytes}: trial {trial_id!r} needs more than device {device!r} can ever grant "
                f"(capacity {spec.capacity_bytes} - reserve {spec.reserve_bytes} = {spec.budget_bytes}); "
                "lower its minimum (a smaller micro-batch or cache) or use a larger device"
            )
        if want_bytes <= 0:
            raise InputError(f"want_bytes={want_bytes}: must be > 0 (the trial's predicted peak)")
        if not priority > 0:
            raise InputError(f"priority={priority}: must be > 0 (1.0 is the default)")
