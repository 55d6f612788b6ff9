"""EDO policy invariants over thousands of random event sequences (hypothesis stateful testing).

The machine below drives a `Policy` with random admits, heartbeats, confirms (full and partial),
releases, clock advances and lease expiries on two devices, and after every event checks the
invariants written in policy.py: I1 capacity, I2 two-phase shrink, I3 re-grant only after a
confirm, I4 release/expiry returns memory, I5 never started below the minimum.
"""

from __future__ import annotations

import re

import pytest
from elastune.edo.policy import DeviceSpec, Grant, Policy, TrialState, share
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
    @rule(data=st.data(), to=st.integers(0, 1000))
    def stale_confirm(self, data: st.DataObject, to: int) -> None:
        """A confirm of any amount from any trial, as one that crossed a changed target arrives."""
        tid = data.draw(st.sampled_from(sorted(self.policy.trials)))
        before, free = self._grants(), self._free()
        self.policy.confirm(tid, to, self.now)
        self._after(before, free, tid, "confirm")

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


# -- boundaries and messages, each expected value worked out by hand (what bench/mutation.py found
# the tests above let through: a comparison one off, an argument dropped, a message lost)


def test_a_trial_whose_minimum_is_the_whole_budget_is_admitted() -> None:
    assert share(600, [_trial("a", 600, 600)]) == {"a": 600}  # 0 + 600 <= 600: it fits exactly
    p = Policy()
    p.register_device(DeviceSpec("d", 1000, reserve_bytes=400))
    assert p.admit("a", "d", min_bytes=600, want_bytes=600, now=0) == Grant("a", True, "running", 600, 600)


def test_one_byte_of_slack_is_handed_out() -> None:
    assert share(101, [_trial("t", 100, 200)]) == {"t": 101}  # slack 1: min 100 + 1


def test_a_share_that_reaches_a_want_exactly_caps_it_despite_rounding() -> None:
    # Slack 9 over three equal priorities is 3 each, and "a" wants exactly 3 more. With priorities
    # of 0.1 its offer is 9 x 0.1 / 0.3 = 2.9999999999999996 in floating point: it still reaches the
    # want (100 + 2.9999999999999996 == 103.0), so "a" is capped at 103 and the other two split the 6
    # left. Were it not capped, every share would be floored to 2 and 3 bytes left idle.
    trials = [
        _trial("a", 100, 103, 0.1, seq=1),
        _trial("b", 100, 10**6, 0.1, seq=2),
        _trial("c", 100, 10**6, 0.1, seq=3),
    ]
    assert share(309, trials) == {"a": 103, "b": 103, "c": 103}


def test_device_specs_say_what_is_wrong() -> None:
    with pytest.raises(
        InputError, match=r"^device\.name='': give each device a name unique in the cluster, e\.g\. 'virtual:0'$"
    ):
        DeviceSpec("", 1000)
    with pytest.raises(InputError, match=r"^device\.capacity_bytes=0: must be > 0 \(the device's memory in bytes\)$"):
        DeviceSpec("d", 0)
    assert DeviceSpec("d", 1).budget_bytes == 1  # one byte is a device (1 - 0 reserve)


def test_a_device_cannot_change_under_its_trials() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.register_device(DeviceSpec("e", 1000))
    p.register_device(DeviceSpec("d", 2000))  # no trials on it yet: it may change
    assert p.devices["d"].capacity_bytes == 2000
    p.admit("t", "d", min_bytes=100, want_bytes=100, now=0)
    p.register_device(DeviceSpec("d", 2000))  # the same spec again changes nothing: allowed
    p.register_device(DeviceSpec("e", 500))  # a trial on d does not pin e
    assert p.devices["e"].capacity_bytes == 500
    message = (
        "device 'd': already registered as DeviceSpec(name='d', capacity_bytes=2000, reserve_bytes=0), with trials "
        "on it; a device's capacity and reserve cannot change under running trials (register it under a new name)"
    )
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        p.register_device(DeviceSpec("d", 1000))


