"""EDO's re-shape model (edo/reshape.py): worked examples with their figures computed by hand, then
random shapes, budgets and measurements (hypothesis): the effective batch is kept exactly, the
result fits the budget wherever some shape does (and is the largest that does), and a larger budget
never gives a smaller shape.

The properties judge the module with this file's own halving ladder and memory model (`halvings`,
`use`: the module docstring's formula), never with its `ladder()` or `Shape.predict()`: a test that
asks the code under test for its expected values passes whatever that code computes."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from elastune.edo.reshape import Shape, Split, ladder, split
from hypothesis import given, settings
from hypothesis import strategies as st


def halvings(micro: int) -> list[int]:
    """micro, micro/2, ... while it halves exactly, largest first (the ladder, written out here)."""
    out = [micro]
    while out[-1] % 2 == 0:
        out.append(out[-1] // 2)
    return out


def use(shape: Shape, used: int, micro_now: int, micro: int, rows: int) -> float:
    """The module docstring's model: used + (micro - micro now) x bytes per sample + (rows - rows now)
    x bytes per row (same order of operations as the module, so the floating point agrees)."""
    return used + (micro - micro_now) * shape.sample_bytes + (rows - shape.rows) * shape.row_bytes


@dataclass(frozen=True)
class Case:
    shape: Shape
    micro: int  # the micro-batch running now (on the configured one's ladder)
    accum: int
    used: int  # measured at (micro, shape.rows)
    min_micro: int
    max_micro: int | None

    def candidates(self) -> list[int]:
        top = self.shape.micro0 if self.max_micro is None else min(self.shape.micro0, self.max_micro)
        return [m for m in halvings(self.shape.micro0) if self.min_micro <= m <= top]

    def fits(self, micro: int, rows: int, budget: float) -> bool:
        return use(self.shape, self.used, self.micro, micro, rows) <= budget

    def fit(self, budget: float) -> Split:
        return self.shape.fit(budget, self.micro, self.accum, self.used, self.min_micro, self.max_micro)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    micro0 = draw(st.integers(1, 48)) * 2 ** draw(st.integers(0, 12))
    accum0 = draw(st.integers(1, 8))
    micro = draw(st.sampled_from(halvings(micro0)))
    rows0 = draw(st.integers(0, 5000))
    min_rows = int(rows0 * draw(st.floats(0.0, 1.0)))
    shape = Shape(
        micro0=micro0,
        micro_floor=halvings(micro0)[-1],
        rows0=rows0,
        rows=draw(st.integers(min_rows, rows0)),
        min_rows=min_rows,
        row_bytes=draw(st.floats(0.5, 2**16)) if rows0 else 0.0,
        sample_bytes=draw(st.floats(1.0, 2**20)),
    )
    return Case(
        shape,
        micro,
        micro0 * accum0 // micro,
        used=draw(st.integers(0, 2**34)),
        min_micro=draw(st.integers(1, micro0)),  # on the ladder or not: a Demand may say either
        max_micro=draw(st.none() | st.integers(1, micro0)),
    )


budgets = st.floats(-(2**30), 2**35, allow_nan=False)


@settings(max_examples=2000, deadline=None)
@given(case=cases(), budget=budgets)
def test_the_effective_batch_is_kept_exactly(case: Case, budget: float) -> None:
    fit = case.fit(budget)
    assert fit.micro in halvings(case.shape.micro0)
    assert fit.micro * fit.accum == case.micro * case.accum
    assert case.shape.min_rows <= fit.rows <= case.shape.rows0


@settings(max_examples=2000, deadline=None)
@given(case=cases(), budget=budgets)
def test_the_result_fits_wherever_some_shape_does_and_is_the_largest(case: Case, budget: float) -> None:
    fit = case.fit(budget)
    # The fewest rows are the cheapest (row_bytes >= 0): a micro-batch fits if it fits with those.
    fitting = [m for m in case.candidates() if case.fits(m, case.shape.min_rows, budget)]
    if not fitting:
        return
    assert case.fits(fit.micro, fit.rows, budget)
    assert fit.micro == max(fitting)  # the largest micro-batch that fits
    assert fit.rows == case.shape.rows0 or not case.fits(fit.micro, fit.rows + 1, budget)  # then the most rows


@settings(max_examples=2000, deadline=None)
@given(case=cases(), budgets=st.tuples(budgets, budgets))
def test_a_larger_budget_never_gives_a_smaller_shape(case: Case, budgets: tuple[float, float]) -> None:
    low, high = sorted(budgets)
    smaller, larger = case.fit(low), case.fit(high)
    assert (smaller.micro, smaller.rows) <= (larger.micro, larger.rows)


def test_the_ladder_halves_while_it_halves_exactly() -> None:
    assert ladder(48) == [48, 24, 12, 6, 3]
    assert ladder(64) == [64, 32, 16, 8, 4, 2, 1]
    assert ladder(7) == [7] and ladder(1) == [1]
    assert all(type(m) is int for m in ladder(48))  # micro-batches, never 24.0


def test_split_keeps_the_effective_batch_and_refuses_a_micro_batch_that_does_not_divide_it() -> None:
    accum = split(64, 3, 16)
    assert accum == 12 and type(accum) is int  # 64 x 3 = 192 = 16 x 12
    message = (
        "micro-batch 40 does not divide the effective batch 192 (64 x 3); "
        "pick one on the halving ladder of the configured micro-batch"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        split(64, 3, 40)
    with pytest.raises(ValueError, match="micro-batch 0 does not divide"):
        split(64, 3, 0)


# 64 x 2 with 1000 cached rows of 2 B, 100 B per sample, at most 750 of the rows may go.
SHAPE = Shape(micro0=64, micro_floor=1, rows0=1000, rows=1000, min_rows=250, row_bytes=2.0, sample_bytes=100.0)


def test_predict_moves_by_bytes_per_sample_and_per_row() -> None:
    # 10000 measured at micro 64 with 1000 rows; at micro 32 and 300 rows:
    # 10000 + (32 - 64) x 100 + (300 - 1000) x 2 = 10000 - 3200 - 1400 = 5400
    assert SHAPE.predict(10_000, 64, 32, 300) == 5400.0


def test_fit_takes_the_largest_micro_batch_then_the_most_rows() -> None:
    # 20000 measured at micro 64, budget 15000. Each row is 2 B, so at micro m the rows that fit
    # are 1000 + (15000 - (20000 - (64 - m) x 100)) / 2:
    #   m = 64: 1000 - 2500 (below the 250 kept)   m = 32: 1000 - 900 = 100 (below 250)
    #   m = 16: 1000 - 100 = 900: the answer, at accum 64 x 2 / 16 = 8
    assert SHAPE.fit(15_000, 64, 2, 20_000) == Split(16, 8, 900)
    # Budget 12250: m = 2 leaves 1000 + (12250 - 13800) / 2 = 225 rows (below 250); m = 1 leaves
    # 1000 + (12250 - 13700) / 2 = 275. The default min_micro is 1, so micro 1 is on the table.
    assert SHAPE.fit(12_250, 64, 2, 20_000) == Split(1, 128, 275)
    # A budget nothing fits: the smallest shape (micro 1, the 250 rows kept) ...
    assert SHAPE.fit(100, 64, 2, 20_000) == Split(1, 128, 250)
    # ... or the smallest at or above min_micro, never below the micro-batch running now (8 here).
    assert SHAPE.fit(100, 64, 2, 20_000, min_micro=4) == Split(4, 32, 250)
    assert SHAPE.fit(100, 8, 16, 20_000, min_micro=16) == Split(8, 16, 250)
    # A budget everything fits, capped at max_micro 20: micro 16 (the largest rung <= 20), all rows.
    assert SHAPE.fit(10**9, 64, 2, 20_000, max_micro=20) == Split(16, 8, 1000)


def test_fit_settles_on_the_exact_row_when_division_rounds_down() -> None:
    # 1.0 B of room and rows of 0.1 B: 10 rows fit (10 x 0.1 == 1.0 exactly in floating point, too),
    # though 1.0 // 0.1 is 9.0 (0.1 is stored a hair above a tenth).
    shape = Shape(micro0=1, micro_floor=1, rows0=100, rows=0, min_rows=0, row_bytes=0.1, sample_bytes=1.0)
    assert shape.fit(101.0, 1, 1, 100) == Split(1, 1, 10)


def test_fit_takes_back_a_row_the_division_promised() -> None:
    # Rows and samples of 1.1 B; 6 rows held at micro 6, nothing else measured, a budget of 1.1 B.
    # At micro 12, 6 samples more cost 6.6000000000000005 B in floating point, so the room is
    # 1.1 - 6.6000000000000005 = -5.5: 5 rows to give up (-5.5 // 1.1 = -5.0), 1 kept. But the
    # prediction with 1 row, 6.6000000000000005 - 5.5 = 1.1000000000000005, is over the budget
    # (this file's model says so too); with none it is 0. fit must take the row back: micro 12, 0 rows.
    shape = Shape(micro0=12, micro_floor=3, rows0=6, rows=6, min_rows=0, row_bytes=1.1, sample_bytes=1.1)
    assert use(shape, 0, 6, 12, 1) > 1.1 >= use(shape, 0, 6, 12, 0)
    assert shape.fit(1.1, 6, 2, 0) == Split(12, 1, 0)


def test_configured_prices_a_sample_by_the_two_peaks() -> None:
    # The peaks differ by 10000 - 4000 = 6000, of which the cache's rows account for
    # 2000 x (1 - 0.25) = 1500; the other 4500 over micro-batches 64 -> 16 (48 samples): 93.75 B each.
    shape = Shape.configured(
        64, want_bytes=10_000, min_bytes=4_000, min_micro=16, cache_rows=1000, cache_bytes=2000, min_cache_fraction=0.25
    )
    assert shape == Shape(
        micro0=64, micro_floor=1, rows0=1000, rows=1000, min_rows=250, row_bytes=2.0, sample_bytes=93.75
    )
    # Built with fewer rows than configured: rows now 600, the rest as configured.
    built = Shape.configured(
        64, want_bytes=10_000, min_bytes=4_000, min_micro=16, cache_rows=1000, cache_bytes=2000, built_rows=600
    )
    assert (built.rows0, built.rows, built.min_rows) == (1000, 600, 1000)  # min_cache_fraction 1.0: keep all
    assert built.sample_bytes == 6000 / 48  # no row may go, so all of the 6000 is per sample: 125.0


def test_configured_without_a_cache() -> None:
    # 4800 - 1200 = 3600 over 48 -> 12 (36 samples): 100 B each; 48's ladder ends at 3.
    assert Shape.configured(48, want_bytes=4800, min_bytes=1200, min_micro=12) == Shape(
        micro0=48, micro_floor=3, rows0=0, rows=0, min_rows=0, row_bytes=0.0, sample_bytes=100.0
    )
    # Rows given without their bytes cost nothing, and leave the per-sample price alone.
    rows_only = Shape.configured(
        48, want_bytes=4800, min_bytes=1200, min_micro=12, cache_rows=100, min_cache_fraction=0.5
    )
    assert (rows_only.row_bytes, rows_only.min_rows, rows_only.sample_bytes) == (0.0, 50, 100.0)


@pytest.mark.parametrize(
    ("micro", "want", "least", "min_micro", "cache_bytes", "expected"),
    [
        (32, 3200, 1000, 32, 0, 100.0),  # no span (min_micro is micro): the whole peak per sample, 3200 / 32
        (32, 3200, 1000, 64, 0, 100.0),  # min_micro above micro: no span either
        (2, 1000, 600, 1, 0, 400.0),  # a span of one sample: 400 / 1
        (8, 1000, 1000, 4, 0, 125.0),  # equal peaks: nothing to divide, 1000 / 8
        (8, 1001, 1000, 4, 0, 0.25),  # one byte apart: 1 / 4
        (8, 5000, 4000, 4, 4000, 625.0),  # the cache (4000 x 0.5) explains more than 1000: 5000 / 8
    ],
)
def test_configured_falls_back_to_the_whole_peak_per_sample(
    micro: int, want: int, least: int, min_micro: int, cache_bytes: int, expected: float
) -> None:
    rows = 1000 if cache_bytes else 0
    shape = Shape.configured(
        micro,
        want_bytes=want,
        min_bytes=least,
        min_micro=min_micro,
        cache_rows=rows,
        cache_bytes=cache_bytes,
        min_cache_fraction=0.5 if rows else 1.0,
    )
    assert shape.sample_bytes == expected


def test_refit_learns_bytes_per_sample_from_a_micro_batch_change() -> None:
    shape = Shape(micro0=64, micro_floor=1, rows0=0, rows=0, min_rows=0, row_bytes=0.0, sample_bytes=100.0)
    with pytest.raises(AssertionError):
        shape.refit(32, 7000)  # nothing to learn from before a re-shape
    shape.change(64, 10_000, Split(32, 4, 0))
    assert shape.last_change == (64, 0, 10_000)
    shape.refit(32, 7000)  # 10000 -> 7000 for 32 fewer samples: 93.75 B each
    assert shape.sample_bytes == 93.75


@pytest.mark.parametrize(
    ("to_rows", "micro_now", "used"),
    [
        (400, 32, 7000),  # the rows changed too: the drop is not the samples' alone
        (500, 64, 7000),  # the micro-batch did not change
        (500, 32, 10_000),  # nothing dropped
        (500, 32, 12_000),  # use grew: a measurement to distrust
    ],
)
def test_refit_keeps_its_price_unless_only_the_micro_batch_changed_and_use_fell(
    to_rows: int, micro_now: int, used: int
) -> None:
    shape = Shape(micro0=64, micro_floor=1, rows0=500, rows=500, min_rows=0, row_bytes=4.0, sample_bytes=100.0)
    shape.change(64, 10_000, Split(micro_now, 128 // micro_now, to_rows))
    assert (shape.rows, shape.last_change) == (to_rows, (64, 500, 10_000))
    shape.refit(micro_now, used)
    assert shape.sample_bytes == 100.0
