"""EDO's trial side without Ray: the virtual device's measurements, the loop's step-boundary hook,
and the re-shaping rule (cached rows first, then the micro-batch). The broker round trip is in
tests/integration/local_ray/test_edo.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from elastune.config import RunConfig
from elastune.edo.client import Demand
from elastune.edo.reshape import Shape, Split
from elastune.embeddings.cached import CachedEmbedding
from elastune.errors import InputError
from elastune.training.checkpoint import LoopState
from elastune.training.loop import train
from torch import nn

MakeCfg = Callable[..., RunConfig]
MiB = 2**20


_PROBE_SCRIPT = """
import torch
from elastune.training.probe import VirtualProbe
MiB = 2**20
probe = VirtualProbe(capacity_bytes=512 * MiB)
assert (probe.total_bytes(), probe.enforces_limit) == (512 * MiB, False)
torch.ones(2**16).add_(1)  # torch's lazy set-up (its thread pool) before the baseline
probe.reset()
for _ in range(3):
    # 16 MiB blocks: glibc's adaptive threshold would serve the second and third from the heap
    # and keep them resident after free (33 MiB measured without the probe's mallopt).
    block = torch.ones(16 * MiB // 4)  # touched: resident
    del block
first = probe.window_peak()  # the window saw a block; the next one starts from now
small = torch.ones(2 * MiB // 4)
second = probe.window_peak()
del small
assert first > 12 * MiB > second, (first, second)  # other pages come and go (CI: 8.4 MiB for 2 MiB)
assert probe.peak().peak_bytes >= first  # the run's peak spans the windows
probe.set_limit(100 * MiB)
assert probe.limit_bytes() == 100 * MiB
"""


def test_virtual_probe_windows_follow_freed_memory_and_peak_covers_the_run() -> None:
    # The probe measures this whole process's resident set, so the check runs in a fresh process:
    # inside the test runner, memory earlier tests freed (and glibc kept) would serve the blocks.
    proc = subprocess.run([sys.executable, "-c", _PROBE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


class _Resplit:
    """A boundary that halves the micro-batch at step 2 and doubles it back at step 4."""

    def __init__(self, effective_change: bool = False, oom_at: int | None = None) -> None:
        self.effective_change, self.oom_at, self.calls = effective_change, oom_at, 0

    def check(self, state: LoopState) -> None:
        if state.step == self.oom_at:
            self.oom_at = None
            raise torch.OutOfMemoryError("over its grant (test)")

    def at_boundary(self, state: LoopState, model: nn.Module) -> None:
        self.calls += 1
        if state.step == 2:
            state.micro, state.accum = state.micro // 2, state.accum * (1 if self.effective_change else 2)
        elif state.step == 4:
            state.micro, state.accum = state.micro * 2, state.accum // 2


def test_boundary_resplit_keeps_the_math(tiny_cfg: MakeCfg, tmp_path: Path) -> None:
    hooked = _Resplit()
    a = train(tiny_cfg("batch.micro=64", "batch.accum=2", f"checkpoint.path={tmp_path / 'a.ckpt'}"), boundary=hooked)
    b = train(tiny_cfg("batch.micro=64", "batch.accum=2", f"checkpoint.path={tmp_path / 'b.ckpt'}"))
    assert hooked.calls == 6 + 1  # before the first step and after each of the 6
    assert (a.samples, a.effective_batch, a.oom_retries) == (b.samples, 128, 0)
    wa, wb = (torch.load(tmp_path / f, weights_only=False)["model"] for f in ("a.ckpt", "b.ckpt"))
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], atol=1e-5, rtol=0)


def test_boundary_cannot_change_the_effective_batch(tiny_cfg: MakeCfg) -> None:
    with pytest.raises(RuntimeError, match="changed the effective batch 128"):
        train(tiny_cfg("batch.micro=64", "batch.accum=2"), boundary=_Resplit(effective_change=True))


def test_check_over_grant_takes_the_oom_path(tiny_cfg: MakeCfg) -> None:
    result = train(tiny_cfg("batch.micro=64", "batch.accum=2"), boundary=_Resplit(oom_at=3))
    assert result.oom_retries == 1 and result.effective_batch == 128


def _shape(cache_rows: int = 1000) -> Shape:
    cache = CachedEmbedding([1000, 1000], dim=7, capacity=cache_rows)  # 8 floats a row
    # want - min = 64 KiB of samples (48 of micro) + 3/4 of the cache's 32 KB: 1 KiB per sample
    demand = Demand(want_bytes=200_000, min_bytes=200_000 - 48 * 1024 - 24_000, min_micro=16, min_cache_fraction=0.25)
    return Shape.configured(
        64,
        want_bytes=demand.want_bytes,
        min_bytes=demand.min_bytes,
        min_micro=demand.min_micro,
        cache_rows=cache.capacity,
        cache_bytes=cache.device_bytes(),
        min_cache_fraction=demand.min_cache_fraction,
    )


def test_shape_fit_cuts_cached_rows_before_the_micro_batch() -> None:
    shape = _shape()
    assert (shape.row_bytes, shape.sample_bytes) == (32.0, 1024.0)
    used = 100_000
    assert shape.fit(used, 64, 1, used) == Split(64, 1, 1000)  # fits as it is
    assert shape.fit(used - 16_000, 64, 1, used) == Split(64, 1, 500)  # 16 kB less: half the rows, same micro
    fit = shape.fit(used - 40_000, 64, 1, used)  # more than the cache can give
    assert (fit.micro, fit.accum) == (32, 2) and fit.rows >= shape.min_rows == 250
    assert shape.predict(used, 64, fit.micro, fit.rows) <= used - 40_000
    assert shape.fit(1, 64, 1, used, min_micro=16) == Split(16, 4, 250)  # nothing fits: the smallest shape


def test_demand_validates() -> None:
    with pytest.raises(InputError, match=r"min_bytes=10: must be > 0 and <= want_bytes=5"):
        Demand(want_bytes=5, min_bytes=10)
    with pytest.raises(InputError, match=r"min_cache_fraction=2"):
        Demand(want_bytes=5, min_bytes=1, min_cache_fraction=2)


def test_plan_demand_prices_the_configured_and_the_smallest_shape(tiny_cfg: MakeCfg) -> None:
    from elastune.edo.client import plan_demand

    wide = (
        "model.embedding_dim=64",
        "workload_options.bottom_mlp=[64]",
        "workload_options.top_mlp=[64]",
    )  # activations that count
    full = plan_demand(tiny_cfg("batch.micro=1024", *wide))
    assert (full.min_micro, full.min_cache_fraction) == (128, 1.0)  # micro / 8; no cache to shrink
    assert 0 < full.min_bytes < full.want_bytes
    cached = plan_demand(
        tiny_cfg("batch.micro=256", "embedding.strategy=cached", "optimizer.sparse=rowwise_adagrad"), min_micro=64
    )
    assert (cached.min_micro, cached.min_cache_fraction) == (64, 0.25)
    with pytest.raises(InputError, match=r"min_micro=100: must be batch.micro=256 halved"):
        plan_demand(tiny_cfg("batch.micro=256"), min_micro=100)


def test_plan_demand_pads_small_trials_by_the_virtual_devices_spread(tiny_cfg: MakeCfg) -> None:
    # The virtual device's screening margin over the estimate (12%: memory/overhead.py, from the
    # zoo's fit half), but never less than 7 MiB, the virtual device's spread in bytes, which is
    # more than 12% of a trial this small.
    from elastune.edo.client import DEMAND_PADDING_MIN, plan_demand
    from elastune.memory.estimate import estimate

    assert DEMAND_PADDING_MIN == 7 * 2**20
    small, large = tiny_cfg("batch.micro=64"), tiny_cfg("batch.micro=16384")
    predicted = estimate(small, virtual=True).peak_bytes
    assert predicted * 0.12 < DEMAND_PADDING_MIN
    assert plan_demand(small).want_bytes == predicted + DEMAND_PADDING_MIN
    predicted = estimate(large, virtual=True).peak_bytes
    assert predicted * 0.12 > DEMAND_PADDING_MIN
    assert plan_demand(large).want_bytes == predicted + int(predicted * 0.12)


def test_a_cache_is_built_as_large_as_its_grant_holds() -> None:
    """Between the smallest shape's minimum and the want, a trial builds that share of its cached
    rows (a quarter at the minimum here), never more than all of them; a demand without a cache
    (fraction 1) builds everything whatever the grant."""
    from elastune.edo.client import cache_fraction_for

    cached = Demand(want_bytes=1000, min_bytes=200, min_micro=8, min_cache_fraction=0.25)
    assert cache_fraction_for(200, cached) == 0.25
    assert cache_fraction_for(600, cached) == pytest.approx(0.25 + 0.75 * 0.5)
    assert cache_fraction_for(1000, cached) == 1.0
    assert cache_fraction_for(5000, cached) == 1.0
    assert cache_fraction_for(100, cached) == 0.25  # below the minimum: never under the smallest share
    plain = Demand(want_bytes=1000, min_bytes=200, min_micro=8, min_cache_fraction=1.0)
    assert cache_fraction_for(200, plain) == 1.0