def test_bad_demands_say_exactly_what_to_change() -> None:
    with pytest.raises(
        InputError, match=r"^device='d': not registered with the broker \(known: none\); register it first$"
    ):
        Policy().admit("t", "d", min_bytes=1, want_bytes=1, now=0)
    p = Policy()
    p.register_device(DeviceSpec("e", 1000, reserve_bytes=200))
    p.register_device(DeviceSpec("d", 1000))
    with pytest.raises(
        InputError, match=r"^device='x': not registered with the broker \(known: d, e\); register it first$"
    ):
        p.admit("t", "x", min_bytes=1, want_bytes=1, now=0)
    with pytest.raises(InputError, match=r"^min_bytes=0: must be > 0 \(the least memory trial 't' can run in\)$"):
        p.admit("t", "d", min_bytes=0, want_bytes=1, now=0)
    over = (
        "min_bytes=801: trial 't' needs more than device 'e' can ever grant (capacity 1000 - reserve 200 = 800); "
        "lower its minimum (a smaller micro-batch or cache) or use a larger device"
    )
    with pytest.raises(InputError, match=f"^{re.escape(over)}$"):
        p.admit("t", "e", min_bytes=801, want_bytes=801, now=0)
    with pytest.raises(InputError, match=r"^want_bytes=0: must be > 0 \(the trial's predicted peak\)$"):
        p.admit("t", "d", min_bytes=1, want_bytes=0, now=0)
    with pytest.raises(InputError, match=r"^priority=0: must be > 0 \(1\.0 is the default\)$"):
        p.admit("t", "d", min_bytes=1, want_bytes=1, now=0, priority=0)
    with pytest.raises(InputError, match=r"^priority=nan: must be > 0"):
        p.admit("t", "d", min_bytes=1, want_bytes=1, now=0, priority=float("nan"))
    assert not p.trials  # nothing refused was kept


def test_the_default_priority_is_one() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("a", "d", min_bytes=100, want_bytes=1000, now=0)  # alone: all 1000
    p.admit("b", "d", min_bytes=100, want_bytes=1000, now=0, priority=1.0)
    p.confirm("a", 500, now=0)
    # Equal priorities split the slack 1000 - 200 evenly: 100 + 400 each.
    assert (p.view("a").grant_bytes, p.view("b").grant_bytes) == (500, 500)


def test_a_new_trial_holds_nothing_during_the_restart_hold() -> None:
    p = Policy(hold_new_until=5.0)
    p.register_device(DeviceSpec("d", 1000))
    # min_bytes 1: a trial that re-registers nothing (held 0) is new, however small its minimum
    assert p.admit("new", "d", min_bytes=1, want_bytes=10, now=1) == Grant("new", True, "waiting", 0, 0)
    # The hold ends at 5.0 itself: a heartbeat then starts it (min 1 + the whole slack, capped at 10).
    assert p.heartbeat("new", 0, now=5.0) == Grant("new", True, "running", 10, 10)


def test_a_re_registered_grant_at_its_bounds_is_restored() -> None:
    p = Policy(hold_new_until=5.0)
    p.register_device(DeviceSpec("d", 1000))
    # held == min_bytes: restored; then grown to its want (800) from the free 700
    assert p.admit("a", "d", min_bytes=300, want_bytes=800, now=1, held_bytes=300) == Grant(
        "a", True, "running", 800, 800
    )
    # held == what is free (1000 - 800 = 200): restored too
    assert p.admit("b", "d", min_bytes=100, want_bytes=200, now=1, held_bytes=200) == Grant(
        "b", True, "running", 200, 200
    )


