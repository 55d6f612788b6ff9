"""From a SweepSpec to proposals: Optuna's sampler behind Ray Tune's OptunaSearch, with the memory
estimator screening every proposal before Ray sees it.

Why a subclass of OptunaSearch: Ray Tune tells Optuna an errored trial as FAIL, and TPE ignores
FAIL trials, so the sampler would never learn where the ceiling is (PEERS.md). Here nothing that is
over the ceiling, out of memory or below the quality bar is an error: each is told to Optuna as a
COMPLETE trial whose *constraint* values are positive (`Trial.set_constraint`: <= 0 is feasible;
TPE models infeasible trials apart), and a proposal the estimator prices over the ceiling is told
at once, without a Ray trial.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from elastune.tracking.records import TrialRecord
from elastune.tuning.spec import SweepSpec

__all__ = [
    "CONSTRAINTS_ATTR",
    "SCREENED",
    "Screened",
    "ScreeningSearch",
    "SpaceFunction",
    "make_sampler",
    "records_for_screened",
    "screen",
    "set_constraints",
]

log = logging.getLogger(__name__)

CONSTRAINTS_ATTR = "elastune_constraints"  # in a trial's final report: {"memory": x, "quality": y}


def set_constraints(ot_trial: optuna.Trial, values: Mapping[str, float]) -> None:
    """Record a trial's constraint values (<= 0 feasible) before it is told to the study."""
    for key, value in values.items():
        ot_trial.set_constraint(key, float(value))


