"""EDO policy invariants over thousands of random event sequences (hypothesis stateful testing).

The machine below drives a `Policy` with random admits, heartbeats, confirms (full and partial),
releases, clock advances and lease expiries on two devices, and after every event checks the
invariants written in policy.py: I1 capacity, I2 two-phase shrink, I3 re-grant only after a
confirm, I4 release/expiry returns memory, I5 never started below the minimum.
"""

from __future__ import annotations

import pytest
from elastune.edo.policy import DeviceSpec, Policy, TrialState, share
from elastune.errors import InputError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

DEVICES = [DeviceSpec("d0", capacity_bytes=1000, reserve_bytes=100), DeviceSpec("d1", capacity_bytes=640)]
LEASE = 3.0
TRIAL_IDS = [f"t{i}" for i in range(8)]


class PolicyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.policy = Policy(lease_s=LEASE)
        for spec in DEVICES:
            self.policy.register_device(spec)
        self.now = 0.0
        self.device_of: dict[str, str] = {}  # every trial ever admitted (removed ones included)

    # -- a snapshot before each event, compared after it

    def _grants(self) -> dict[str, int]:
        return {tid: t.grant_bytes for tid, t in self.policy.trials.items()}

    def _free(self) -> dict[str, int]:
        return {d.name: self.policy.free_bytes(d.name) for d in DEVICES}

    def _after(self, before: dict[str, int], free_before: dict[str, int], actor: str | None, kind: str) -> None:
        after = self._grants()
        freed = dict.fromkeys(free_before, 0)
        for tid, grant in before.items():
            if tid not in after:
                # I4: only release/expiry removes a trial, and its whole grant leaves with it.
                assert kind in ("release", "expire"), f"{tid} vanished on {kind}"
                freed[self.device_of[tid]] += grant
            elif after[tid] < grant:
                # I2: a grant shrinks only by its own trial's confirm.
                assert kind == "confirm" and tid == actor, f"{tid}'s grant dropped on {kind} by {actor}"
                freed[self.device_of[tid]] += grant - after[tid]
        for device in free_before:
            grown = sum(
                after[tid] - before.get(tid, 0)
                for tid in after
                if self.device_of[tid] == device and after[tid] > before.get(tid, 0)
            )
            # I3: what others gained came from memory that was free, or freed by this very event.
            assert grown <= free_before[device] + freed[device], f"{device}: re-granted memory not yet freed"

    # -- events

    @rule(
        tid=st.sampled_from(TRIAL_IDS),
        device=st.sampled_from([d.name for d in DEVICES]),
        min_bytes=st.integers(1, 400),
        extra=st.integers(0, 500),
        priority=st.sampled_from([0.5, 1.0, 1.0, 2.0]),
        held=st.integers(0, 600),
    )
    def admit(self, tid: str, device: str, min_bytes: int, extra: int, priority: float, held: int) -> None:
        budget = next(d.budget_bytes for d in DEVICES if d.name == device)
        if min_bytes > budget:
            with pytest.raises(InputError, match="min_bytes"):
                self.policy.admit(tid, device, min_bytes=min_bytes, want_bytes=min_bytes, now=self.now)
            return
        known = tid in self.policy.trials
        if not known:
            self.device_of[tid] = device
        before, free = self._grants(), self._free()
        grant = self.policy.admit(
            tid,
            device,
            min_bytes=min_bytes,
            want_bytes=min_bytes + extra,
            now=self.now,
            priority=priority,
            held_bytes=held,
        )
        assert grant.known
        self._after(before, free, tid, "admit")
        if known:  # idempotent: a second admit changes nobody's grant
            assert self._grants() == before

    @precondition(lambda self: self.policy.trials)
    @rule(data=st.data(), used=st.integers(0, 800))
    def heartbeat(self, data: st.DataObject, used: int) -> None:
        tid = data.draw(st.sampled_from(sorted(self.policy.trials)))
        before, free = self._grants(), self._free()
        self.policy.heartbeat(tid, used, self.now)
        self._after(before, free, tid, "heartbeat")

    @precondition(lambda self: any(t.target_bytes < t.grant_bytes for t in self.policy.trials.values()))
    @rule(data=st.data(), partial=st.booleans())
    def confirm(self, data: st.DataObject, partial: bool) -> None:
        shrinking = sorted(tid for tid, t in self.policy.trials.items() if t.target_bytes < t.grant_bytes)
        tid = data.draw(st.sampled_from(shrinking))
        trial = self.policy.trials[tid]
        to = (trial.grant_bytes + trial.target_bytes) // 2 if partial else trial.target_bytes
        before, free = self._grants(), self._free()
        self.policy.confirm(tid, to, self.now)
        self._after(before, free, tid, "confirm")
        assert self.policy.trials[tid].grant_bytes <= max(to, self.policy.trials[tid].target_bytes)

    @precondition(lambda self: self.policy.trials)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(sorted(self.policy.trials)))
        before, free = self._grants(), self._free()
        self.policy.release(tid, self.now)
        assert tid not in self.policy.trials
        self._after(before, free, tid, "release")

    @rule(dt=st.sampled_from([0.1, 0.5, 1.0, 2.0, 4.0]))
    def advance_and_expire(self, dt: float) -> None:
        self.now += dt
        before, free = self._grants(), self._free()
        stale = {tid for tid, t in self.policy.trials.items() if self.now - t.last_heartbeat > LEASE}
        gone = self.policy.expire(self.now)
        assert set(gone) == stale
        assert not stale & set(self.policy.trials)
        self._after(before, free, None, "expire")

    @rule()
    def settle(self) -> None:
        """Every trial confirms its target and heartbeats: then nobody is left short (no deadlock)."""
        for _ in range(len(self.policy.trials) + 1):
            for tid, t in list(self.policy.trials.items()):
                if t.target_bytes < t.grant_bytes:
                    self.policy.confirm(tid, t.target_bytes, self.now)
            for tid in list(self.policy.trials):
                self.policy.heartbeat(tid, 0, self.now)
        for t in self.policy.trials.values():
            if t.target_bytes:
                assert t.grant_bytes == t.target_bytes, f"{t.trial_id} stuck at {t.grant_bytes} < {t.target_bytes}"

    @invariant()
    def state_invariants(self) -> None:
        self.policy.check_invariants()  # I1, I5