def test_equal_priorities_wait_in_arrival_order() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("r", "d", min_bytes=800, want_bytes=1000, now=0)  # alone: 1000
    p.admit("a", "d", min_bytes=200, want_bytes=200, now=0)  # fits beside r's minimum: r is asked to 800
    p.admit("b", "d", min_bytes=200, want_bytes=200, now=0)  # 800 + 200 + 200 > 1000: waits behind a
    p.confirm("r", 800, now=0)
    assert (p.view("a").state, p.view("a").grant_bytes, p.view("b").state) == ("running", 200, "waiting")


def test_the_higher_priority_waiter_starts_first() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("c", "d", min_bytes=100, want_bytes=1000, now=0)  # alone: 1000
    p.admit("lo", "d", min_bytes=300, want_bytes=300, now=0, priority=1.0)
    p.admit("hi", "d", min_bytes=300, want_bytes=300, now=0, priority=3.0)
    # Targets: c 100 + (1000 - 700) = 400, lo 300, hi 300. c confirms 700: 300 free, room for one.
    p.confirm("c", 700, now=0)
    assert (p.view("hi").state, p.view("hi").grant_bytes, p.view("lo").state) == ("running", 300, "waiting")


def test_starting_a_waiter_comes_before_growing_a_runner() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("c", "d", min_bytes=100, want_bytes=1000, now=0)  # 1000
    p.admit("a", "d", min_bytes=100, want_bytes=1000, now=0)  # targets 500 / 500, waits
    p.confirm("c", 800, now=0)  # 200 free: a starts with them (target 500)
    p.admit("b", "d", min_bytes=200, want_bytes=200, now=0)  # targets: c 400, a 400, b 200; 0 free
    p.confirm("c", 600, now=0)  # 200 free: b could start, or a grow by 200; b starts
    assert p.view("b") == Grant("b", True, "running", 200, 200)
    assert p.view("a") == Grant("a", True, "running", 200, 400)


def test_a_waiter_starts_when_what_is_free_is_exactly_its_minimum() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("c", "d", min_bytes=100, want_bytes=1000, now=0)
    p.admit("b", "d", min_bytes=500, want_bytes=500, now=0)  # targets: c 500, b 500
    p.confirm("c", 500, now=0)  # 500 free: exactly b's minimum
    assert p.view("b") == Grant("b", True, "running", 500, 500)


def test_waiters_started_together_each_take_from_what_is_left() -> None:
    p = Policy(hold_new_until=5.0)
    p.register_device(DeviceSpec("d", 1000))
    p.admit("x", "d", min_bytes=100, want_bytes=100, now=1)
    p.admit("y", "d", min_bytes=100, want_bytes=900, now=1)
    p.heartbeat("x", 0, now=5)  # the hold over: both start, x with 100, y with the 900 left
    assert (p.view("x").grant_bytes, p.view("y").grant_bytes) == (100, 900)


def test_a_runner_grows_to_its_target_and_no_further() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("a", "d", min_bytes=100, want_bytes=600, now=0)  # alone: its want, 600
    p.admit("c", "d", min_bytes=500, want_bytes=500, now=0)  # the slack 400 all to a (c is at its want): a 500
    p.confirm("a", 500, now=0)  # c starts with the 500 freed
    p.release("c", now=1)  # 500 free: a grows by 100, to its want, and no further
    assert p.view("a") == Grant("a", True, "running", 600, 600)


def test_runners_growing_in_one_step_share_only_what_is_free() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("s", "d", min_bytes=100, want_bytes=1000, now=0)  # 1000
    p.admit("a", "d", min_bytes=100, want_bytes=1000, now=0)  # targets 500 / 500
    p.confirm("s", 800, now=0)  # 200 free: a starts with them
    p.admit("b", "d", min_bytes=100, want_bytes=1000, now=0)  # slack 700 / 3: 333 each (a byte lost to rounding)
    p.confirm("s", 700, now=0)  # 100 free: b starts with them
    # s confirms 500: 200 free. a (first in arrival order) grows by the 133 it lacks, b by the 67 left.
    p.confirm("s", 500, now=0)
    assert (p.view("a").grant_bytes, p.view("b").grant_bytes) == (333, 167)
    p.check_invariants()


