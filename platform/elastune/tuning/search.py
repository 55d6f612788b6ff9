"""From a SweepSpec to proposals: Optuna's sampler behind Ray Tune's OptunaSearch, with the memory
estimator screening every proposal before Ray sees it.

Why a subclass of OptunaSearch: Ray Tune tells Optuna an errored trial as FAIL, and TPE ignores
FAIL trials, so the sampler would never learn where the ceiling is. Here nothing that is
over the ceiling, out of memory or below the quality bar is an error: each is told to Optuna as a
COMPLETE trial whose *constraint* values are positive (`Trial.set_constraint`: <= 0 is feasible;
TPE models infeasible trials apart), and a proposal the estimator prices over the ceiling is told
at once, without a Ray trial.

Why the searcher remembers proposals: over a discrete space TPE (and random search, which draws
with replacement) proposes configs it has already tried, and a sweep would train each again.
Training is treated as deterministic here (a repeat measures the same config on the same machine),
so a repeat is answered from memory, as Optuna's FAQ does for duplicated parameters (tell the
trial the earlier trial's value), and the sampler is asked again. If it keeps returning to known
configs (TPE does once it has settled on a region), an unseen point of the space is proposed
instead, drawn at random; when every point is known, the sweep ends.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from elastune.dotted import flatten
from elastune.tracking.records import TrialRecord
from elastune.tuning.keys import CONSTRAINTS_ATTR, ESTIMATE_KEY, NUMBER_KEY
from elastune.tuning.pricing import screen
from elastune.tuning.space import FloatParam, IntParam, grid_points
from elastune.tuning.spec import SweepSpec

__all__ = [
    "MAX_REPEATS",
    "SCREENED",
    "Screened",
    "Screener",
    "ScreeningSearch",
    "SpaceFunction",
    "discrete_points",
    "make_sampler",
    "param_key",
    "records_for_screened",
    "set_constraints",
]

log = logging.getLogger(__name__)

# Asks per suggestion that may land on known configs before an unseen point is drawn instead: an
# ask and a repeat told from memory cost milliseconds, a trial minutes.
MAX_REPEATS = 8
DISCRETE_LIMIT = 10_000  # a discrete space with more points is not enumerated (repeats are rare there)

# (fits, predicted peak bytes, reason) for a proposal: `screen` prices it with the estimator; the
# tuner benchmark passes one that reads the estimate cached beside each measured config.
Screener = Callable[[SweepSpec, Mapping[str, Any]], tuple[bool, int | None, str]]
ParamKey = tuple[tuple[str, Any], ...]


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
    # Multivariate TPE models only the parameters every trial has; with `when` the gated ones would
    # be drawn independently of the rest (e.g. the sparse optimizer apart from the strategy it goes
    # with). `group` models each set of parameters that occur together jointly (Optuna's advice for
    # conditional spaces); without `when` it is plain multivariate TPE. On the tuner benchmark's
    # conditional grid it halves the median trials to 95% of the best (bench/RESULTS.md, Tuner).
    conditional = any(p.when for p in spec.parameters.values())
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, multivariate=True, group=conditional)


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
    them, (3) tells every finished trial with its constraint values, and (4) never hands Tune a
    config it has already proposed: a repeat is told the known result and the sampler asked again.

    `sampler` and `screener` default to what the sweep uses (`make_sampler(spec)`, `screen`)."""

    def __init__(
        self,
        spec: SweepSpec,
        sweep_id: str,
        metric: str,
        mode: str,
        *,
        sampler: optuna.samplers.BaseSampler | None = None,
        screener: Screener | None = None,
    ) -> None:
        super().__init__(
            space=SpaceFunction.from_spec(spec), metric=metric, mode=mode, sampler=sampler or make_sampler(spec)
        )
        self._spec = spec
        self._sweep_id = sweep_id
        self._screen: Screener = screener or screen
        self._points = discrete_points(spec)  # None: continuous (or huge), so it cannot be exhausted
        self._max_trials = spec.budget.max_trials
        if spec.search.algorithm == "grid":
            self._max_trials = min(self._max_trials, len(self._points or grid_points(spec.parameters)))
        self._known: dict[ParamKey, int] = {}  # proposed config -> its Optuna trial number
        self._rng = random.Random(spec.search.seed)  # draws unseen points when the sampler only repeats
        self.proposed = 0  # launched or screened: what counts against max_trials
        self.repeats = 0  # proposals of known configs, told from memory (never a Ray trial)
        self.drawn = 0  # unseen points drawn because the sampler returned MAX_REPEATS known configs in a row

    def suggest(self, trial_id: str) -> dict[Any, Any] | None:  # or Searcher.FINISHED (a str)
        spec = self._spec
        while self.proposed < self._max_trials:
            params = self._propose_new(trial_id)
            if params is None:
                break
            number = self.proposed
            self.proposed += 1
            flat = flatten(params, sep="/")  # OptunaSearch unflattens on "/", never on "."
            self._known[param_key(flat)] = self._ot_trials[trial_id].number
            fits, predicted, reason = self._screen(spec, flat)
            if fits:
                # Carried in the trial's config so the driver's callback sees them, also after a
                # restore; the trainable drops every elastune_* key before building the RunConfig.
                return {**params, NUMBER_KEY: number, ESTIMATE_KEY: predicted}
            ot_trial = self._ot_trials.pop(trial_id)
            ceiling = spec.constraints.memory_ceiling or 1
            set_constraints(ot_trial, {"memory": ((predicted or ceiling) - ceiling) / ceiling + 1e-9, "quality": 0.0})
            self.study().tell(ot_trial, _worst(str(self._mode)))
            SCREENED.setdefault(self._sweep_id, []).append(Screened(number, flat, predicted, reason))
        return Searcher.FINISHED  # type: ignore[return-value]

    def _propose_new(self, trial_id: str) -> dict[str, Any] | None:
        """The next config not proposed before, asked of the sampler under `trial_id`; None when
        there is none: every point of a discrete space is known, or the sampler only repeats and
        the space cannot be enumerated (then the search has settled)."""
        if self._points is not None and len(self._known) >= len(self._points):
            log.info("sweep %s: every one of the %d configs has been proposed", self._sweep_id, len(self._points))
            return None
        for _ in range(MAX_REPEATS):
            params = super().suggest(trial_id) or {}
            key = param_key(flatten(params, sep="/"))
            if key not in self._known:
                return params
            self._tell_repeat(self._ot_trials.pop(trial_id), self._known[key])
        unseen = self._draw_unseen()
        if unseen is None:
            log.info("sweep %s: the sampler proposed only known configs %d times in a row", self._sweep_id, MAX_REPEATS)
            return None
        self.drawn += 1
        self.study().enqueue_trial(unseen)  # the next ask takes these values (its sampler is skipped)
        return super().suggest(trial_id) or {}

    def _tell_repeat(self, ot_trial: optuna.Trial, first: int) -> None:
        """Finish a repeated proposal with what its first proposal (trial `first`) got. The
        sampler's model then holds the point twice, as it would had the repeat been trained."""
        self.repeats += 1
        known = self.study().get_trials(deepcopy=False)[first]  # trial numbers index a study's trials
        ot_trial.set_user_attr("elastune_repeat_of", first)
        if known.state == TrialState.COMPLETE:
            set_constraints(ot_trial, known.constraints)
            self.study().tell(ot_trial, known.value)
        else:  # still running (concurrent trials), or pruned/failed: no result to repeat
            self.study().tell(ot_trial, state=TrialState.FAIL)

    def _draw_unseen(self) -> dict[str, Any] | None:
        if self._points is None:
            return None
        unseen = [p for p in self._points if param_key(p) not in self._known]
        return self._rng.choice(unseen) if unseen else None

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        # A report without the objective (an out-of-memory trial's final report has no samples/s)
        # is no intermediate value: Optuna would refuse None. on_trial_complete tells its outcome.
        if result.get(str(self.metric)) is None:
            return
        super().on_trial_result(trial_id, result)

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


