"""From a SweepSpec to proposals: an Optuna study the searcher owns and drives by ask and tell
(Optuna's public interface), behind Ray Tune's public `Searcher` interface, with the memory
estimator screening every proposal before Ray sees it.

Why not Ray's OptunaSearch: Ray Tune tells Optuna an errored trial as FAIL, and TPE ignores
FAIL trials, so the sampler would never learn where the ceiling is; changing that meant reading
OptunaSearch's private attributes. Here nothing that is over the ceiling, out of memory or below
the quality bar is an error: each is told to Optuna as a COMPLETE trial whose *constraint* values
are positive (`Trial.set_constraint`: <= 0 is feasible; TPE models infeasible trials apart), and a
proposal the estimator prices over the ceiling is told at once, without a Ray trial. A trial that
ends without the metric is told PRUNED (FAIL when it errored), as OptunaSearch did.

Why the searcher remembers proposals: over a discrete space TPE (and random search, which draws
with replacement) proposes configs it has already tried, and a sweep would train each again.
Training is treated as deterministic here (a repeat measures the same config on the same machine),
so a repeat is answered from memory, as Optuna's FAQ does for duplicated parameters (tell the
trial the earlier trial's value), and the sampler is asked again. If it keeps returning to known
configs (TPE does once it has settled on a region), an unseen point of the space is proposed
instead, drawn at random; when every point is known, the sweep ends.

Why TPE alternates with local steps: on a discrete space, once TPE's startup trials are told,
every LOCAL_EVERY-th proposal is an unseen config nearest the best feasible one so far (the fewest
parameters changed; one of them at random). Throughput over these spaces is nearly separable (a
better precision, micro-batch or optimizer helps whatever the rest is), so the best config is
usually one change away from a good one, which TPE alone finds late where its model has settled
elsewhere. Chosen on the tuner benchmark's design seeds (bench/tuner.py variants): the median
trials to 95% of the grid's best went from 16.2% of the grid to 11.3%, the worst block of 30 seeds
from 22.3% to 14.7%; bench/tuner.py seeds reports it on the test seeds. Random search and the grid
take no local steps: they are baselines.

Why the saved state is JSON, not a pickle: Tune saves a searcher into the sweep's state folder
(`$ELASTUNE_HOME/sweeps/SWEEP_ID`) and a resume loads it back. The file holds what Optuna was told
(each trial's state, value, parameters, distributions, constraints, intermediate values) and the
searcher's counters; `restore` rebuilds an in-memory study from it with `create_trial` and
`add_trial`. Loading it runs no code, and it reads back across Optuna and Ray versions. An
Optuna JournalStorage file would also survive, but it is written on every ask and tell (a
suggestion may ask a dozen times), apart from Tune's checkpoints, and it still would not hold the
searcher's own counters. What a resume does not get back is the sampler's random state (a
sampler's private attribute): the restored sampler is seeded from the sweep's seed and the number
of trials told, so a resume is as deterministic as a fresh sweep, though not the same draws an
uninterrupted sweep would have made.
"""

from __future__ import annotations

import logging
import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.trial import TrialState
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ray.tune.search import Searcher

from elastune.dotted import nest
from elastune.files import atomic_write
from elastune.tracking.records import TrialRecord
from elastune.tuning.keys import CONSTRAINTS_ATTR, ESTIMATE_KEY, NUMBER_KEY
from elastune.tuning.pricing import cheapest_estimate, screen
from elastune.tuning.space import FloatParam, IntParam, grid_points
from elastune.tuning.spec import SweepSpec

__all__ = [
    "MAX_REPEATS",
    "SCREENED",
    "STATE_FORMAT",
    "Screened",
    "Screener",
    "ScreeningSearch",
    "SearchState",
    "SpaceFunction",
    "discrete_points",
    "load_search_state",
    "make_sampler",
    "param_key",
    "records_for_screened",
    "set_constraints",
    "startup_trials",
]

log = logging.getLogger(__name__)