def test_a_confirm_never_drops_a_grant_below_its_target() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("a", "d", min_bytes=100, want_bytes=1000, now=0)
    p.admit("b", "d", min_bytes=100, want_bytes=1000, now=0)  # a's target 500
    assert p.confirm("a", 100, now=0) == Grant("a", True, "running", 500, 500)


def test_a_confirm_never_raises_a_grant_past_what_is_free() -> None:
    # Found by mutation testing: a confirm used to set the grant to at least the target, so a trial
    # running below its target (waiting for another to shrink) that confirmed was handed its target
    # at once, memory that was not free: 800 + 500 > 1000 here, invariant I1 broken.
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("a", "d", min_bytes=100, want_bytes=1000, now=0)  # 1000
    p.admit("b", "d", min_bytes=100, want_bytes=1000, now=0)  # targets 500 / 500
    p.confirm("a", 800, now=0)  # 200 free: b starts with them, below its target
    assert p.confirm("b", 500, now=0) == Grant("b", True, "running", 200, 500)  # a stale confirm: no change
    p.check_invariants()
    p.confirm("a", 500, now=0)  # now the memory is free: b grows to its target
    assert p.view("b") == Grant("b", True, "running", 500, 500)


def test_heartbeats_record_the_measured_peak() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("a", "d", min_bytes=100, want_bytes=100, now=0)
    p.heartbeat("a", 700, now=1)
    assert p.trials["a"].used_bytes == 700
    p.heartbeat("a", -5, now=2)  # a nonsense reading counts as nothing measured
    assert p.trials["a"].used_bytes == 0


def test_an_unknown_trial_is_told_so() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    gone = Grant("ghost", known=False)
    assert p.heartbeat("ghost", 0, now=0) == gone
    assert p.confirm("ghost", 0, now=0) == gone
    assert p.view("ghost") == gone
    p.release("ghost", now=0)  # nothing to release: no error
    p.admit("a", "d", min_bytes=100, want_bytes=300, now=0)
    assert p.view("a") == Grant("a", True, "running", 300, 300)


def test_a_lease_runs_out_only_after_lease_s_and_any_event_renews_it() -> None:
    p = Policy(lease_s=3.0)
    p.register_device(DeviceSpec("d", 1000))
    for tid in ("a", "b", "c", "d"):
        p.admit(tid, "d", min_bytes=100, want_bytes=100, now=0)
    p.admit("b", "d", min_bytes=100, want_bytes=100, now=2)  # a re-registration renews b's lease
    p.confirm("c", 100, now=2)  # so does a confirm
    p.heartbeat("d", 0, now=2)  # and a heartbeat
    assert p.expire(3.0) == []  # a heard from 3.0 ago: not more than the lease
    assert p.expire(3.5) == ["a"]
    assert p.expire(5.5) == ["b", "c", "d"]


def test_check_invariants_catches_a_grant_in_the_reserve() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000, reserve_bytes=100))
    p.admit("a", "d", min_bytes=100, want_bytes=900, now=0)  # the whole budget, 900
    p.check_invariants()
    p.trials["a"].grant_bytes = 901  # one byte of the reserve: 100 + 901 > 1000
    with pytest.raises(AssertionError, match="d: over capacity"):
        p.check_invariants()


def test_check_invariants_catches_a_waiting_trial_that_holds_memory() -> None:
    p = Policy()
    p.register_device(DeviceSpec("d", 1000))
    p.admit("a", "d", min_bytes=600, want_bytes=600, now=0)
    p.admit("w", "d", min_bytes=500, want_bytes=500, now=0)  # 600 + 500 > 1000: waits, holding nothing
    p.check_invariants()
    p.trials["w"].grant_bytes = 1  # 601 is within capacity, but w is waiting
    with pytest.raises(AssertionError, match="w: waiting but holds memory"):
        p.check_invariants()