def make_sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    seed = spec.search.seed
    if spec.search.algorithm == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.search.algorithm == "grid":
        return _GridSampler(seed=seed)
    # Few startup trials: sweeps are short, and TPE's constrained model is what learns the ceiling.
    n_startup = max(3, min(10, spec.budget.max_trials // 4))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)


class _GridSampler(optuna.samplers.BruteForceSampler):
    """BruteForceSampler enumerates define-by-run spaces, conditional parameters included. Its
    `after_trial` stops the study when the grid is exhausted, which raises outside `optimize()`
    (Tune drives Optuna by ask/tell); the searcher stops at the grid's size instead."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


@dataclass
class SpaceFunction:
    """Optuna define-by-run space for a spec: draws parameters in order, skipping gated ones.
    A picklable object rather than a closure, because Ray checkpoints the searcher."""

    parameters: dict[str, Any]  # name -> parameter model dumped to a dict

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> SpaceFunction:
        return cls({name: p.model_dump() for name, p in spec.parameters.items()})

    def __call__(self, trial: optuna.Trial) -> None:
        drawn: dict[str, Any] = {}
        for name, raw in self.parameters.items():
            when = raw.get("when") or {}
            if any(key not in drawn or drawn[key] not in allowed for key, allowed in when.items()):
                continue
            drawn[name] = _suggest(trial, name, raw)


def _suggest(trial: optuna.Trial, name: str, raw: Mapping[str, Any]) -> Any:
    if raw["type"] == "choice":
        return trial.suggest_categorical(name, raw["values"])
    if raw["type"] == "int":
        step = raw["step"] if not raw["log"] else 1
        return trial.suggest_int(name, raw["low"], raw["high"], step=step, log=raw["log"])
    return trial.suggest_float(name, raw["low"], raw["high"], step=None if raw["log"] else raw["step"], log=raw["log"])


@dataclass
class Screened:
    """What the searcher hands the driver about a proposal it refused (never a Ray trial)."""

    number: int
    params: dict[str, Any]
    estimated_peak_bytes: int | None
    reason: str


# Proposals the searcher refused, per sweep id, until the driver's callback logs them. Both run in
# the driver process; a module-level queue (not an attribute) survives Tune pickling the searcher.
SCREENED: dict[str, list[Screened]] = {}


class ScreeningSearch(OptunaSearch):
    """OptunaSearch that (1) counts every proposal against max_trials, (2) prices each with the
    estimator and tells over-ceiling ones to Optuna as constraint violations instead of launching
    them, and (3) tells every finished trial with its constraint values."""

    def __init__(self, spec: SweepSpec, sweep_id: str, metric: str, mode: str) -> None:
        super().__init__(space=SpaceFunction.from_spec(spec), metric=metric, mode=mode, sampler=make_sampler(spec))
        self._spec = spec
        self._sweep_id = sweep_id
        self._max_trials = spec.budget.max_trials
        if spec.search.algorithm == "grid":
            from elastune.tuning.cheapest import grid_points

            self._max_trials = min(self._max_trials, len(grid_points(spec)))
        self.proposed = 0

    def suggest(self, trial_id: str) -> dict[Any, Any] | None:  # or Searcher.FINISHED (a str)
        spec = self._spec
        while self.proposed < self._max_trials:
            params = super().suggest(trial_id)
            number = self.proposed
            self.proposed += 1
            flat = _flatten(params or {})
            fits, predicted, reason = screen(spec, flat)
            if fits:
                # Carried in the trial's config so the driver's callback sees them, also after a
                # restore; the trainable drops every elastune_* key before building the RunConfig.
                return {**(params or {}), "elastune_number": number, "elastune_estimate": predicted}
            ot_trial = self._ot_trials.pop(trial_id)
            ceiling = spec.constraints.memory_ceiling or 1
            set_constraints(ot_trial, {"memory": ((predicted or ceiling) - ceiling) / ceiling + 1e-9, "quality": 0.0})
            self.study().tell(ot_trial, _worst(str(self._mode)))
            SCREENED.setdefault(self._sweep_id, []).append(Screened(number, flat, predicted, reason))
        return Searcher.FINISHED  # type: ignore[return-value]

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        ot_trial = self._ot_trials.get(trial_id)
        constraints = _constraints_in(result or {})
        if ot_trial is not None and result is not None and constraints:
            set_constraints(ot_trial, constraints)
            metric = str(self._metric)
            if result.get(metric) is None:  # an OOM trial has no throughput: the worst value
                result = {**result, metric: _worst(str(self._mode))}
        super().on_trial_complete(trial_id, result=result, error=error)

    def study(self) -> optuna.Study:
        assert self._ot_study is not None, "the study is created in __init__ (the space is given)"
        return self._ot_study


def screen(spec: SweepSpec, params: Mapping[str, Any]) -> tuple[bool, int | None, str]:
    """(fits, predicted peak bytes, reason) for one proposal. Without a ceiling, everything fits."""
    ceiling = spec.constraints.memory_ceiling
    if ceiling is None:
        return True, None, ""
    from elastune.memory.estimate import estimate  # lazy: pulls in torch's fake-tensor machinery
    from elastune.training.precision import resolve_device

    cfg = spec.trial_config(params)
    predicted = estimate(cfg, resolve_device(cfg.device) if cfg.device != "auto" else None).peak_bytes
    if predicted > ceiling:
        return False, predicted, f"predicted peak {predicted} B is over the memory ceiling {ceiling} B"
    return True, predicted, ""


def _constraints_in(result: Mapping[str, Any]) -> dict[str, float]:
    """The final report's constraint values; Tune hands searchers results flattened on '/'."""
    nested = result.get(CONSTRAINTS_ATTR)
    if isinstance(nested, Mapping):
        return {str(k): float(v) for k, v in nested.items()}
    prefix = CONSTRAINTS_ATTR + "/"
    return {k[len(prefix) :]: float(v) for k, v in result.items() if k.startswith(prefix)}


def _worst(mode: str) -> float:
    return 0.0 if mode == "max" else float("inf")


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """OptunaSearch unflattens on '/', never on '.', so dotted names come back as flat keys; be
    tolerant of nesting anyway."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


def records_for_screened(spec: SweepSpec, screened: list[Screened]) -> list[TrialRecord]:
    out = []
    for s in screened:
        cfg = spec.trial_config(s.params)
        out.append(
            TrialRecord(
                trial_id=f"screened-{s.number}",
                number=s.number,
                status="infeasible",
                params=s.params,
                config=cfg.to_dict(),
                estimated_peak_bytes=s.estimated_peak_bytes,
                error=s.reason,
            )
        )
    return out
