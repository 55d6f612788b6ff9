"""Per-table strategies: `embedding.overrides` store the tables each override matches (by name glob
or size) differently, applied in order; the run builds, estimates and trains the mix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.config import EmbeddingConfig
from elastune.embeddings import get_strategy
from elastune.embeddings.swap import strategy_modules
from elastune.validate import load_run_config
from elastune.workloads import build_workload

from tests.conftest import TINY

SKEWED = ["data.table_rows=[200000, 3000, 300, 50]", "optimizer.sparse=rowwise_adagrad"]
BIG_INT8 = "embedding.overrides=[{match: {min_rows: 100000}, strategy: int8}]"


def _args(*sets: str) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def test_overrides_apply_in_order_by_glob_and_size() -> None:
    cfg = EmbeddingConfig.model_validate(
        {
            "strategy": "full",
            "overrides": [
                {"match": {"min_rows": 1000}, "strategy": "hashed", "compression": 4},
                {"match": {"name": "T1"}, "compression": 16},  # a later override wins the field both set
                {"match": {"name": "T[34]", "min_rows": 100}, "strategy": "half"},
            ],
        }
    )
    assert (cfg.for_table("T1", 5000).strategy, cfg.for_table("T1", 5000).compression) == ("hashed", 16)
    assert (cfg.for_table("T2", 5000).strategy, cfg.for_table("T2", 5000).compression) == ("hashed", 4)
    assert cfg.for_table("T3", 300).strategy == "half" and cfg.for_table("T4", 50).strategy == "full"
    assert cfg.for_table("T4", 50).overrides == []


def test_the_big_table_takes_its_override_and_the_run_builds_trains_and_prices_the_mix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from elastune.training.loop import train

    cfg = load_run_config(None, [*TINY, *SKEWED, BIG_INT8])
    model = build_workload(cfg).build_model()
    kinds = sorted(type(m).__name__ for m in strategy_modules(model))
    assert kinds == ["FullEmbedding", "Int8Embedding"], kinds
    assert train(cfg).samples > 0
    assert main(["estimate", "--format", "json", *_args(*TINY, *SKEWED, BIG_INT8)]) == 0
    mixed = json.loads(capsys.readouterr().out)
    assert main(["estimate", "--format", "json", *_args(*TINY, *SKEWED)]) == 0
    full = json.loads(capsys.readouterr().out)
    int8_rows = get_strategy("int8").state_bytes([200000], 8, cfg.embedding.for_table("T1", 200000), "rowwise_adagrad")
    full_rows = get_strategy("full").state_bytes([3000, 300, 50], 8, cfg.embedding, "rowwise_adagrad")
    assert mixed["tables"]["bytes"] == int8_rows + full_rows < full["tables"]["bytes"]
    assert mixed["estimated_peak_bytes"] > 0  # the trace built and priced the mix


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["embedding.overrides=[{match: {min_rows: 10}, strategy: int8}]"], "embedding.overrides[0].strategy"),
        (["embedding.overrides=[{match: {}, strategy: full}]"], "match.name"),
        (["embedding.overrides=[{match: {name: C1}, backend: fbgemm}]"], "sets backend"),
        (["embedding.overrides=[{match: {name: C1}, strategy: fastest}]"], "overrides[0].strategy"),
        (["embedding.overrides=[{match: {name: C1}, compression: 0}]"], "overrides[0].compression"),
    ],
)
def test_a_bad_override_is_a_config_error_naming_it(
    sets: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["estimate", *_args(*TINY, *sets)]) == 2
    said = capsys.readouterr().err
    assert named in said and "Traceback" not in said, said


def test_a_sweep_searches_the_strategy_and_size_threshold_of_an_override() -> None:
    from elastune.errors import ConfigError
    from elastune.tuning.spec import validate_sweep_spec

    from tests.integration.sweep_specs import TINY_BASE, tiny_spec

    base = {
        **TINY_BASE,
        "data": {"table_rows": [200000, 3000, 300, 50]},
        "batch": {"micro": 64},
        "optimizer": {"sparse": "rowwise_adagrad"},
        "embedding": {"overrides": [{"match": {"min_rows": 100000}, "strategy": "int8"}]},
    }
    parameters = {
        "embedding.overrides.0.strategy": {"type": "choice", "values": ["int8", "half", "hashed"]},
        "embedding.overrides.0.match.min_rows": {"type": "choice", "values": [1000, 100000]},
    }
    spec = validate_sweep_spec(tiny_spec(base=base, parameters=parameters, constraints={"reference": {}}))
    cfg = spec.trial_config({"embedding.overrides.0.strategy": "half", "embedding.overrides.0.match.min_rows": 1000})
    assert [(o.match.min_rows, o.fields()) for o in cfg.embedding.overrides] == [(1000, {"strategy": "half"})]
    assert [cfg.embedding.for_table(f"T{i}", r).strategy for i, r in enumerate([200000, 3000, 300, 50], 1)] == [
        "half",
        "half",
        "full",
        "full",
    ]
    bad = {"embedding.overrides.0.backend": {"type": "choice", "values": ["torch"]}}
    with pytest.raises(ConfigError, match=r"an override is addressed as embedding\.overrides\.N\.FIELD"):
        validate_sweep_spec(tiny_spec(base=base, parameters=bad, constraints={"reference": {}}))
