"""EDO's trial side: acquire a grant, heartbeat, adapt to the grant at step boundaries, release.

    with edo_session(trial_id="t7", device="virtual:0", demand=plan_demand(cfg), probe=probe) as boundary:
        result = train(cfg, probe=probe, boundary=boundary)

- Acquire: admit with the broker, then wait (heartbeating, so the wait holds a lease) until the
  trial is started at or above its minimum; past `timeout_s`, withdraw and raise `EdoError`.
- Heartbeat: a daemon thread sends the highest step peak measured since its last beat, three times
  per heartbeat interval (the broker's `heartbeat_s`), through build, steps and evaluation alike; so
  the broker's load does not grow with the step rate, a stalled beat is covered by the next two, and
  a trial that dies (SIGKILL) simply stops renewing its lease.
- Each step boundary (`EdoBoundary`, the loop's `StepBoundary`; the first is before step 1): read
  the step's peak from the probe
  (training/probe.py, the one seam), then apply what the broker said:
  * a shrink request: re-shape to fit the target: the cached tables' device rows first, then the
    micro-batch (halved, accumulation doubled: the effective batch stays exact). The next step runs
    in the new shape and is measured; once its peak fits, confirm (two-phase: the broker frees the
    memory only then) and hold the process to the new grant. Already fitting: confirm at once.
  * a larger grant: take it (it is already counted by the broker) and grow back toward the
    configured shape where the measured use plus the predicted cost fits, with a wider margin.
- Enforcement: on CUDA the allocator's per-process fraction (set through the probe) raises an OOM
  inside the step; on the virtual device `check` compares the step's peak with the grant before the
  update and raises the OOM itself. Either way the loop's OOM recovery halves the micro-batch and
  redoes the step: only the trial that overran pays, and it does not grow back into the same shape
  until its grant grows.
- Re-shaping follows the pure model in reshape.py: the use of another shape is predicted from the
  use measured now, bytes per sample and bytes per cached row.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ray
import torch
from torch import nn

from elastune.config import RunConfig
from elastune.edo.broker import broker_unreachable, get_broker
from elastune.edo.policy import DeviceSpec, Grant
from elastune.edo.reshape import Shape, Split, ladder
from elastune.embeddings.cached import CachedEmbedding
from elastune.errors import EdoError, InputError
from elastune.memory.overhead import SCREEN_MARGIN
from elastune.training.checkpoint import LoopState
from elastune.training.probe import ElasticProbe

__all__ = ["Demand", "EdoBoundary", "EdoError", "edo_session", "plan_demand"]

BEATS_PER_INTERVAL = 3  # lease renewals per heartbeat interval (the lease is 1.5 intervals by default)
SHRINK_ATTEMPTS = 3  # re-shapes tried before a shrink is confirmed regardless (then enforced)
GROW_MARGIN = 0.05  # growing needs this much room beyond the prediction, shrinking only `headroom`
# plan_demand's margin over the estimate: the screening margin of the virtual device (the most a
# config of the estimator's fit half measured above its prediction, memory/overhead.py), and at
# least 7 MiB: the most a zoo config measured above the virtual device's prediction, in bytes, was
# 7 MiB under its former constant runtime, 5.8 MiB under its model now (zoo, check and blind sets);
# the wider figure is kept
DEMAND_PADDING = round(SCREEN_MARGIN["virtual"] - 1, 6)  # 0.12, not 0.12000000000000011
DEMAND_PADDING_MIN = 7 * 2**20


@dataclass(frozen=True)
class Demand:
    """What a trial asks for. want_bytes: its predicted peak in the configured shape; min_bytes: in
    its smallest shape (micro-batch `min_micro`, cached tables at `min_cache_fraction` of their rows)."""

    want_bytes: int
    min_bytes: int
    min_micro: int = 1
    min_cache_fraction: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.min_bytes <= self.want_bytes:
            raise InputError(f"min_bytes={self.min_bytes}: must be > 0 and <= want_bytes={self.want_bytes}")
        if self.min_micro < 1:
            raise InputError(f"min_micro={self.min_micro}: must be >= 1")
        if not 0.0 <= self.min_cache_fraction <= 1.0:
            raise InputError(f"min_cache_fraction={self.min_cache_fraction}: must be in [0, 1]")


def plan_demand(cfg: RunConfig, *, min_micro: int | None = None, min_cache_fraction: float = 0.25) -> Demand:
    """Price a config's demand with the estimator (memory/estimate.py): its predicted peak as
    configured, and in its smallest shape (by default micro-batch / 8 on the halving ladder, and a
    quarter of the cached rows for the `cached` strategy)."""
    from elastune.memory.estimate import estimate  # lazy: the fake-tensor trace is heavy to import

    halvings = ladder(cfg.batch.micro)
    smallest = min_micro if min_micro is not None else min(m for m in halvings if m * 8 >= cfg.batch.micro)
    if smallest not in halvings:
        raise InputError(f"min_micro={smallest}: must be batch.micro={cfg.batch.micro} halved k times: {halvings}")
    fraction = min_cache_fraction if cfg.embedding.strategy == "cached" else 1.0
    small = cfg.model_copy(
        update={
            "batch": cfg.batch.model_copy(
                update={"micro": smallest, "accum": cfg.batch.accum * cfg.batch.micro // smallest}
            ),
            "embedding": _scaled_cache(cfg, fraction),
        }
    )

    # EDO's device is a GPU, or on CPU the virtual device, whose figures the estimator prices apart.
    # Padded by the screening margin: a trial whose smallest shape measures 1% over a bare
    # estimate has nothing left to shrink and fails. And by at least the virtual device's own
    # spread in bytes (DEMAND_PADDING_MIN): a small trial's tables dominate every shape, so the margin's
    # share of a small estimate is less than that spread at every micro-batch down to 1.
    def priced(c: RunConfig) -> int:
        predicted = estimate(c, virtual=True).peak_bytes
        return predicted + max(int(predicted * DEMAND_PADDING), DEMAND_PADDING_MIN)

    want = priced(cfg)
    return Demand(want, min(priced(small), want), smallest, fraction)


def cache_fraction_for(grant_bytes: int, demand: Demand) -> float:
    """The share of its configured cached rows a trial builds under a grant: all of them where the
    grant holds its want, the demand's smallest share at its minimum, in proportion between. Built
    whole and cut at the first step boundary, a cache would already have overrun the grant while
    the model was built: on CUDA, where the allocator holds a trial to its grant, a failed trial."""
    floor = demand.min_cache_fraction
    if floor >= 1.0 or grant_bytes >= demand.want_bytes:
        return 1.0
    span = demand.want_bytes - demand.min_bytes
    share = (grant_bytes - demand.min_bytes) / span if span > 0 else 0.0
    return min(1.0, max(floor, floor + (1 - floor) * share))


@contextmanager
def edo_session(
    *,
    trial_id: str,
    device: str,
    demand: Demand,
    probe: ElasticProbe,
    priority: float = 1.0,
    timeout_s: float = 300.0,
    headroom: float = 0.1,
    broker: Any = None,
) -> Iterator[EdoBoundary]:
    """Acquire a grant on `device` (waiting up to `timeout_s`), yield the step-boundary hook to pass
    to `train(boundary.config_for_grant(cfg), ..., boundary=...)`, and release the grant on exit,
    exceptions included. The broker is found by name in the connected Ray cluster unless given."""
    handle = broker if broker is not None else get_broker()
    if handle is None:
        raise EdoError("no EDO broker is running on this Ray cluster; the sweep driver starts one with ensure_broker()")
    boundary = EdoBoundary(handle, trial_id, device, demand, probe, priority, headroom)
    boundary.acquire(timeout_s)
    try:
        yield boundary
    finally:
        boundary.close()


class EdoBoundary:
    """One trial's link to the broker and its step-boundary hook (see the module docstring)."""

    def __init__(
        self,
        broker: Any,
        trial_id: str,
        device: str,
        demand: Demand,
        probe: ElasticProbe,
        priority: float,
        headroom: float,
    ) -> None:
        self.trial_id, self.device, self.demand, self.probe = trial_id, device, demand, probe
        self.history: list[dict[str, Any]] = []  # every re-shape, confirm and overrun, for reports and tests
        self._broker, self._priority, self._headroom = broker, priority, headroom
        self._thread: threading.Thread | None = None
        self.heartbeat_s = 5.0  # until the broker tells us its own
        config = self._call("config")
        if config is None:
            raise EdoError("the EDO broker does not answer (restarting?); try again in a few seconds")
        self.heartbeat_s = config.heartbeat_s
        self.beat_s = config.heartbeat_s / BEATS_PER_INTERVAL
        self._spec: DeviceSpec | None = None  # our device's spec, to bring it back after a broker restart
        self._lock = threading.Lock()  # guards what the heartbeat thread and the training thread share:
        self._reply = Grant(trial_id, known=False)  # the broker's latest word
        self._unsent_peak = 0  # the highest step peak not yet sent
        self._epoch = 0  # bumped by each confirm: a heartbeat reply sent before it is stale, dropped
        self._limit = 0  # the grant this process holds itself to (the training thread's view)
        self._stop = threading.Event()
        self._shape: Shape | None = None  # set at the first boundary
        self._caches: list[CachedEmbedding] = []  # the model's cached tables, and their configured rows
        self._cache_rows0: list[int] = []
        self._build_fraction = 1.0  # the share of its configured cached rows the model was built with
        self._verifying: int | None = None  # the target a re-shape is being measured against
        self._attempts = 0
        self._oom_micro: int | None = None  # overran at this micro-batch: do not grow back into it
        self._seen_ooms = 0

    # -- acquire and release

    def config_for_grant(self, cfg: RunConfig) -> RunConfig:
        """`cfg` as this trial builds it under the grant it acquired: a `cached` strategy's cache cut
        to `cache_fraction_for` the grant (the boundaries grow it back as the grant allows)."""
        self._build_fraction = cache_fraction_for(self._limit, self.demand)
        return cfg.model_copy(update={"embedding": _scaled_cache(cfg, self._build_fraction)})

    def acquire(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        reply = self._call(
            "admit", self.trial_id, self.device, self.demand.min_bytes, self.demand.want_bytes, self._priority
        )
        while reply is None or reply.state == "waiting":
            if time.monotonic() > deadline:
                self._call("release", self.trial_id)
                raise EdoError(
                    f"trial {self.trial_id!r}: no memory granted on device {self.device!r} within {timeout_s:g} s "
                    f"(it needs min_bytes={self.demand.min_bytes}); raise the timeout, lower the trial's minimum, "
                    "or run fewer trials per device"
                )
            self._stop.wait(self.beat_s)  # poll the broker; each poll also renews the lease
            reply = self._call("heartbeat", self.trial_id, 0)
            if reply is not None and not reply.known:  # the broker restarted while we waited
                reply = self._admit_again(held=0)
        self._reply, self._limit = reply, reply.grant_bytes
        self._spec = self._call("device_spec", self.device)
        self.probe.set_limit(self._limit)
        self._record("start", None)
        self._thread = threading.Thread(target=self._beat, name=f"edo-heartbeat-{self.trial_id}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.heartbeat_s + 5)
        self._call("release", self.trial_id)  # best effort: if the broker is away, the lease lapses
        self.probe.set_limit(None)

    # -- the loop's hook (StepBoundary)

    def check(self, state: LoopState) -> None:
        if self.probe.enforces_limit:
            return  # the allocator raises inside the step itself
        used = self.probe.window_peak(reset=False)
        if used > self._limit:
            self.probe.window_peak(reset=True)  # counted; the redo is measured afresh
            self._oom_micro = state.micro
            self._record("over", state, used=used)
            raise torch.OutOfMemoryError(
                f"EDO: trial {self.trial_id!r} step {state.step} peaked at {used} bytes, over its grant of "
                f"{self._limit} on {self.device}"
            )

    def at_boundary(self, state: LoopState, model: nn.Module) -> None:
        used = self.probe.window_peak(reset=True)
        with self._lock:
            self._unsent_peak = max(self._unsent_peak, used)
            reply = self._reply
        first = self._shape is None
        if self._shape is None:
            # Before the first step: nothing of a step measured yet (the window held the build), so
            # the configured shape is priced by the demand's prediction.
            self._shape = self._configured_shape(state, model)
            # the want prices the configured shape; a cache built smaller holds that much less
            cut = (self._shape.rows0 - self._shape.rows) * self._shape.row_bytes
            used, self._seen_ooms = int(self.demand.want_bytes - cut), state.oom_retries
        self._note_ooms(state)
        if not reply.known or reply.state == "waiting":
            raise EdoError(
                f"trial {self.trial_id!r} lost its grant on {self.device!r}: its heartbeats stopped for longer than "
                "the broker's lease and the memory went to other trials; lengthen the lease (BrokerConfig.lease_s)"
            )
        if reply.grant_bytes > self._limit:
            self._limit = reply.grant_bytes  # already counted by the broker: safe to use at once
            self.probe.set_limit(self._limit)
            self._oom_micro = None  # the shape that overran may fit now
        if reply.shrink_requested and reply.target_bytes < self._limit:
            self._shrink_toward(reply.target_bytes, state, used)
            return
        self._verifying, self._attempts = None, 0
        # A prediction (first boundary) is a ceiling already; a measurement gets the headroom.
        if used > (self._limit if first else self._limit * (1 - self._headroom)):
            # Close to (or, between checks, over) our own grant: the first boundary of a trial started
            # below its want, or use creeping up. Re-shape before the allocator or `check` must.
            budget = self._limit * (1 - self._headroom)
            fit = self._shape.fit(budget, state.micro, state.accum, used, min_micro=self.demand.min_micro)
            if (fit.micro, fit.rows) < (state.micro, self._shape.rows):
                self._apply(fit, state, "shrink", used)
        else:
            self._grow_within(self._limit, state, used)

    # -- adapting

    def _shrink_toward(self, target: int, state: LoopState, used: int) -> None:
        assert self._shape is not None
        if self._verifying == target and self._attempts and self._shape.last_change is not None:
            self._shape.refit(state.micro, used)  # the last re-shape missed: learn the real slope
        if used <= target * (1 - self._headroom) or self._attempts >= SHRINK_ATTEMPTS:
            self._confirm(target, state, used)
            return
        fit = self._shape.fit(
            target * (1 - self._headroom), state.micro, state.accum, used, min_micro=self.demand.min_micro
        )
        if (fit.micro, fit.rows) == (state.micro, self._shape.rows):
            self._confirm(target, state, used)  # nothing smaller to try: commit, enforcement does the rest
            return
        self._apply(fit, state, "shrink", used)
        self._verifying, self._attempts = target, self._attempts + 1

    def _grow_within(self, limit: int, state: LoopState, used: int) -> None:
        assert self._shape is not None
        if (state.micro, self._shape.rows) == (self._shape.micro0, self._shape.rows0):
            return
        cap = self._oom_micro // 2 if self._oom_micro is not None else None
        budget = limit * (1 - self._headroom - GROW_MARGIN)
        fit = self._shape.fit(budget, state.micro, state.accum, used, max_micro=cap)
        if (fit.micro, fit.rows) > (state.micro, self._shape.rows):
            self._apply(fit, state, "grow", used)

    def _confirm(self, target: int, state: LoopState, used: int) -> None:
        # Hold ourselves to the target first, then tell the broker: if the call fails (restarting),
        # the re-registration carries the lower grant, so no memory is ever counted twice.
        self._limit = target
        self.probe.set_limit(target)
        with self._lock:
            self._epoch += 1  # replies to heartbeats sent before now still show the old grant
            self._unsent_peak = used
            self._reply = Grant(self.trial_id, True, "running", target, target)  # our view until it answers
        reply = self._call("confirm", self.trial_id, target)
        if reply is not None:
            with self._lock:
                self._reply = reply
        self._verifying, self._attempts = None, 0
        self._record("confirm", state, used=used)

    def _configured_shape(self, state: LoopState, model: nn.Module) -> Shape:
        self._caches = [m for m in model.modules() if isinstance(m, CachedEmbedding)]
        # the configured rows, which a cache built at a share of them (config_for_grant) grows back to
        self._cache_rows0 = [min(m.num_rows, round(m.capacity / self._build_fraction)) for m in self._caches]
        row_bytes = [m.device_bytes() / m.capacity if m.capacity else 0.0 for m in self._caches]
        d = self.demand
        return Shape.configured(
            state.micro,
            want_bytes=d.want_bytes,
            min_bytes=d.min_bytes,
            min_micro=d.min_micro,
            cache_rows=sum(self._cache_rows0),
            cache_bytes=int(sum(b * rows for b, rows in zip(row_bytes, self._cache_rows0, strict=True))),
            min_cache_fraction=d.min_cache_fraction,
            built_rows=sum(m.capacity for m in self._caches),
        )

    def _apply(self, to: Split, state: LoopState, event: str, used: int) -> None:
        assert self._shape is not None
        self._shape.change(state.micro, used, to)
        state.micro, state.accum = to.micro, to.accum  # the effective batch stays exact (reshape.split)
        for module, rows0 in zip(self._caches, self._cache_rows0, strict=True):
            module.resize(round(rows0 * to.rows / max(1, self._shape.rows0)))
        if event == "shrink":
            self.probe.trim()  # hand back cached blocks so the next window measures the new shape
        self.probe.window_peak(reset=True)  # the next window is the new shape's alone
        self._record(event, state, used=used)

    def _note_ooms(self, state: LoopState) -> None:
        if state.oom_retries > self._seen_ooms:  # the loop halved the micro-batch after an OOM
            self._oom_micro = state.micro * 2 ** (state.oom_retries - self._seen_ooms)
            self._seen_ooms = state.oom_retries
            self._record("oom", state)

    # -- the broker

    def _beat(self) -> None:
        while not self._stop.wait(self.beat_s):
            with self._lock:
                used, epoch = self._unsent_peak, self._epoch
            reply = self._call("heartbeat", self.trial_id, used)
            if reply is not None and not reply.known:
                reply = self._admit_again(held=self._limit)
            if reply is None:
                continue  # unreachable (restarting?): keep what we hold, try again next beat
            with self._lock:
                if epoch == self._epoch:
                    self._reply, self._unsent_peak = reply, 0

    def _admit_again(self, held: int) -> Grant | None:
        """The broker does not know us (it restarted, or our lease lapsed): re-register with the grant
        we hold and our device's spec, so the broker's state is rebuilt as it was."""
        d = self.demand
        return self._call(
            "admit", self.trial_id, self.device, d.min_bytes, d.want_bytes, self._priority, held, self._spec
        )

    def _call(self, method: str, *args: Any) -> Any:
        """One broker call; None when the broker cannot answer (dead, restarting, slow)."""
        try:
            return ray.get(getattr(self._broker, method).remote(*args), timeout=max(5.0, 2 * self.heartbeat_s))
        except broker_unreachable:
            return None
        except ray.exceptions.RayTaskError:
            if threading.current_thread() is self._thread:
                return None  # the heartbeat thread must live on; a lost grant surfaces at the boundary
            raise

    def _record(self, event: str, state: LoopState | None, used: int | None = None) -> None:
        self.history.append(
            {
                "event": event,
                "step": state.step if state else 0,
                "micro": state.micro if state else None,
                "accum": state.accum if state else None,
                "cache_rows": self._shape.rows if self._shape else None,
                "limit_bytes": self._limit,
                "used_bytes": used,
                "t": time.time(),
            }
        )


def _scaled_cache(cfg: RunConfig, fraction: float) -> Any:
    emb = cfg.embedding
    if emb.strategy != "cached" or fraction >= 1.0:
        return emb
    if emb.cache_rows is not None:
        return emb.model_copy(update={"cache_rows": max(1, int(emb.cache_rows * fraction))})
    from elastune.embeddings.cached import DEFAULT_CACHE_RATIO

    return emb.model_copy(update={"cache_ratio": (emb.cache_ratio or DEFAULT_CACHE_RATIO) * fraction})
