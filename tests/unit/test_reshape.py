"""EDO's re-shape model (edo/reshape.py) over random shapes, budgets and measurements (hypothesis):
the effective batch is kept exactly, the result fits the budget wherever some shape does (and is
the largest that does), and a larger budget never gives a smaller shape."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from elastune.edo.reshape import Shape, Split, ladder, split
from hypothesis import given, settings
from hypothesis import strategies as st


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
        return [m for m in ladder(self.shape.micro0) if self.min_micro <= m <= top]

    def fits(self, micro: int, rows: int, budget: float) -> bool:
        return self.shape.predict(self.used, self.micro, micro, rows) <= budget

    def fit(self, budget: float) -> Split:
        return self.shape.fit(budget, self.micro, self.accum, self.used, self.min_micro, self.max_micro)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    micro0 = draw(st.integers(1, 48)) * 2 ** draw(st.integers(0, 12))
    accum0 = draw(st.integers(1, 8))
    micro = draw(st.sampled_from(ladder(micro0)))
    rows0 = draw(st.integers(0, 5000))
    min_rows = int(rows0 * draw(st.floats(0.0, 1.0)))
    shape = Shape(
        micro0=micro0,
        micro_floor=min(ladder(micro0)),
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
    assert fit.micro in ladder(case.shape.micro0)
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


def test_split_refuses_a_micro_batch_that_does_not_divide_the_effective_batch() -> None:
    assert split(64, 3, 16) == 12
    with pytest.raises(ValueError, match=r"micro-batch 40 does not divide the effective batch 192 \(64 x 3\)"):
        split(64, 3, 40)
