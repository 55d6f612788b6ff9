"""How good a trained model is: the metric a workload declares, and the sweep's tolerance on it.

A sweep trades quality for speed only within a bound: a trial is feasible when its primary quality
metric is no worse than the reference run's by more than `constraints.quality_tolerance`, a share
of the reference's value. "Worse" depends on the metric, so a workload declares it with a direction:
`QualityMetric("logloss", "min")` (the default, for binary classifiers judged through `predict`),
`QualityMetric("perplexity", "min")`, `QualityMetric("recall_at_10", "max")`.

The bound is relative to the magnitude of the reference, so it also holds for a metric that can be
negative (a log-likelihood): `min` allows `ref + tol * |ref|`, `max` allows `ref - tol * |ref|`.

A run whose model learned nothing is said once it is evaluated (`unlearned_warning`): a language
model whose eval perplexity is above `baseline_perplexity`, a uniform guess over its vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["EVAL_LOSS", "LOGLOSS", "Direction", "QualityMetric", "quality_of", "unlearned_warning"]

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


def unlearned_warning(metrics: Mapping[str, float], train_loss: float) -> str | None:
    """One line saying that the model learned nothing that carries to held-out data, with the likely
    cause and its fix; None when it did, or when the metrics hold no baseline to tell.

    The test: eval `perplexity` above `baseline_perplexity`, that of guessing uniformly over the
    vocabulary (its size). A training loss under half the eval loss says the model memorized its
    training text instead (overfitting); one as high says it did not fit even that."""
    perplexity, uniform = metrics.get("perplexity"), metrics.get("baseline_perplexity")
    if perplexity is None or uniform is None or not perplexity > uniform:  # a NaN perplexity is not judged
        return None
    eval_loss = metrics.get("loss", math.log(perplexity))
    losses = f"train loss {train_loss:.2f} vs eval loss {eval_loss:.2f}"
    if train_loss < eval_loss / 2:
        cause = (
            f"it memorized its training text instead ({losses}): likely too little text for this many steps; "
            "give more text (data.path), or fewer steps, or a smaller model (workload_options.layers, "
            "model.embedding_dim), or hold out fewer documents (eval.samples)"
        )
    else:
        cause = (
            f"it did not fit its training text either ({losses}): likely too few steps or too low a learning "
            "rate; raise steps or optimizer.lr"
        )
    return (
        f"eval perplexity {perplexity:,.0f} is above {uniform:,.0f}, the vocabulary's size: worse than guessing "
        f"uniformly, so the model has not learned; {cause}"
    )
