"""The searcher tells Optuna every outcome as COMPLETE with constraint values, never FAIL, so TPE
learns where the ceiling lies: screened proposals (never launched), OOM trials, slow trials. And it
never hands Tune a config twice: a repeat is told its known result, and the space's end is an end.
Its state survives a save and restore as JSON, and one seed gives one sequence of proposals."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
from elastune.tuning.pricing import screen
from elastune.tuning.report import oom_report
from elastune.tuning.search import MAX_REPEATS, SCREENED, ScreeningSearch, make_sampler, param_key
from elastune.tuning.space import grid_points
from elastune.tuning.spec import validate_sweep_spec

from tests.integration.sweep_specs import TINY_BASE, tiny_spec

# Optuna's deprecations fail these tests (the searcher is written against Optuna's current API), and
# so does an ExperimentalWarning: the searcher filters the one it expects where the sampler is made.
pytestmark = pytest.mark.filterwarnings(
    "error::DeprecationWarning:optuna", "error::optuna.exceptions.ExperimentalWarning"
)


def searcher(**constraints: Any) -> ScreeningSearch:
    raw = tiny_spec(constraints=constraints, search={"algorithm": "random"})
    return ScreeningSearch(validate_sweep_spec(raw), "unit", metric="samples_per_s", mode="max")


def test_an_oom_trial_is_a_constraint_violation_not_a_failure() -> None:
    s = searcher()
    config = s.suggest("t0")
    assert isinstance(config, dict) and config["elastune_number"] == 0
    # Tune hands every report to on_trial_result first: the OOM report has no samples/s to report
    s.on_trial_result("t0", {**oom_report("out of memory").to_metrics(), "training_iteration": 1})
    s.on_trial_complete("t0", result=oom_report("out of memory").to_metrics())
    (trial,) = s.study().get_trials(deepcopy=False)
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.constraints["memory"] > 0 and trial.value == 0.0


def test_flattened_constraints_from_tune_are_read() -> None:
    s = searcher()
    s.suggest("t0")
    s.on_trial_complete(
        "t0", result={"samples_per_s": 10.0, "elastune_constraints/memory": -0.5, "elastune_constraints/quality": 0.2}
    )
    (trial,) = s.study().get_trials(deepcopy=False)
    assert trial.constraints == {"memory": -0.5, "quality": 0.2} and trial.value == 10.0


def test_over_ceiling_proposals_are_told_at_once_and_count_against_the_budget() -> None:
    s = searcher(memory_ceiling="1MiB")  # below everything: every proposal is screened
    SCREENED.pop("unit", None)
    assert s.suggest("t0") == "FINISHED"  # 4 proposals, all screened, budget spent
    trials = s.study().get_trials(deepcopy=False)  # random search repeats: told from memory, no proposals
    assert len([t for t in trials if "elastune_repeat_of" not in t.user_attrs]) == 4
    assert all(t.state == optuna.trial.TrialState.COMPLETE and t.constraints["memory"] > 0 for t in trials)
    screened = SCREENED.pop("unit")
    assert [x.number for x in screened] == [0, 1, 2, 3]
    assert all(x.estimated_peak_bytes and x.estimated_peak_bytes > 2**20 for x in screened)


@pytest.mark.parametrize("algorithm", ["tpe", "random", "grid"])
def test_every_algorithm_proposes_valid_configs(algorithm: str) -> None:
    spec = validate_sweep_spec(tiny_spec(search={"algorithm": algorithm}))
    s = ScreeningSearch(spec, "unit-" + algorithm, metric="samples_per_s", mode="max")
    seen = []
    for i in range(4):
        config = s.suggest(f"t{i}")
        assert isinstance(config, dict)
        params = {k: v for k, v in config.items() if not k.startswith("elastune_")}
        spec.trial_config(params)
        seen.append(tuple(sorted(params.items())))
        s.on_trial_complete(f"t{i}", result={"samples_per_s": float(i)})
    if algorithm == "grid":
        assert len(set(seen)) == 4  # the whole grid, once each
        assert s.suggest("t4") == "FINISHED"


# -- repeats: the searcher never hands Tune a config it has already proposed ---------------------


class _Settled(optuna.samplers.BaseSampler):
    """A sampler that has settled: always each parameter's first choice (or a range's low end)."""

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        if isinstance(param_distribution, optuna.distributions.CategoricalDistribution):
            return param_distribution.choices[0]
        return param_distribution.low


CONDITIONAL = {  # full x 2 micro + hashed x 2 compression x 2 micro: 6 configs
    "embedding.strategy": {"type": "choice", "values": ["full", "hashed"]},
    "embedding.compression": {"type": "choice", "values": [4, 16], "when": {"embedding.strategy": ["hashed"]}},
    "batch.micro": {"type": "choice", "values": [64, 128]},
}


def params_of(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if not k.startswith("elastune_")}


def drain(s: ScreeningSearch, limit: int = 50) -> list[dict[str, Any]]:
    """Suggest and complete until the searcher ends; each trial's value is its index."""
    configs = []
    for i in range(limit):
        config = s.suggest(f"t{i}")
        if config == "FINISHED":
            return configs
        assert isinstance(config, dict)
        configs.append(params_of(config))
        s.on_trial_complete(f"t{i}", result={"samples_per_s": float(i)})
    raise AssertionError(f"the searcher did not end within {limit} suggestions")