# 400 sequences of up to 30 events, ~7 s here (1500 took 26 s of the suite's 10-minute budget);
# raise max_examples locally for a deeper search when changing the policy.
PolicyMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
)
TestPolicyMachine = PolicyMachine.TestCase


# -- the sharing rule on its own


def _trial(
    tid: str, min_bytes: int, want: int, priority: float = 1.0, running: bool = False, seq: int = 0
) -> TrialState:
    t = TrialState(tid, "d", min_bytes, want, priority, seq, 0.0)
    t.state = "running" if running else "waiting"
    return t


trial_lists = st.lists(
    st.tuples(st.integers(1, 300), st.integers(0, 400), st.sampled_from([0.5, 1.0, 3.0]), st.booleans()),
    max_size=6,
)


@settings(max_examples=800, deadline=None)
@given(budget=st.integers(1, 1500), specs=trial_lists)
def test_share_respects_bounds_and_budget(budget: int, specs: list[tuple[int, int, float, bool]]) -> None:
    trials = [_trial(f"t{i}", m, m + e, p, False, i) for i, (m, e, p, _) in enumerate(specs)]
    targets = share(budget, trials)
    assert sum(targets.values()) <= budget
    for t in trials:
        if t.trial_id in targets:
            assert t.min_bytes <= targets[t.trial_id] <= t.want_bytes
    # Strict order: the admitted ones are a prefix of the waiting order.
    order = [t.trial_id for t in sorted(trials, key=lambda t: (-t.priority, t.seq))]
    assert order[: len(targets)] == [tid for tid in order if tid in targets]
    # Work-conserving: memory is left over only when everyone admitted has its want, or when the
    # next trial's minimum does not fit (up to rounding, a byte per trial).
    if len(targets) == len(trials):
        left = budget - sum(targets.values())
        assert left <= len(trials) or all(targets[t.trial_id] == t.want_bytes for t in trials)


def test_share_minimums_first_then_slack_max_min_fair() -> None:
    small, big = _trial("small", 100, 150, seq=1), _trial("big", 100, 900, seq=2)
    # Slack 400: max-min fair gives "small" its whole extra 50, "big" the other 350.
    assert share(600, [small, big]) == {"small": 150, "big": 450}


def test_share_priority_weights_the_slack() -> None:
    a, b = _trial("a", 100, 1000, priority=1.0, seq=1), _trial("b", 100, 1000, priority=3.0, seq=2)
    assert share(600, [a, b]) == {"a": 200, "b": 400}


def test_share_never_evicts_a_running_trial_and_does_not_backfill() -> None:
    running = _trial("r", 300, 500, running=True, seq=1)
    big = _trial("big", 400, 400, seq=2)
    small = _trial("small", 50, 50, seq=3)
    # big does not fit beside r's minimum; small would, but must wait behind big (no starvation).
    assert share(600, [running, big, small]) == {"r": 500}


# -- transitions spelled out


def test_two_phase_shrink_then_regrant() -> None:
    p = Policy(lease_s=LEASE)
    p.register_device(DeviceSpec("d", 1000))
    assert p.admit("a", "d", min_bytes=200, want_bytes=1000, now=0).grant_bytes == 1000
    b = p.admit("b", "d", min_bytes=200, want_bytes=1000, now=0)
    assert (b.state, b.grant_bytes) == ("waiting", 0)  # nothing free until "a" confirms
    a = p.heartbeat("a", 900, now=1)
    assert (a.state, a.grant_bytes, a.target_bytes) == ("shrinking", 1000, 500)
    p.confirm("a", 500, now=1)
    assert (p.view("a").grant_bytes, p.view("b").grant_bytes, p.view("b").state) == (500, 500, "running")
    p.release("b", now=2)
    assert p.view("a").grant_bytes == 1000  # a finished trial's memory goes back to the one left


def test_restart_hold_admits_only_re_registrations() -> None:
    p = Policy(lease_s=LEASE, hold_new_until=5.0)
    p.register_device(DeviceSpec("d", 1000))
    assert p.admit("new", "d", min_bytes=100, want_bytes=600, now=1).state == "waiting"
    old = p.admit("old", "d", min_bytes=100, want_bytes=700, now=1, held_bytes=700)
    assert (old.state, old.grant_bytes) == ("running", 700)
    assert p.heartbeat("new", 0, now=6).grant_bytes > 0  # the hold is over


def test_bad_demands_name_the_field() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000, reserve_bytes=200))
    with pytest.raises(InputError, match=r"min_bytes=900: .*capacity 1000 - reserve 200 = 800"):
        p.admit("t", "d", min_bytes=900, want_bytes=900, now=0)
    with pytest.raises(InputError, match=r"device='nope': not registered"):
        p.admit("t", "nope", min_bytes=1, want_bytes=1, now=0)
    with pytest.raises(InputError, match=r"reserve_bytes=1000"):
        DeviceSpec("d", 1000, reserve_bytes=1000)