# Asks per suggestion that may land on known configs before an unseen point is drawn instead: an
# ask and a repeat told from memory cost milliseconds, a trial minutes.
MAX_REPEATS = 8
DISCRETE_LIMIT = 10_000  # a discrete space with more points is not enumerated (repeats are rare there)
REPEAT_ATTR = "elastune_repeat_of"  # a repeat's user attribute: the number of the trial it repeats
STATE_FORMAT: Literal["elastune.search/1"] = (
    "elastune.search/1"  # the saved state's format; `restore` refuses any other
)
TRAINING_ITERATION = "training_iteration"  # Tune's own counter in every report (the report's step)

# (fits, predicted peak bytes, reason) for a proposal: `screen` prices it with the estimator; the
# tuner benchmark passes one that reads the estimate cached beside each measured config.
Screener = Callable[[SweepSpec, Mapping[str, Any]], tuple[bool, int | None, str]]
# (upper bound of the predicted peak, parameters) of the space's cheapest config: `cheapest_estimate`
Cheapest = Callable[[SweepSpec], tuple[int, dict[str, Any]]]
# Proposals screened out in a row after which the ceiling is taken to bind, and the space's
# cheapest config is proposed next (where only a corner of the space fits, a sampler may not find
# it within the budget; a sweep over a 40 MiB ceiling once screened out all four proposals).
CHEAPEST_AFTER = 2
# After TPE's startup, every LOCAL_EVERY-th proposal is a local step (see the module's docstring).
LOCAL_EVERY = 2
ParamKey = tuple[tuple[str, Any], ...]


def set_constraints(ot_trial: optuna.Trial, values: Mapping[str, float]) -> None:
    """Record a trial's constraint values (<= 0 feasible) before it is told to the study."""
    for key, value in values.items():
        ot_trial.set_constraint(key, float(value))