@pytest.mark.parametrize("algorithm", ["tpe", "random", "grid"])
@pytest.mark.parametrize("parameters", [None, CONDITIONAL], ids=["plain", "conditional"])
def test_each_config_is_handed_out_once_then_the_sweep_ends(algorithm: str, parameters: Any) -> None:
    changes: dict[str, Any] = {"search": {"algorithm": algorithm}, "budget": {"max_trials": 40}}
    if parameters is not None:
        changes["parameters"] = parameters
    spec = validate_sweep_spec(tiny_spec(**changes))
    s = ScreeningSearch(spec, "unit-once", metric="samples_per_s", mode="max")
    configs = drain(s)
    expected = grid_points(spec.parameters)
    assert sorted(map(param_key, configs)) == sorted(map(param_key, expected))  # each once, all of them
    assert s.proposed == len(expected)


def test_a_repeat_is_told_the_known_result_and_an_unseen_config_is_drawn() -> None:
    spec = validate_sweep_spec(tiny_spec(search={"algorithm": "tpe"}))
    s = ScreeningSearch(spec, "unit-repeat", metric="samples_per_s", mode="max", sampler=_Settled())
    first = s.suggest("t0")
    assert isinstance(first, dict)
    s.on_trial_complete("t0", result={"samples_per_s": 7.0, "elastune_constraints": {"memory": -0.5, "quality": 0.1}})
    second = s.suggest("t1")
    assert isinstance(second, dict) and params_of(second) != params_of(first)
    assert second["elastune_number"] == 1  # repeats are not trials: they do not count against the budget
    assert (s.repeats, s.drawn) == (MAX_REPEATS, 1)
    repeats = [t for t in s.study().get_trials(deepcopy=False) if "elastune_repeat_of" in t.user_attrs]
    assert len(repeats) == MAX_REPEATS
    for t in repeats:
        assert t.state == optuna.trial.TrialState.COMPLETE and t.value == 7.0
        assert t.constraints == {"memory": -0.5, "quality": 0.1} and t.params == params_of(first)


def test_a_repeat_of_a_running_trial_is_withdrawn_not_told_a_result() -> None:
    spec = validate_sweep_spec(tiny_spec(search={"algorithm": "tpe"}))
    s = ScreeningSearch(spec, "unit-running", metric="samples_per_s", mode="max", sampler=_Settled())
    first, second = s.suggest("t0"), s.suggest("t1")  # two at a time; t0 has not finished
    assert isinstance(first, dict) and isinstance(second, dict) and params_of(first) != params_of(second)
    repeats = [t for t in s.study().get_trials(deepcopy=False) if "elastune_repeat_of" in t.user_attrs]
    assert len(repeats) == MAX_REPEATS and all(t.state == optuna.trial.TrialState.FAIL for t in repeats)


def test_screened_configs_are_screened_once() -> None:
    raw = tiny_spec(constraints={"memory_ceiling": "1MiB"}, budget={"max_trials": 40}, search={"algorithm": "random"})
    spec = validate_sweep_spec(raw)
    s = ScreeningSearch(spec, "unit-screened-once", metric="samples_per_s", mode="max")
    SCREENED.pop("unit-screened-once", None)
    assert s.suggest("t0") == "FINISHED"  # all 4 screened, then the space is exhausted
    screened = SCREENED.pop("unit-screened-once")
    assert len({param_key(x.params) for x in screened}) == len(screened) == 4


