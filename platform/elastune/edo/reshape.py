"""The model a trial re-shapes by under EDO, pure (no torch, no Ray): the largest shape predicted to
fit a budget, and the split of the effective batch it runs in.

A trial's shape is its micro-batch and its cached tables' device rows (the `cached` strategy). Its
use in another shape is predicted from what it measures now:

    use(micro, rows) = used + (micro - micro now) x bytes per sample + (rows - rows now) x bytes per row

Bytes per row are exact (the cache's layout). Bytes per sample come from the demand's two predicted
peaks (the configured and the smallest shape) and are re-fitted from measurements when a re-shape
missed. Micro-batches move on the halving ladder of the configured one (micro, micro/2, ... while it
halves exactly), so each divides the effective batch: micro x accumulation never changes, and the
math stays exactly that of the configured run.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Shape", "Split", "ladder", "split"]


@dataclass(frozen=True)
class Split:
    """A shape to run in: micro-batch x accumulation (their product, the effective batch, fixed)
    and the cached tables' device rows."""

    micro: int
    accum: int
    rows: int


def ladder(micro: int) -> list[int]:
    """micro, micro/2, micro/4, ... while it halves exactly (largest first)."""
    out = [micro]
    while out[-1] % 2 == 0:
        out.append(out[-1] // 2)
    return out


def split(micro: int, accum: int, new_micro: int) -> int:
    """The accumulation that keeps the effective batch micro x accum at micro-batch `new_micro`."""
    effective = micro * accum
    if new_micro < 1 or effective % new_micro:
        raise ValueError(
            f"micro-batch {new_micro} does not divide the effective batch {effective} ({micro} x {accum}); "
            "pick one on the halving ladder of the configured micro-batch"
        )
    return effective // new_micro


@dataclass
class Shape:
    """The trial's shape (micro-batch, cached rows) and the memory model that re-shapes it."""

    micro0: int  # the configured micro-batch
    micro_floor: int  # the smallest micro on its halving ladder
    rows0: int  # all cached rows in the configured shape
    rows: int  # cached rows now
    min_rows: int
    row_bytes: float  # device bytes per cached row (exact: the cache's layout)
    sample_bytes: float  # bytes per sample of micro-batch (predicted, re-fitted from measurements)
    last_change: tuple[int, int, int] | None = None  # (micro, rows, used) before the last re-shape

    @classmethod
    def configured(
        cls,
        micro: int,
        *,
        want_bytes: int,
        min_bytes: int,
        min_micro: int,
        cache_rows: int = 0,
        cache_bytes: int = 0,
        min_cache_fraction: float = 1.0,
        built_rows: int | None = None,
    ) -> Shape:
        """The configured shape, its bytes per sample priced by the demand: what the predicted peaks
        of the configured (`want_bytes`) and the smallest shape (`min_bytes`: micro-batch `min_micro`,
        `min_cache_fraction` of the rows) differ by beyond the cache's rows, per sample of micro-batch.
        `built_rows`: the cached rows the model was built with, where fewer than `cache_rows`."""
        span = micro - min(min_micro, micro)
        predicted = want_bytes - min_bytes - cache_bytes * (1 - min_cache_fraction)
        return cls(
            micro0=micro,
            micro_floor=min(ladder(micro)),
            rows0=cache_rows,
            rows=cache_rows if built_rows is None else built_rows,
            min_rows=int(cache_rows * min_cache_fraction),
            row_bytes=cache_bytes / cache_rows if cache_rows else 0.0,
            sample_bytes=predicted / span if span > 0 and predicted > 0 else want_bytes / micro,
        )

    def predict(self, used: int, micro_now: int, micro: int, rows: int) -> float:
        """Predicted use at (micro, rows), from `used` measured at (micro_now, rows now)."""
        return used + (micro - micro_now) * self.sample_bytes + (rows - self.rows) * self.row_bytes

    def fit(
        self, budget: float, micro: int, accum: int, used: int, min_micro: int = 1, max_micro: int | None = None
    ) -> Split:
        """The largest shape predicted to fit `budget`, from `used` measured at micro-batch `micro`
        (x `accum`): the largest micro-batch on the ladder (from `min_micro` up to `max_micro`), then
        the most cached rows; the smallest shape if none fits."""
        top = min(self.micro0, max_micro) if max_micro is not None else self.micro0
        for m in [m for m in ladder(self.micro0) if min_micro <= m <= top]:
            rows = self.rows
            if self.row_bytes:
                room = budget - self.predict(used, micro, m, self.rows)
                rows = min(self.rows + int(room // self.row_bytes), self.rows0)
                # room // row_bytes may round either way in floating point: settle on the exact row
                if self.predict(used, micro, m, rows) > budget:
                    rows -= 1
                elif rows < self.rows0 and self.predict(used, micro, m, rows + 1) <= budget:
                    rows += 1
            if rows >= self.min_rows and self.predict(used, micro, m, rows) <= budget:
                return Split(m, split(micro, accum, m), rows)
        # Nothing fits: the smallest shape on the ladder (never below the micro-batch running now).
        smallest = min(m for m in ladder(self.micro0) if m >= min(min_micro, micro))
        return Split(smallest, split(micro, accum, smallest), self.min_rows)

    def change(self, micro_now: int, used: int, to: Split) -> None:
        """Note a re-shape from micro-batch `micro_now` (measuring `used`) to `to`."""
        self.last_change = (micro_now, self.rows, used)
        self.rows = to.rows

    def refit(self, micro_now: int, used: int) -> None:
        """After a re-shape that changed only the micro-batch: bytes per sample, as measured."""
        assert self.last_change is not None
        micro_before, rows_before, used_before = self.last_change
        if rows_before == self.rows and micro_before != micro_now and used_before > used:
            self.sample_bytes = (used_before - used) / (micro_before - micro_now)