def make_sampler(spec: SweepSpec, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded with `seed` (default: the spec's search.seed)."""
    seed = spec.search.seed if seed is None else seed
    if spec.search.algorithm == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # Optuna marks BruteForceSampler and TPE's `group` option experimental and warns on each
    # construction; both are chosen deliberately (see below), so the warning is no news to a user.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if spec.search.algorithm == "grid":
            return _GridSampler(seed=seed)
        # Few startup trials: sweeps are short, and TPE's constrained model is what learns the ceiling.
        n_startup = startup_trials(spec)
        # Multivariate TPE models only the parameters every trial has; with `when` the gated ones would
        # be drawn independently of the rest (e.g. the sparse optimizer apart from the strategy it goes
        # with). `group` models each set of parameters that occur together jointly (Optuna's advice for
        # conditional spaces); without `when` it is plain multivariate TPE. On the tuner benchmark's
        # conditional grid it halved the median trials to 95% of the best on the 30 seeds it was chosen
        # on, but not on 180 others (before local steps: 15.2% of the grid against 14.0% ungrouped,
        # record tuner-seeds-20261127-025214-b4b604c).
        conditional = any(p.when for p in spec.parameters.values())
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, multivariate=True, group=conditional)


def startup_trials(spec: SweepSpec) -> int:
    """TPE's startup trials (drawn at random) for `spec`: few, since sweeps are short."""
    return max(3, min(10, spec.budget.max_trials // 4))


class _GridSampler(optuna.samplers.BruteForceSampler):
    """BruteForceSampler enumerates define-by-run spaces, conditional parameters included. Its
    `after_trial` stops the study when the grid is exhausted, which raises outside `optimize()`
    (the searcher drives Optuna by ask/tell); the searcher stops at the grid's size instead."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


@dataclass
class SpaceFunction:
    """Optuna define-by-run space for a spec: draws parameters in order, skipping gated ones, and
    returns what it drew (flat: dotted names). A picklable object rather than a closure, because
    Tune pickles the searcher with the sweep's experiment."""

    parameters: dict[str, Any]  # name -> parameter model dumped to a dict

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> SpaceFunction:
        return cls({name: p.model_dump() for name, p in spec.parameters.items()})

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        drawn: dict[str, Any] = {}
        for name, raw in self.parameters.items():
            when = raw.get("when") or {}
            if any(key not in drawn or drawn[key] not in allowed for key, allowed in when.items()):
                continue
            drawn[name] = _suggest(trial, name, raw)
        return drawn


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


class SavedTrial(BaseModel):
    """One trial of the study as `save` writes it: what `optuna.trial.create_trial` takes back."""

    model_config = ConfigDict(extra="forbid")

    number: int
    state: Literal["RUNNING", "COMPLETE", "PRUNED", "FAIL"]
    value: float | None = None
    params: dict[str, Any] = {}
    distributions: dict[str, str] = {}  # name -> optuna.distributions.distribution_to_json
    user_attrs: dict[str, Any] = {}
    constraints: dict[str, float] = {}
    intermediate_values: dict[int, float] = {}
    tune_trial_id: str | None = None  # a RUNNING trial that Tune runs: its Tune trial id


class SearchState(BaseModel):
    """The searcher's saved state (`ScreeningSearch.save`): a JSON document, read back without
    running any code. The proposal counters, the random draw of unseen points, and the study."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["elastune.search/1"] = STATE_FORMAT
    sweep_id: str
    proposed: int
    repeats: int
    drawn: int
    local: int = Field(default=0, ge=0)  # local steps (a state saved before they existed has none)
    draw_state: list[Any]  # random.Random.getstate() of the unseen-point draw and the local steps
    trials: list[SavedTrial]


class ScreeningSearch(Searcher):
    """A Tune searcher over its own Optuna study that (1) counts every proposal against
    max_trials, (2) prices each with the estimator and tells over-ceiling ones to Optuna as
    constraint violations instead of launching them, (3) tells every finished trial with its
    constraint values, and (4) never hands Tune a config it has already proposed: a repeat is told
    the known result and the sampler asked again.

    When the ceiling binds (CHEAPEST_AFTER proposals screened out in a row), the space's cheapest
    config is proposed next, if it fits and is new.

    `sampler` and `screener` default to what the sweep uses (`make_sampler(spec)`, `screen`);
    `cheapest` to `cheapest_estimate` with the default screener, else to nothing (a given screener
    prices from its own figures, and the cheapest config is then not offered unless `cheapest` is given)."""

    def __init__(
        self,
        spec: SweepSpec,
        sweep_id: str,
        metric: str,
        mode: Literal["min", "max"],
        *,
        sampler: optuna.samplers.BaseSampler | None = None,
        screener: Screener | None = None,
        cheapest: Cheapest | None = None,
        local_steps: bool | None = None,
        local_after: int | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self._spec = spec
        self._sweep_id = sweep_id
        self._screen: Screener = screener or screen
        self._cheapest: Cheapest | None = cheapest or (cheapest_estimate if screener is None else None)
        self._screened_in_a_row = 0
        self._space = SpaceFunction.from_spec(spec)
        self._own_sampler = sampler is None  # a resume re-seeds the sweep's sampler, never a given one
        self._study = _new_study(sampler or make_sampler(spec), mode)
        self._live: dict[str, optuna.Trial] = {}  # Tune trial id -> its Optuna trial, until it is told
        self._points = discrete_points(spec)  # None: continuous (or huge), so it cannot be exhausted
        # local steps: TPE over a discrete space, unless told (the tuner benchmark compares both)
        wanted = spec.search.algorithm == "tpe" if local_steps is None else local_steps
        self._local = wanted and self._points is not None
        # local steps begin after the sampler's startup (one given its own: `local_after`)
        self._startup = startup_trials(spec) if local_after is None else local_after
        self._max_trials = spec.budget.max_trials
        if spec.search.algorithm == "grid":
            self._max_trials = min(self._max_trials, len(self._points or grid_points(spec.parameters)))
        self._known: dict[ParamKey, int] = {}  # proposed config -> its Optuna trial number
        self._rng = random.Random(spec.search.seed)  # draws unseen points when the sampler only repeats
        self.proposed = 0  # launched or screened: what counts against max_trials
        self.repeats = 0  # proposals of known configs, told from memory (never a Ray trial)
        self.drawn = 0  # unseen points drawn because the sampler returned MAX_REPEATS known configs in a row
        self.local = 0  # local steps: unseen configs nearest the best feasible one

    # -- Tune's Searcher interface

    def suggest(self, trial_id: str) -> dict[str, Any] | None:  # or Searcher.FINISHED (a str)
        spec = self._spec
        while self.proposed < self._max_trials:
            flat = self._propose_new(trial_id)
            if flat is None:
                break
            number = self.proposed
            self.proposed += 1
            self._known[param_key(flat)] = self._live[trial_id].number
            fits, predicted, reason = self._screen(spec, flat)
            self._screened_in_a_row = 0 if fits else self._screened_in_a_row + 1
            if self._screened_in_a_row == CHEAPEST_AFTER:
                self._offer_cheapest()
            if fits:
                # Carried in the trial's config so the driver's callback sees them, also after a
                # restore; the trainable drops every elastune_* key before building the RunConfig.
                return {**nest(flat, sep="/"), NUMBER_KEY: number, ESTIMATE_KEY: predicted}
            ot_trial = self._live.pop(trial_id)
            ceiling = spec.constraints.memory_ceiling or 1
            # screened on its upper bound, which can be over the ceiling where the prediction is not
            over = max(predicted or ceiling, ceiling) - ceiling
            set_constraints(ot_trial, {"memory": over / ceiling + 1e-9, "quality": 0.0})
            self._study.tell(ot_trial, self._worst())
            SCREENED.setdefault(self._sweep_id, []).append(Screened(number, flat, predicted, reason))
        return Searcher.FINISHED  # type: ignore[return-value]

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate value for the trial (TPE ranks pruned trials by their last one). A
        report without the objective (an out-of-memory trial's final report has no samples/s) is
        none: Optuna would refuse None; on_trial_complete tells its outcome."""
        value = result.get(str(self.metric))
        ot_trial = self._live.get(trial_id)
        if value is None or ot_trial is None:  # or the trial was told already
            return
        ot_trial.report(float(value), step=int(result[TRAINING_ITERATION]))

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Tell the trial's outcome: COMPLETE with its constraint values when it reported the
        metric or constraints (an out-of-memory trial: the worst value), else PRUNED, or FAIL
        when it errored. Tune calls this once per trial; a second call is ignored."""
        ot_trial = self._live.pop(trial_id, None)
        if ot_trial is None:
            return
        metric = str(self.metric)
        constraints = _constraints_in(result or {})
        if result is not None and constraints:
            set_constraints(ot_trial, constraints)
            if result.get(metric) is None:  # an OOM trial has no throughput: the worst value
                result = {**result, metric: self._worst()}
        value = result.get(metric) if result else None
        state = TrialState.COMPLETE if value is not None else TrialState.FAIL if error else TrialState.PRUNED
        try:
            self._study.tell(ot_trial, None if value is None else float(value), state=state)
        except Exception as exc:  # as OptunaSearch did: one untold trial must not end the sweep
            log.warning("sweep %s: could not tell Optuna trial %s: %s", self._sweep_id, trial_id, exc)

    def save(self, checkpoint_path: str) -> None:
        """Write the searcher's state as JSON (`SearchState`) to the file Tune names."""
        live = {ot_trial.number: trial_id for trial_id, ot_trial in self._live.items()}
        state = SearchState(
            sweep_id=self._sweep_id,
            proposed=self.proposed,
            repeats=self.repeats,
            drawn=self.drawn,
            local=self.local,
            draw_state=_jsonable(self._rng.getstate()),
            trials=[_saved_trial(t, live.get(t.number)) for t in self._study.get_trials(deepcopy=False)],
        )
        # whole or not at all: a state torn by a full disk would make every resume refuse it
        atomic_write(Path(checkpoint_path), lambda f: f.write(state.model_dump_json(indent=1).encode()))

    def restore(self, checkpoint_path: str) -> None:
        """Rebuild the study from a state `save` wrote: finished trials are added as they were
        told; the trials Tune was running are asked again with their parameters (enqueued), so a
        resumed trial's outcome is told to the trial that proposed it."""
        state = load_search_state(Path(checkpoint_path))
        sampler = self._study.sampler
        if self._own_sampler:
            sampler = make_sampler(self._spec, seed=(self._spec.search.seed + len(state.trials)) % 2**32)
        self._study = _new_study(sampler, str(self.mode))
        self._live = {}
        for saved in sorted(state.trials, key=lambda t: t.number):
            if saved.state == "RUNNING":
                self._ask_again(saved)
            else:
                self._study.add_trial(_frozen(saved))
        self._known = {}
        for t in self._study.get_trials(deepcopy=False):
            if REPEAT_ATTR not in t.user_attrs:
                self._known.setdefault(param_key(t.params), t.number)
        self.proposed, self.repeats, self.drawn, self.local = state.proposed, state.repeats, state.drawn, state.local
        self._rng.setstate(_state_tuple(state.draw_state))

    # -- what tests and the tuner benchmark read

    @property
    def spec(self) -> SweepSpec:
        return self._spec

    def study(self) -> optuna.Study:
        """The Optuna study this searcher tells every outcome to."""
        return self._study

    # -- proposing

    def _propose_new(self, trial_id: str) -> dict[str, Any] | None:
        """The next config not proposed before, asked of the sampler under `trial_id`; None when
        there is none: every point of a discrete space is known, or the sampler only repeats and
        the space cannot be enumerated (then the search has settled)."""
        if self._points is not None and len(self._known) >= len(self._points):
            log.info("sweep %s: every one of the %d configs has been proposed", self._sweep_id, len(self._points))
            return None
        near = self._local_step()
        if near is not None:  # asked below like any proposal: a config enqueued before it may come first
            self._study.enqueue_trial(near)  # an ask takes these values (its sampler is skipped)
        for _ in range(MAX_REPEATS):
            flat = self._ask(trial_id)
            key = param_key(flat)
            if key not in self._known:
                self.local += near is not None and key == param_key(near)
                return flat
            self._tell_repeat(self._live.pop(trial_id), self._known[key])
        unseen = self._draw_unseen()
        if unseen is None:
            log.info("sweep %s: the sampler proposed only known configs %d times in a row", self._sweep_id, MAX_REPEATS)
            return None
        self.drawn += 1
        self._study.enqueue_trial(unseen)  # the next ask takes these values (its sampler is skipped)
        return self._ask(trial_id)

    def _ask(self, trial_id: str) -> dict[str, Any]:
        """Ask the study for a trial, run under `trial_id` until it is told; its parameters (flat)."""
        ot_trial = self._study.ask()
        self._live[trial_id] = ot_trial
        return self._space(ot_trial)

    def _ask_again(self, saved: SavedTrial) -> None:
        """Re-create a trial that was running when the state was saved, with its parameters."""
        self._study.enqueue_trial(saved.params)
        ot_trial = self._study.ask()
        self._space(ot_trial)
        for step, value in sorted(saved.intermediate_values.items()):
            ot_trial.report(value, step=step)
        if saved.tune_trial_id is not None:
            self._live[saved.tune_trial_id] = ot_trial

    def _tell_repeat(self, ot_trial: optuna.Trial, first: int) -> None:
        """Finish a repeated proposal with what its first proposal (trial `first`) got. The
        sampler's model then holds the point twice, as it would had the repeat been trained."""
        self.repeats += 1
        known = self._study.get_trials(deepcopy=False)[first]  # trial numbers index a study's trials
        ot_trial.set_user_attr(REPEAT_ATTR, first)
        if known.state == TrialState.COMPLETE:
            set_constraints(ot_trial, known.constraints)
            self._study.tell(ot_trial, known.value)
        else:  # still running (concurrent trials), or pruned/failed: no result to repeat
            self._study.tell(ot_trial, state=TrialState.FAIL)

    def _offer_cheapest(self) -> None:
        """Enqueue the space's cheapest config for the next ask, if it fits and was not proposed."""
        ceiling = self._spec.constraints.memory_ceiling
        if self._cheapest is None or ceiling is None:
            return
        bound, params = self._cheapest(self._spec)
        if bound <= ceiling and param_key(params) not in self._known:
            log.info("sweep %s: the ceiling binds; proposing the cheapest config next: %s", self._sweep_id, params)
            self._study.enqueue_trial(params)

    def _local_step(self) -> dict[str, Any] | None:
        """On a local step's turn, an unseen point nearest the best feasible config told so far (the
        fewest parameters that differ, a gated one present in only one of them counting as one),
        drawn among the nearest; None when it is not the turn or nothing feasible is known yet."""
        turn = self.proposed - self._startup
        if not self._local or turn < 0 or turn % LOCAL_EVERY:
            return None
        best = self._best_feasible()
        if best is None or self._points is None:
            return None
        unseen = [p for p in self._points if param_key(p) not in self._known]
        if not unseen:
            return None
        distance = {param_key(p): sum(p.get(k) != best.get(k) for k in p.keys() | best.keys()) for p in unseen}
        nearest = min(distance.values())
        return self._rng.choice([p for p in unseen if distance[param_key(p)] == nearest])

    def _best_feasible(self) -> dict[str, Any] | None:
        """The parameters of the best trial told COMPLETE with every constraint <= 0 (a repeat
        holds a known config's value: left out); None if there is none."""
        best: tuple[float, dict[str, Any]] | None = None
        sign = 1.0 if self.mode == "max" else -1.0
        for t in self._study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.value is None or REPEAT_ATTR in t.user_attrs or any(v > 0 for v in t.constraints.values()):
                continue
            if best is None or sign * t.value > best[0]:
                best = (sign * t.value, t.params)
        return None if best is None else dict(best[1])

    def _draw_unseen(self) -> dict[str, Any] | None:
        if self._points is None:
            return None
        unseen = [p for p in self._points if param_key(p) not in self._known]
        return self._rng.choice(unseen) if unseen else None

    def _worst(self) -> float:
        return 0.0 if self.mode == "max" else float("inf")


def _new_study(sampler: optuna.samplers.BaseSampler, mode: str) -> optuna.Study:
    """An in-memory study (the searcher saves it through Tune); no pruner: ASHA prunes."""
    direction: Literal["maximize", "minimize"] = "maximize" if mode == "max" else "minimize"
    return optuna.create_study(sampler=sampler, pruner=optuna.pruners.NopPruner(), direction=direction)


def load_search_state(path: Path) -> SearchState:
    """A saved searcher state, validated; says which file and what is wrong when it is not one."""
    try:
        return SearchState.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise ValueError(
            f"{path}: not a searcher state this elastune wrote ({STATE_FORMAT}; {where}: {first['msg']}); "
            "start a new sweep instead of resuming this one"
        ) from None


def _saved_trial(t: optuna.trial.FrozenTrial, tune_trial_id: str | None) -> SavedTrial:
    return SavedTrial(
        number=t.number,
        state=t.state.name,  # WAITING never outlives a suggest (enqueue, then ask)
        value=t.value if t.state != TrialState.FAIL else None,  # PRUNED: its last intermediate value
        params=t.params,
        distributions={name: distribution_to_json(d) for name, d in t.distributions.items()},
        user_attrs=t.user_attrs,
        constraints=t.constraints,
        intermediate_values=t.intermediate_values,
        tune_trial_id=tune_trial_id,
    )


def _frozen(saved: SavedTrial) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=TrialState[saved.state],
        value=saved.value,
        params=saved.params,
        distributions={name: json_to_distribution(d) for name, d in saved.distributions.items()},
        user_attrs=saved.user_attrs,
        intermediate_values=saved.intermediate_values,
        constraints=saved.constraints or None,
    )


def _jsonable(state: Any) -> list[Any]:
    """random.Random.getstate() (nested tuples) as JSON lists."""
    return [_jsonable(x) if isinstance(x, tuple) else x for x in state]


def _state_tuple(state: list[Any]) -> Any:
    return tuple(_state_tuple(x) if isinstance(x, list) else x for x in state)


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
