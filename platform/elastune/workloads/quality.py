"""How good a trained model is: the metric a workload declares, and the sweep's tolerance on it.

A sweep trades quality for speed only within a bound: a trial is feasible when its primary quality
metric is no worse than the reference run's by more than `constraints.quality_tolerance`, a share
of the reference's value. "Worse" depends on the metric, so a workload declares it with a direction:
`QualityMetric("logloss", "min")` (the default, for binary classifiers judged through `predict`),
`QualityMetric("perplexity", "min")`, `QualityMetric("recall_at_10", "max")`.

The bound is relative to the magnitude of the reference, so it also holds for a metric that can be
negative (a log-likelihood): `min` allows `ref + tol * |ref|`, `max` allows `ref - tol * |ref|`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["EVAL_LOSS", "LOGLOSS", "Direction", "QualityMetric", "quality_of"]

Direction = Literal["min", "max"]


@dataclass(frozen=True)
class QualityMetric:
    """The metric the sweep's quality tolerance applies to: a key of the workload's eval metrics,
    and whether lower (`min`) or higher (`max`) is better."""

    name: str
    direction: Direction = "min"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a quality metric's name is an identifier such as 'logloss', got {self.name!r}")
        if self.direction not in ("min", "max"):
            raise ValueError(f"a quality metric's direction is 'min' or 'max', got {self.direction!r}")

    def allowed(self, reference: float, tolerance: float) -> float:
        """The worst value still within `tolerance` of `reference`."""
        slack = tolerance * abs(reference)
        return reference + slack if self.direction == "min" else reference - slack

    def check(self, value: float, reference: float, tolerance: float) -> tuple[float, bool]:
        """(Optuna's constraint value, <= 0 feasible, as a share of the bound; whether it held)."""
        bound = self.allowed(reference, tolerance)
        over = value - bound if self.direction == "min" else bound - value
        if not math.isfinite(value):  # a diverged model (nan loss) is never within the tolerance
            return 1.0, False
        return over / (abs(bound) or 1.0), over <= 0

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b`."""
        return a < b if self.direction == "min" else a > b


LOGLOSS = QualityMetric("logloss", "min")
EVAL_LOSS = QualityMetric("loss", "min")  # a workload's default: its eval loss, lower is better


def quality_of(workload: Any) -> QualityMetric:
    """The metric `workload` declares in its `quality` attribute; eval log loss (lower is better)
    for a workload of the old protocol that declares none (it was scored from `predict`)."""
    metric = getattr(workload, "quality", None)
    if metric is None:
        return LOGLOSS
    if not isinstance(metric, QualityMetric):
        raise TypeError(
            f"{type(workload).__name__}.quality is a {type(metric).__name__}; declare it as "
            "elastune.QualityMetric(NAME, 'min' or 'max')"
        )
    return metric
