"""SweepSpec: every shipped spec validates; bad specs fail before anything launches, each problem
named with its field path, the value and the fix; the CLI exits 2 and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.errors import ConfigError
from elastune.tuning.spec import SweepSpec, load_sweep_spec, validate_sweep_spec
from elastune.tuning.sweep import check_ceiling

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "search_spaces").glob("*.yaml"))

BASE = {"data": {"rows_scale": 0.001}, "model": {"embedding_dim": 8}, "steps": 6, "warmup_steps": 1}


def spec(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "t",
        "base": dict(BASE),
        "parameters": {
            "embedding.strategy": {"type": "choice", "values": ["full", "hashed"]},
            "batch.micro": {"type": "choice", "values": [64, 128]},
        },
    }
    raw.update(changes)
    return raw


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_sweep_spec(raw)
    return [str(p) for p in info.value.problems]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_spec_validates(path: Path) -> None:
    parsed = load_sweep_spec(path)
    assert parsed.parameters
    # Every proposal the space can make is a valid RunConfig (the ends of each range, every choice).
    from elastune.tuning.space import candidate_points

    for params in candidate_points(parsed.parameters):
        parsed.trial_config(params)


def test_the_quick_and_full_specs_are_shipped() -> None:
    assert {"dlrm_quick.yaml", "dlrm_full.yaml", "lm_quick.yaml", "lm_full.yaml"} <= {p.name for p in SHIPPED}


def test_unknown_parameter_key_gets_did_you_mean() -> None:
    raw = spec(parameters={"embedding.stratgy": {"type": "choice", "values": ["full"]}})
    (only,) = problems(raw)
    assert "parameters.embedding.stratgy" in only and "did you mean 'embedding.strategy'" in only


def test_empty_choice_is_refused() -> None:
    raw = spec(parameters={"precision": {"type": "choice", "values": []}})
    assert any("parameters.precision.choice.values" in p for p in problems(raw))


def test_a_choice_value_the_run_config_refuses_is_named_with_its_index() -> None:
    raw = spec(parameters={"precision": {"type": "choice", "values": ["fp32", "fp8"]}})
    (only,) = problems(raw)
    assert only.startswith("parameters.precision.values[1]='fp8'") and "must be one of" in only


def test_condition_on_a_parameter_that_does_not_exist() -> None:
    params = {
        "embedding.strategy": {"type": "choice", "values": ["full", "half"]},
        "optimizer.sparse": {"type": "choice", "values": ["sgd"], "when": {"embedding.strategi": ["half"]}},
    }
    (only,) = problems(spec(parameters=params))
    assert "parameters.optimizer.sparse.when.embedding.strategi" in only and "did you mean" in only


def test_condition_on_a_value_the_gate_never_takes() -> None:
    params = {
        "embedding.strategy": {"type": "choice", "values": ["full", "half"]},
        "optimizer.sparse": {"type": "choice", "values": ["sgd"], "when": {"embedding.strategy": ["int8"]}},
    }
    assert any("never takes" in p for p in problems(spec(parameters=params)))


def test_values_that_clash_in_combination_are_refused() -> None:
    params = {
        "embedding.strategy": {"type": "choice", "values": ["full", "half"]},
        "optimizer.sparse": {"type": "choice", "values": ["adam", "sgd"]},  # adam cannot update half rows
    }
    (only,) = problems(spec(parameters=params))
    assert "'embedding.strategy': 'half'" in only and "'optimizer.sparse': 'adam'" in only
    assert "add a `when` condition" in only


def test_range_with_low_above_high_and_log_of_zero() -> None:
    params = {
        "batch.micro": {"type": "int", "low": 512, "high": 64},
        "optimizer.lr": {"type": "float", "low": 0.0, "high": 0.1, "log": True},
    }
    found = problems(spec(parameters=params))
    assert any(p.startswith("parameters.batch.micro.low=512") for p in found)
    assert any(p.startswith("parameters.optimizer.lr.low=0.0") and "log scale" in p for p in found)


def test_effective_batch_needs_micro_values_that_divide_it() -> None:
    raw = spec(constraints={"effective_batch": 256})
    raw["parameters"]["batch.micro"] = {"type": "choice", "values": [64, 96]}
    (only,) = problems(raw)
    assert "parameters.batch.micro=[96]" in only and "must divide constraints.effective_batch=256" in only


def test_bad_base_config_is_reported_under_base() -> None:
    raw = spec(base={**BASE, "batch": {"micro": 0}, "precison": "bf16"})
    found = problems(raw)
    assert any(p.startswith("base.batch.micro=0") for p in found)
    assert any(p.startswith("base.precison") and "did you mean" in p for p in found)


def test_every_problem_is_reported_at_once() -> None:
    raw = spec(budget={"max_trials": 0, "max_concurent": 2}, resources={"cpus_per_trial": 0})
    found = problems(raw)
    assert len(found) == 3, found


def test_memory_ceiling_accepts_sizes_and_refuses_nonsense() -> None:
    assert validate_sweep_spec(spec(constraints={"memory_ceiling": "1.5GiB"})).constraints.memory_ceiling == int(
        1.5 * 2**30
    )
    (only,) = problems(spec(constraints={"memory_ceiling": "lots"}))
    assert "constraints.memory_ceiling" in only and "512MiB" in only


def test_ceiling_below_the_smallest_config_fails_preflight() -> None:
    parsed = validate_sweep_spec(spec(constraints={"memory_ceiling": "1MiB"}))
    with pytest.raises(ConfigError) as info:
        check_ceiling(parsed)
    (only,) = [str(p) for p in info.value.problems]
    assert only.startswith("constraints.memory_ceiling") and "below the smallest config" in only


def test_preflight_stops_at_the_first_config_under_the_ceiling() -> None:
    from elastune.tuning.pricing import cheapest_estimate
    from elastune.tuning.space import candidate_points

    parsed = validate_sweep_spec(spec())
    first = candidate_points(parsed.parameters)[0]  # full x micro 64: not the cheapest (hashed is 4x smaller)
    smallest, cheapest = cheapest_estimate(parsed)
    assert cheapest != first
    # Any config fits under a generous ceiling: the first one priced answers the preflight.
    peak, params = cheapest_estimate(parsed, enough=smallest * 100)
    assert params == first and peak > smallest
    # Under a ceiling only the cheapest fits, every point is priced and the cheapest is found.
    assert cheapest_estimate(parsed, enough=smallest) == (smallest, cheapest)


def test_trial_config_derives_accumulation_and_steps() -> None:
    parsed = SweepSpec.model_validate(spec(constraints={"effective_batch": 256}, budget={"trial_samples": 2560}))
    cfg = parsed.trial_config({"batch.micro": 64, "embedding.strategy": "hashed"})
    assert (cfg.batch.micro, cfg.batch.accum, cfg.steps) == (64, 4, 10)
    assert cfg.embedding.strategy == "hashed"
    assert 1 <= cfg.warmup_steps < cfg.steps


def sweep_cli(tmp_path: Path, raw: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`elastune sweep bad.yaml` in a fresh process, in `tmp_path` (its home and store there too)."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**os.environ, "ELASTUNE_HOME": str(tmp_path / "home"), "MLFLOW_TRACKING_URI": ""}
    return subprocess.run(
        [sys.executable, "-m", "elastune.cli", "sweep", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_bad_spec_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    proc = sweep_cli(tmp_path, spec(parameters={"precision": {"type": "choice", "values": []}}))
    assert proc.returncode == 2, proc.stderr
    assert "parameters.precision.choice.values" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # no mlflow.db, no sweep state


def test_cli_flags_override_the_spec(tmp_path: Path) -> None:
    parsed = load_sweep_spec(SHIPPED[0], ["budget.max_trials=3", "constraints.memory_ceiling=1GiB"])
    assert parsed.budget.max_trials == 3 and parsed.constraints.memory_ceiling == 2**30


def test_workers_per_trial_must_be_at_least_one() -> None:
    (only,) = problems(spec(resources={"workers_per_trial": 0}))
    assert only.startswith("resources.workers_per_trial=0")


def test_data_parallel_trials_refuse_what_ddp_cannot_average() -> None:
    raw = spec(
        parameters={
            "embedding.strategy": {"type": "choice", "values": ["full", "half"]},
            "optimizer.sparse": {"type": "choice", "values": ["adam", "rowwise_adagrad"]},
        },
        resources={"workers_per_trial": 2, "gpus_per_trial": 0.5},
        edo={"mode": "off"},
    )
    found = problems(raw)
    assert len(found) == 3, found
    strategy, sparse, gpus = (
        next(p for p in found if p.startswith(prefix))
        for prefix in (
            "parameters.embedding.strategy.values[1]='half'",
            "parameters.optimizer.sparse.values[1]='rowwise_adagrad'",
            "resources.gpus_per_trial=0.5",
        )
    )
    for problem in (strategy, sparse):
        assert "DDP cannot average it" in problem and "optimizer.sparse=adam" in problem
        assert "set resources.workers_per_trial: 1" in problem
    assert "one whole GPU" in gpus


def test_data_parallel_base_and_effective_batch_are_checked() -> None:
    raw = spec(
        base={**BASE, "optimizer": {"sparse": "sgd"}},
        constraints={"effective_batch": 256},
        resources={"workers_per_trial": 3},
    )
    found = problems(raw)
    assert any(p.startswith("base.optimizer.sparse='sgd'") and "DDP" in p for p in found), found
    assert any(p.startswith("constraints.effective_batch=256") and "workers_per_trial=3" in p for p in found), found
    # an even split: each worker's share must be divisible by every micro-batch
    raw = spec(constraints={"effective_batch": 256}, resources={"workers_per_trial": 4})
    (only,) = problems(raw)
    assert only.startswith("parameters.batch.micro=[128]") and "share" in only and "64" in only


def test_data_parallel_trial_config_is_one_workers_share() -> None:
    raw = spec(constraints={"effective_batch": 256}, budget={"trial_samples": 2560}, resources={"workers_per_trial": 2})
    cfg = validate_sweep_spec(raw).trial_config({"batch.micro": 64, "embedding.strategy": "hashed"})
    # a step is 2 workers x 64 x 2 = 256 samples; 2560 samples are 10 steps
    assert (cfg.batch.micro, cfg.batch.accum, cfg.steps) == (64, 2, 10)


def test_a_trial_records_the_threads_its_cpus_give_it() -> None:
    raw = yaml.safe_load(SHIPPED[0].read_text())
    for cpus, threads in ((1, 1), (0.5, 1), (3.7, 3)):
        raw["resources"] = {"cpus_per_trial": cpus, "gpus_per_trial": 0}
        spec = SweepSpec.model_validate(raw)
        assert spec.reference_config().threads == threads
    raw["base"]["threads"] = 2  # the spec's own word stands
    assert SweepSpec.model_validate(raw).trial_config({}).threads == 2


SHIPPED_WITH_EXAMPLES = [*SHIPPED, *sorted((ROOT / "examples" / "two_tower" / "search_spaces").glob("*.yaml"))]


@pytest.mark.parametrize("path", SHIPPED_WITH_EXAMPLES, ids=[p.name for p in SHIPPED_WITH_EXAMPLES])
def test_every_shipped_spec_passes_its_preflight_and_its_reference_fits(path: Path) -> None:
    """The preflight prices the cheapest corner (it once failed on lm_full: the pricing rebuilt the
    LM without its width); a reference over the ceiling would leave the sweep without a quality bar."""
    from elastune.tuning.pricing import predicted_peak
    from elastune.tuning.sweep import check_ceiling

    spec = load_sweep_spec(path)
    check_ceiling(spec)
    ceiling = spec.constraints.memory_ceiling
    assert ceiling is None or predicted_peak(spec, dict(spec.constraints.reference)) <= ceiling
