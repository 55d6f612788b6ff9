"""`constraints.effective_batch: {tokens: N}`: a step's padded tokens (rows x context, nanoGPT's
tokens_per_iter), which a sequence workload's sweep turns into N / context sequences and then
searches exactly as that many sequences. Every mistake is a config error naming the field, the
value and the fix, reported with the spec's other problems; the CLI exits 2 and writes nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.cli import main
from elastune.errors import ConfigError
from elastune.tuning.space import candidate_points
from elastune.tuning.spec import SweepSpec, TokenBudget, load_sweep_spec, validate_sweep_spec

from tests.unit.test_sweep_spec import sweep_cli

ROOT = Path(__file__).resolve().parents[2]
SPACES = ROOT / "search_spaces"


def shipped(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((SPACES / name).read_text()))


def lm_spec(effective_batch: Any, **changes: Any) -> dict[str, Any]:
    """lm_quick (context 128, micro 8 / 16 / 32) with this effective batch."""
    raw = shipped("lm_quick.yaml")
    raw["constraints"]["effective_batch"] = effective_batch
    for section, values in changes.items():
        raw[section] = {**raw.get(section, {}), **values}
    return raw


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_sweep_spec(raw)
    return [str(p) for p in info.value.problems]


def configs(spec: SweepSpec) -> list[dict[str, Any]]:
    return [spec.trial_config(params).to_dict() for params in candidate_points(spec.parameters)]


def test_tokens_are_converted_to_sequences_of_the_context() -> None:
    spec = validate_sweep_spec(lm_spec({"tokens": 4096}))  # 32 rows of 128 tokens
    assert spec.constraints.effective_batch == TokenBudget(tokens=4096)
    assert spec.sequence_context() == 128 and spec.effective_sequences() == 32
    cfg = spec.trial_config({"batch.micro": 8})
    assert (cfg.batch.micro, cfg.batch.accum, cfg.batch.micro * cfg.batch.accum) == (8, 4, 32)
    # A count stays a count: no context is asked for.
    counted = validate_sweep_spec(lm_spec(32))
    assert counted.constraints.effective_batch == counted.effective_sequences() == 32


@pytest.mark.parametrize(("name", "tokens", "sequences"), [("lm_quick.yaml", 4096, 32), ("lm_full.yaml", 65536, 64)])
def test_a_token_budget_searches_the_splits_of_its_sequence_count(name: str, tokens: int, sequences: int) -> None:
    """Every proposal the space can make (each corner) is the same config under either form."""
    raw = shipped(name)
    by_tokens, by_count = copy.deepcopy(raw), copy.deepcopy(raw)
    by_tokens["constraints"]["effective_batch"] = {"tokens": tokens}
    by_count["constraints"]["effective_batch"] = sequences
    as_tokens, as_count = validate_sweep_spec(by_tokens), validate_sweep_spec(by_count)
    assert as_tokens.effective_sequences() == as_count.effective_sequences() == sequences
    assert configs(as_tokens) == configs(as_count)
    assert as_tokens.reference_config() == as_count.reference_config()


def test_lm_full_states_its_budget_in_tokens() -> None:
    spec = load_sweep_spec(SPACES / "lm_full.yaml")
    assert spec.constraints.effective_batch == TokenBudget(tokens=65536)
    assert spec.effective_sequences() == 64 and spec.reference_config().batch.accum == 8


def test_the_record_keeps_the_budget_as_given(tmp_path: Path) -> None:
    """The sweep's record (the parent run's params and spec.yaml) is the dumped spec: the token
    budget, not the sequences it became; it validates back to the same spec (--resume compares)."""
    from elastune.tracking.mlflow import SweepTracker
    from elastune.tracking.records import SweepRecord
    from mlflow import MlflowClient

    spec = load_sweep_spec(SPACES / "lm_full.yaml")
    dumped = spec.model_dump(mode="json")
    assert dumped["constraints"]["effective_batch"] == {"tokens": 65536}
    assert SweepSpec.model_validate(dumped).model_dump(mode="json") == dumped
    assert SweepSpec.model_validate(dumped).effective_sequences() == 64  # as a Ray trial rebuilds it
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = SweepTracker(uri).start_sweep(SweepRecord(sweep_id="tokens-1", spec=dumped, status="running"))
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(run_id).data.params["constraints.effective_batch.tokens"] == "65536"
    logged = yaml.safe_load(Path(client.download_artifacts(run_id, "spec.yaml", str(tmp_path))).read_text())
    assert logged["constraints"]["effective_batch"] == {"tokens": 65536}


BAD = [
    pytest.param(
        {"tokens": 4000},
        "constraints.effective_batch.tokens=4000: not a multiple of the context (128 tokens); "
        "use 3968 (31 sequences) or 4096 (32 sequences)",
        id="not-a-multiple",
    ),
    pytest.param(
        {"tokens": 100},
        "constraints.effective_batch.tokens=100: not a multiple of the context (128 tokens); use 128 (1 sequence)",
        id="below-one-row",
    ),
    pytest.param({"tokens": 0}, "constraints.effective_batch.tokens=0: must be ≥ 1", id="zero"),
    pytest.param({"tokens": -4096}, "constraints.effective_batch.tokens=-4096: must be ≥ 1", id="negative"),
    pytest.param(
        {"tokens": True}, "constraints.effective_batch.tokens=True: must be a whole number of tokens", id="bool"
    ),
    pytest.param(
        {"tokens": "64k"},
        "constraints.effective_batch.tokens='64k': must be a whole number of tokens (e.g. 65536), in digits",
        id="string",
    ),
    pytest.param(
        {"tokens": 2**50}, "constraints.effective_batch.tokens=1125899906842624: must be ≤ 1099511627776", id="huge"
    ),
    pytest.param(
        {"tokens": 2**40},
        "constraints.effective_batch.tokens=1099511627776: is 8,589,934,592 sequences of the 128-token context, "
        "more than the 1073741824 a step may take",
        id="huge-in-sequences",
    ),
    pytest.param(
        {"token": 4096},
        "constraints.effective_batch.token: unknown key; did you mean 'constraints.effective_batch.tokens'?",
        id="unknown-key",
    ),
    pytest.param({}, "constraints.effective_batch.tokens: is required", id="empty-mapping"),
    pytest.param(True, "constraints.effective_batch=True: must be a whole number of samples", id="bool-count"),
    pytest.param("lots", "constraints.effective_batch='lots': must be a whole number of samples", id="string-count"),
    pytest.param(0, "constraints.effective_batch=0: must be ≥ 1", id="zero-count"),
    pytest.param(2**31, "constraints.effective_batch=2147483648: must be ≤ 1073741824", id="huge-count"),
]


@pytest.mark.parametrize(("effective_batch", "message"), BAD)
def test_a_bad_budget_is_a_config_error_naming_the_field(effective_batch: Any, message: str) -> None:
    found = problems(lm_spec(effective_batch))
    assert any(message in p for p in found), found


def test_a_token_budget_needs_a_sequence_workload() -> None:
    raw = shipped("dlrm_quick.yaml")
    raw["constraints"]["effective_batch"] = {"tokens": 2048}
    (only,) = problems(raw)
    assert only.startswith("constraints.effective_batch.tokens=2048: a token budget needs a sequence workload")
    assert "workload 'dlrm' counts its batch in samples" in only


def test_a_converted_budget_is_checked_as_its_sequences() -> None:
    """Micro-batches must divide the sequences, and workers share them, as with a count."""
    raw = lm_spec({"tokens": 4096})
    raw["parameters"]["batch.micro"]["values"] = [8, 12]
    (only,) = problems(raw)
    assert only.startswith(
        "parameters.batch.micro=[12]: must divide constraints.effective_batch.tokens=4096 (32 sequences of 128 tokens)"
    )
    found = problems(lm_spec({"tokens": 4096}, resources={"workers_per_trial": 3}))
    assert any(
        p.startswith("constraints.effective_batch.tokens=4096: must split evenly over resources.workers_per_trial=3")
        and "use a multiple of 384" in p
        for p in found
    ), found


def test_budget_problems_are_reported_with_the_others() -> None:
    # pydantic's stage: a bad budget beside another bad number
    found = problems(lm_spec({"tokens": 0}, budget={"max_trials": 0}))
    assert sorted(p.split(":")[0] for p in found) == ["budget.max_trials=0", "constraints.effective_batch.tokens=0"]
    # the cross-field stage: a budget off the context beside a derived accumulation that is searched
    raw = lm_spec({"tokens": 4000})
    raw["parameters"]["batch.accum"] = {"type": "choice", "values": [1, 2]}
    found = problems(raw)
    assert {p.split(":")[0] for p in found} == {"parameters.batch.accum", "constraints.effective_batch.tokens=4000"}


def test_cli_refuses_a_bad_token_budget_with_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    proc = sweep_cli(tmp_path, lm_spec({"tokens": 4000}))
    assert proc.returncode == 2, proc.stderr
    assert "1 problem(s)" in proc.stderr
    assert "constraints.effective_batch.tokens=4000: not a multiple of the context (128 tokens)" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # no mlflow.db, no sweep state


@pytest.mark.parametrize(("effective_batch", "message"), BAD)
def test_cli_exits_2_on_each_bad_budget(
    effective_batch: Any,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(lm_spec(effective_batch), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    assert main(["sweep", str(path)]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_cli_exits_2_on_tokens_for_dlrm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = shipped("dlrm_quick.yaml")
    raw["constraints"]["effective_batch"] = {"tokens": 2048}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    assert main(["sweep", str(path)]) == 2
    assert "a token budget needs a sequence workload" in capsys.readouterr().err.replace("\n", " ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]