def param_key(params: Mapping[str, Any]) -> ParamKey:
    """A proposal's identity: its flat parameters, floats to 12 significant digits so that the
    grid's and the sampler's spelling of one step of a range compare equal."""
    return tuple(sorted((k, float(f"{v:.12g}") if isinstance(v, float) else v) for k, v in params.items()))


def discrete_points(spec: SweepSpec, limit: int = DISCRETE_LIMIT) -> list[dict[str, Any]] | None:
    """Every point of the space when it is discrete and has at most `limit` points, else None.
    A float is discrete when it has a step and no log scale (`_suggest` drops the step on a log
    scale), an int when its step is the one `_suggest` uses."""
    for param in spec.parameters.values():
        if isinstance(param, FloatParam) and (param.step is None or param.log):
            return None
        if isinstance(param, IntParam) and param.log and param.step != 1:
            return None
    points = grid_points(spec.parameters, limit=limit + 1)
    return points if len(points) <= limit else None


def _constraints_in(result: Mapping[str, Any]) -> dict[str, float]:
    """The final report's constraint values; Tune hands searchers results flattened on '/'."""
    nested = result.get(CONSTRAINTS_ATTR)
    if isinstance(nested, Mapping):
        return {str(k): float(v) for k, v in nested.items()}
    prefix = CONSTRAINTS_ATTR + "/"
    return {k[len(prefix) :]: float(v) for k, v in result.items() if k.startswith(prefix)}


def _worst(mode: str) -> float:
    return 0.0 if mode == "max" else float("inf")


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
