"""The searcher tells Optuna every outcome as COMPLETE with constraint values, never FAIL, so TPE
learns where the ceiling lies: screened proposals (never launched), OOM trials, slow trials."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from elastune.config import RunConfig
from elastune.tuning.search import SCREENED, ScreeningSearch
from elastune.tuning.spec import validate_sweep_spec
from elastune.tuning.trial import oom_metrics

from tests.integration.sweep_specs import tiny_spec


def searcher(**constraints: Any) -> ScreeningSearch:
    raw = tiny_spec(constraints=constraints, search={"algorithm": "random"})
    return ScreeningSearch(validate_sweep_spec(raw), "unit", metric="samples_per_s", mode="max")


def test_an_oom_trial_is_a_constraint_violation_not_a_failure() -> None:
    s = searcher()
    config = s.suggest("t0")
    assert isinstance(config, dict) and config["elastune_number"] == 0
    s.on_trial_complete("t0", result=oom_metrics(RunConfig(), "out of memory"))
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
    trials = s.study().get_trials(deepcopy=False)
    assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(t.constraints["memory"] > 0 for t in trials)
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