def test_a_continuous_space_ends_when_the_sampler_only_repeats() -> None:
    """A space that cannot be enumerated has no unseen point to draw: a clear end, not a hang."""
    parameters = {"optimizer.lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True}}
    spec = validate_sweep_spec(tiny_spec(parameters=parameters, search={"algorithm": "tpe"}))
    s = ScreeningSearch(spec, "unit-continuous", metric="samples_per_s", mode="max", sampler=_Settled())
    assert isinstance(s.suggest("t0"), dict)
    s.on_trial_complete("t0", result={"samples_per_s": 1.0})
    assert s.suggest("t1") == "FINISHED"
    assert (s.proposed, s.repeats, s.drawn) == (1, MAX_REPEATS, 0)


@pytest.mark.parametrize(
    ("device", "gpus", "priced"),
    [("auto", 0.5, "cuda"), ("auto", 0, "cpu"), ("cuda", 1, "cuda"), ("cpu", 1, "cpu")],
)
def test_proposals_are_priced_for_the_trials_device_not_the_drivers(device: str, gpus: float, priced: str) -> None:
    # This machine has no GPU, as a cluster's head node often has none: a GPU trial is still
    # priced with the CUDA model (before, `auto` priced the driver's CPU and `cuda` was an error).
    import torch
    from elastune.memory.estimate import estimate

    raw = tiny_spec(
        base={**TINY_BASE, "device": device},
        constraints={"memory_ceiling": "64GiB"},
        resources={"gpus_per_trial": gpus},
        edo={"mode": "off"},
    )
    spec = validate_sweep_spec(raw)
    params = {"embedding.strategy": "hashed", "batch.micro": 64}
    cfg = spec.trial_config(params)
    assert spec.trial_device(cfg) == priced
    fits, predicted, _ = screen(spec, params)
    assert fits and predicted == estimate(cfg, torch.device(priced)).peak_bytes
    assert estimate(cfg, torch.device("cuda")).peak_bytes != estimate(cfg, torch.device("cpu")).peak_bytes


# -- pruned and failed trials: told as OptunaSearch told them ------------------------------------


def test_a_trial_that_ends_without_the_metric_is_pruned_and_an_errored_one_failed() -> None:
    s = searcher()
    for i in range(3):
        assert isinstance(s.suggest(f"t{i}"), dict)
    s.on_trial_result("t0", {"samples_per_s": 5.0, "training_iteration": 3})
    s.on_trial_complete("t0", result=None)  # stopped by Tune (e.g. the time budget) after a report
    s.on_trial_complete("t1", error=True)
    s.on_trial_complete("t2", result={})  # stopped before its first report
    s.on_trial_complete("t2", result={"samples_per_s": 9.0})  # Tune tells once; a second word is ignored
    t0, t1, t2 = s.study().get_trials(deepcopy=False)
    assert (t0.state, t0.intermediate_values, t0.value) == (optuna.trial.TrialState.PRUNED, {3: 5.0}, 5.0)
    assert (t1.state, t1.value) == (optuna.trial.TrialState.FAIL, None)
    assert (t2.state, t2.value) == (optuna.trial.TrialState.PRUNED, None)


# -- seeds: one seed, one sequence of proposals ------------------------------------------------


def proposals(algorithm: str, seed: int, n: int = 6) -> list[dict[str, Any]]:
    changes = {"parameters": CONDITIONAL, "search": {"algorithm": algorithm, "seed": seed}, "budget": {"max_trials": n}}
    s = ScreeningSearch(validate_sweep_spec(tiny_spec(**changes)), "unit-seed", metric="samples_per_s", mode="max")
    return drain(s)


@pytest.mark.parametrize("algorithm", ["tpe", "random", "grid"])
def test_the_same_seed_proposes_the_same_configs_in_the_same_order(algorithm: str) -> None:
    first = proposals(algorithm, seed=3)
    assert len(first) == 6 and first == proposals(algorithm, seed=3)
    orders = {tuple(map(param_key, proposals(algorithm, seed))) for seed in range(4)}
    assert len(orders) > 1, "the seed changes nothing"


def test_making_the_samplers_warns_of_nothing() -> None:
    """BruteForceSampler and TPE's `group` are experimental in Optuna: chosen on purpose, so the
    warning is filtered where the sampler is made, not shown on every sweep's console."""
    for algorithm, parameters in [("grid", None), ("tpe", CONDITIONAL), ("tpe", None), ("random", None)]:
        changes: dict[str, Any] = {"search": {"algorithm": algorithm}}
        if parameters:
            changes["parameters"] = parameters
        spec = validate_sweep_spec(tiny_spec(**changes))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            make_sampler(spec)
            ScreeningSearch(spec, "unit-quiet", metric="samples_per_s", mode="max")


# -- save and restore: JSON the searcher writes, a study rebuilt from it ----------------------------


def snapshot(s: ScreeningSearch) -> list[tuple[Any, ...]]:
    return [
        (t.number, t.state, t.value, t.params, t.distributions, t.constraints, t.user_attrs, t.intermediate_values)
        for t in s.study().get_trials(deepcopy=False)
    ]


def half_done(tmp_path: Path) -> tuple[ScreeningSearch, Path, dict[str, Any]]:  # searcher, state, running
    """A TPE sweep over the conditional space saved mid-way: three trials told (one out of memory),
    repeats told from memory, and one trial still running with an intermediate report."""
    spec = validate_sweep_spec(
        tiny_spec(parameters=CONDITIONAL, search={"algorithm": "tpe"}, budget={"max_trials": 40})
    )
    s = ScreeningSearch(spec, "unit-save", metric="samples_per_s", mode="max", sampler=_Settled())
    for i in range(3):
        assert isinstance(s.suggest(f"t{i}"), dict)
    s.on_trial_complete("t0", result={"samples_per_s": 7.0, "elastune_constraints": {"memory": -0.5, "quality": 0.1}})
    s.on_trial_complete("t1", result=oom_report("out of memory").to_metrics())
    s.on_trial_complete("t2", result={"samples_per_s": 3.0, "elastune_constraints/memory": -0.1})
    running = s.suggest("t3")
    assert isinstance(running, dict)
    s.on_trial_result("t3", {"samples_per_s": 2.5, "training_iteration": 1})
    path = tmp_path / "searcher-state.json"
    s.save(str(path))
    return s, path, running


def test_save_writes_json_and_restore_rebuilds_the_same_study(tmp_path: Path) -> None:
    s, path, _ = half_done(tmp_path)
    saved = json.loads(path.read_text())  # JSON, not a pickle: loading it runs no code
    assert saved["format"] == "elastune.search/1" and saved["proposed"] == 4
    assert [t["tune_trial_id"] for t in saved["trials"] if t["state"] == "RUNNING"] == ["t3"]
    restored = ScreeningSearch(s.spec, "unit-save", metric="samples_per_s", mode="max")
    restored.restore(str(path))
    assert snapshot(restored) == snapshot(s)
    assert (
        (restored.proposed, restored.repeats, restored.drawn)
        == (s.proposed, s.repeats, s.drawn)
        == (4, 3 * MAX_REPEATS, 3)
    )


def test_a_restored_search_goes_on_where_it_stopped(tmp_path: Path) -> None:
    s, path, running = half_done(tmp_path)
    restored = ScreeningSearch(s.spec, "unit-save", metric="samples_per_s", mode="max")
    restored.restore(str(path))
    # the trial Tune was running ends after the resume: its own Optuna trial is told, constraints and all
    restored.on_trial_complete("t3", result={"samples_per_s": 4.0, "elastune_constraints/memory": 0.2})
    t3 = restored.study().get_trials(deepcopy=False)[-1]
    assert t3.params == params_of(running) and t3.state == optuna.trial.TrialState.COMPLETE
    assert (t3.value, t3.constraints, t3.intermediate_values) == (4.0, {"memory": 0.2}, {1: 2.5})
    # and it proposes only what was not proposed before, then ends with the space
    before = [
        params_of(t.params) for t in s.study().get_trials(deepcopy=False) if "elastune_repeat_of" not in t.user_attrs
    ]
    after = drain(restored)
    assert sorted(map(param_key, before + after)) == sorted(map(param_key, grid_points(s.spec.parameters)))
    assert restored.proposed == 6


def test_restoring_one_state_twice_proposes_the_same(tmp_path: Path) -> None:
    _, path, _ = half_done(tmp_path)  # then resumed as a seeded random search: its draws must repeat
    spec = validate_sweep_spec(
        tiny_spec(parameters=CONDITIONAL, search={"algorithm": "random"}, budget={"max_trials": 40})
    )
    runs = []
    for _ in range(2):
        restored = ScreeningSearch(spec, "unit-save", metric="samples_per_s", mode="max")
        restored.restore(str(path))
        runs.append(drain(restored))
    assert runs[0] == runs[1] and len(runs[0]) == 2


def test_a_state_that_is_not_ours_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "searcher-state-x.pkl"
    path.write_bytes(b"\x80\x04K\x01.")  # a pickle: never loaded
    with pytest.raises(ValueError, match=r"searcher-state-x\.pkl: not a searcher state this elastune wrote"):
        searcher().restore(str(path))


# -- local steps: after TPE's startup, every second proposal is nearest the best feasible config --

LOCAL_SPACE = {  # (full + qr + hashed x 2 compressions) x 3 micro-batches: 12 configs
    "embedding.strategy": {"type": "choice", "values": ["full", "qr", "hashed"]},
    "embedding.compression": {"type": "choice", "values": [4, 16], "when": {"embedding.strategy": ["hashed"]}},
    "batch.micro": {"type": "choice", "values": [32, 64, 128]},
}
STRATEGY_SPEED = {"full": 10.0, "qr": 20.0, "hashed": 30.0}


def _fits(spec: Any, params: Any) -> tuple[bool, int | None, str]:
    return True, None, ""  # no ceiling in these specs: nothing to price


def _outcome(params: dict[str, Any]) -> dict[str, Any]:
    """A made-up measurement: hashed fastest, then qr, then full, bigger micro-batches faster; a
    hashed config at micro 128 is the fastest of all but misses the quality bar (infeasible)."""
    value = STRATEGY_SPEED[params["embedding.strategy"]] + params["batch.micro"] / 32
    quality = 0.1 if params["embedding.strategy"] == "hashed" and params["batch.micro"] == 128 else -0.1
    return {"samples_per_s": value, "elastune_constraints": {"memory": -0.5, "quality": quality}}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Parameters that differ; one present in only one of them (a gated one) counts as one."""
    return sum(a.get(k) != b.get(k) for k in set(a) | set(b))


def test_after_the_startup_every_second_proposal_is_nearest_the_best_feasible_config() -> None:
    spec = validate_sweep_spec(
        tiny_spec(parameters=LOCAL_SPACE, search={"algorithm": "tpe"}, budget={"max_trials": 12})
    )
    s = ScreeningSearch(spec, "unit-local", metric="samples_per_s", mode="max", sampler=_Settled(), screener=_fits)
    startup = 3  # max(3, min(10, 12 // 4)): the sampler's startup for a budget of 12
    told: list[dict[str, Any]] = []
    local_turns = 0
    for i in range(12):
        config = s.suggest(f"t{i}")
        assert isinstance(config, dict), config
        params = params_of(config)
        feasible = [p for p in told if _outcome(p)["elastune_constraints"]["quality"] <= 0]
        if i >= startup and (i - startup) % 2 == 0 and feasible:
            local_turns += 1
            best = max(feasible, key=lambda p: _outcome(p)["samples_per_s"])
            unseen = [p for p in grid_points(spec.parameters) if param_key(p) not in {param_key(t) for t in told}]
            nearest = min(_differences(p, best) for p in unseen)
            assert _differences(params, best) == nearest, (i, params, best)
        told.append(params)
        s.on_trial_complete(f"t{i}", result=_outcome(params))
    assert s.suggest("t12") == "FINISHED"
    assert local_turns == s.local == 5  # proposals 3, 5, 7, 9 and 11
    assert sorted(map(param_key, told)) == sorted(map(param_key, grid_points(spec.parameters)))


@pytest.mark.parametrize(("algorithm", "local_steps"), [("random", None), ("grid", None), ("tpe", False)])
def test_random_search_the_grid_and_tpe_told_not_to_take_no_local_steps(algorithm: str, local_steps: Any) -> None:
    spec = validate_sweep_spec(
        tiny_spec(parameters=LOCAL_SPACE, search={"algorithm": algorithm}, budget={"max_trials": 12})
    )
    s = ScreeningSearch(
        spec, "unit-no-local", metric="samples_per_s", mode="max", screener=_fits, local_steps=local_steps
    )
    for i in range(12):
        config = s.suggest(f"t{i}")
        assert isinstance(config, dict)
        s.on_trial_complete(f"t{i}", result=_outcome(params_of(config)))
    assert s.local == 0


def test_a_local_step_behind_a_known_config_in_the_queue_is_still_no_repeat() -> None:
    """A config queued before a local step (the cheapest offer) is asked first; if it is known by
    then, it is told as a repeat, and the local step's config is what Tune gets, once."""
    raw = tiny_spec(parameters=LOCAL_SPACE, search={"algorithm": "tpe"}, budget={"max_trials": 12})
    s = ScreeningSearch(validate_sweep_spec(raw), "unit-queue", metric="samples_per_s", mode="max", screener=_fits)
    told: list[dict[str, Any]] = []
    for i in range(3):  # the startup: 3 proposals for a budget of 12
        config = s.suggest(f"t{i}")
        assert isinstance(config, dict)
        told.append(params_of(config))
        s.on_trial_complete(f"t{i}", result=_outcome(told[-1]))
    s.study().enqueue_trial(told[0])  # stale: proposed and told already
    config = s.suggest("t3")  # proposal 3: a local step's turn
    assert isinstance(config, dict)
    assert param_key(params_of(config)) not in {param_key(t) for t in told}
    assert s.local == 1 and s.repeats >= 1
