"""A workload's own options (`workload_options`) are typed and searchable (issue 33, point 5): an
unknown key is refused naming it, with a "did you mean", whatever the options model's own `extra`
says; every problem is reported at once; `--set workload_options.KEY=V` sets one; a sweep searches
one like any run-config key, each candidate checked by the options model, and prices and admits
its points; the LM's sequence knobs are its options, their old run-config keys refused naming
the new ones; a remote client sets the built-ins' options only for their own workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import elastune
import pytest
import yaml
from elastune.cli import main
from elastune.config import RunConfig
from elastune.errors import ConfigError
from elastune.tuning.pricing import predicted_peak, screen, upper_bound
from elastune.tuning.spec import validate_sweep_spec
from elastune.untrusted import limit_problems, override_problems, stored_config_problems
from elastune.validate import load_run_config
from elastune.workloads import build_workload
from elastune.workloads.lm import LMOptions
from pydantic import ValidationError

from tests.conftest import ANY_TINY as TINY

ROOT = Path(__file__).resolve().parents[2]
TOWER = "tests.unit.plugin_workload.tower:make_workload"
LENIENT = "tests.unit.plugin_workload.lenient"


def _args(*sets: str) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def _problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_sweep_spec(raw)
    return [str(p) for p in info.value.problems]


def tower_spec(**parameters: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "base": {
            "workload": TOWER,
            "device": "cpu",
            "model": {"embedding_dim": 8},
            "batch": {"micro": 64},
            "eval": {"samples": 512},
            "steps": 6,
            "warmup_steps": 1,
        },
        "parameters": parameters or {"workload_options.hidden": {"type": "choice", "values": [4, 1024]}},
    }


def lm_quick() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "search_spaces" / "lm_quick.yaml").read_text()))


# ---- run configs ------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", [f"{LENIENT}:plain", f"{LENIENT}:keeping", TOWER])
def test_a_typo_in_an_option_is_refused_with_a_did_you_mean(
    factory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain BaseModel ignores a key it has no field for, and extra="allow" keeps it unread: the
    run would train at the default, the typo unnoticed. Refused whatever the model says."""
    monkeypatch.chdir(tmp_path)
    assert main(["estimate", *_args(*TINY, f"workload={factory}", "workload_options.hiden=8")]) == 2
    said = capsys.readouterr().err
    assert "workload_options.hiden: not an option of workload" in said, said
    assert "did you mean 'workload_options.hidden'? valid keys: hidden" in said
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_every_problem_of_the_options_is_reported_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    options = "workload_options={hiden: 8, layers: 0, heads: many, mean_length: .nan}"
    assert main(["estimate", *_args("workload=lm", options)]) == 2
    said = capsys.readouterr().err
    assert "4 problem(s)" in said, said
    for line in (
        "workload_options.hiden: not an option of workload 'lm'",
        "workload_options.layers=0: must be ≥ 1",
        "workload_options.heads='many': must be a valid integer",
        "workload_options.mean_length=nan: must be a finite number",
    ):
        assert line in said, (line, said)


def test_workload_options_is_the_base_to_subclass() -> None:
    class Options(elastune.WorkloadOptions):
        scale: float = 1.0

    assert Options.model_validate({"scale": 2.0}).scale == 2.0
    for bad in ({"scale": float("inf")}, {"scale": float("nan")}, {"scael": 2.0}):
        with pytest.raises(ValidationError):
            Options.model_validate(bad)
    assert issubclass(LMOptions, elastune.WorkloadOptions)


def test_an_option_is_set_by_its_dotted_key() -> None:
    cfg = load_run_config(None, [*TINY, f"workload={TOWER}", "workload_options.hidden=64"])
    assert cfg.workload_options == {"hidden": 64}
    assert build_workload(cfg).options.hidden == 64


@pytest.mark.parametrize(
    ("workload", "old", "value", "new"),
    [
        ("lm", "model.tie_embeddings", True, "tie_embeddings"),
        ("lm", "model.activation_checkpointing", "every_block", "activation_checkpointing"),
        ("lm", "model.checkpoint_every", 3, "checkpoint_every"),
        ("lm", "data.padding", "dynamic", "padding"),
        ("lm", "data.bucket_by_length", True, "bucket_by_length"),
        ("dlrm", "model.bottom_mlp", [32], "bottom_mlp"),
        ("dlrm", "model.top_mlp", [32], "top_mlp"),
    ],
)
def test_an_old_config_file_with_a_moved_knob_is_refused_naming_the_new_key(
    workload: str, old: str, value: Any, new: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    section, key = old.split(".")
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({"workload": workload, section: {key: value}}))
    assert main(["estimate", str(path)]) == 2
    assert f"{old}: moved to workload_options.{new} (workload {workload})" in capsys.readouterr().err


def test_the_run_config_holds_no_lm_or_dlrm_knob() -> None:
    """The LM's and DLRM's knobs are their options, and each moved key's new home is a field of
    that workload's options model."""
    from elastune.config import MOVED_KEYS
    from elastune.workloads.dlrm import DLRMOptions

    models = {"lm": LMOptions, "dlrm": DLRMOptions}
    for old, (workload, option) in MOVED_KEYS.items():
        section, key = old.split(".")
        assert key not in RunConfig.model_fields[section].annotation.model_fields, old
        assert option in models[workload].model_fields, old
    assert {w for w, _ in MOVED_KEYS.values()} == set(models)


# ---- sweeps -----------------------------------------------------------------------------------


def test_a_sweep_searches_a_workload_option() -> None:
    spec = validate_sweep_spec(tower_spec())
    cfg = spec.trial_config({"workload_options.hidden": 1024})
    assert cfg.workload_options == {"hidden": 1024} and build_workload(cfg).options.hidden == 1024
    # what the confirmation stage and `train --from-sweep` admit: points of this space only
    assert spec.point_problem({"workload_options.hidden": 4}) is None
    assert spec.point_problem({"workload_options.hidden": 16}) is not None
    assert spec.point_problem({"workload_options.hidden": True}) is not None
    # priced with the option: 1020 more hidden units are 1020 x (4 + 1 + 8) more dense parameters,
    # each held as a weight, a gradient and Adam's two moments (fp32)
    small, big = (predicted_peak(spec, {"workload_options.hidden": h}) for h in (4, 1024))
    assert big - small >= 1020 * 13 * 4 * 4, (small, big)
    # screened by the upper bounds (prediction x the estimator's margin): a ceiling between them
    low, high = (upper_bound(spec, {"workload_options.hidden": h}) for h in (4, 1024))
    ceiling = (low + high) // 2
    ceilinged = validate_sweep_spec({**tower_spec(), "constraints": {"memory_ceiling": ceiling}})
    assert screen(ceilinged, {"workload_options.hidden": 4})[0]
    assert not screen(ceilinged, {"workload_options.hidden": 1024})[0]


def test_a_searched_option_is_checked_by_the_options_model() -> None:
    found = _problems(tower_spec(**{"workload_options.hidden": {"type": "choice", "values": [4, 0, "lots"]}}))
    assert [p.split(":")[0] for p in found] == [
        "parameters.workload_options.hidden.values[1]=0",
        "parameters.workload_options.hidden.values[2]='lots'",
    ], found
    assert "must be ≥ 1" in found[0] and "integer" in found[1]
    (high,) = _problems(tower_spec(**{"workload_options.hidden": {"type": "int", "low": 8, "high": 4096}}))
    assert high.startswith("parameters.workload_options.hidden.high=4096: must be ≤ 1024"), high


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("workload_options.hiden", "not an option of workload 'tests.unit.plugin_workload.tower:make_workload'; "
         "did you mean 'workload_options.hidden'? valid keys here: hidden"),
        ("workload_options.hidden.width", "workload_options.hidden has no sub-keys"),
    ],
)  # fmt: skip
def test_a_spec_names_an_unknown_option(key: str, says: str) -> None:
    (only,) = _problems(tower_spec(**{key: {"type": "choice", "values": [4]}}))
    assert only == f"parameters.{key}: {says}"


def test_a_workload_without_options_has_none_to_search() -> None:
    raw = tower_spec()
    raw["base"]["workload"] = TOWER.replace(":make_workload", ":wrong_metric")  # a factory that declares none
    (only,) = _problems(raw)
    assert only.startswith(f"parameters.workload_options.hidden: workload {raw['base']['workload']!r} takes no"), only


def test_an_old_spec_with_a_moved_knob_is_refused_naming_the_new_key() -> None:
    raw = lm_quick()
    raw["parameters"] = {"data.padding": {"type": "choice", "values": ["static", "dynamic"]}, **raw["parameters"]}
    raw["constraints"]["reference"] = {"batch.micro": 32, "model.activation_checkpointing": "none"}
    found = _problems(raw)
    assert "parameters.data.padding: moved to workload_options.padding (workload lm); set it there" in found, found
    assert (
        "constraints.reference.model.activation_checkpointing: moved to workload_options.activation_checkpointing "
        "(workload lm); set it there" in found
    ), found
    raw = lm_quick()
    raw["base"]["model"] = {"embedding_dim": 64, "tie_embeddings": True}
    assert _problems(raw) == [
        "base.model.tie_embeddings: moved to workload_options.tie_embeddings (workload lm); set it there"
    ]


def test_a_token_budget_keeps_one_context() -> None:
    """A token budget is N / context sequences for every trial: a searched option that changes the
    context is refused; one that leaves it (padding) is searched."""
    raw = lm_quick()
    raw["constraints"]["effective_batch"] = {"tokens": 4096}
    assert validate_sweep_spec(raw).effective_sequences() == 32  # padding and friends: searched
    raw["parameters"]["workload_options.context"] = {"type": "choice", "values": [128, 256]}
    (only,) = _problems(raw)
    assert only.startswith("parameters.workload_options.context.values[1]=256: gives a context of 256 tokens"), only
    raw["constraints"]["effective_batch"] = 32  # sequences: any context
    validate_sweep_spec(raw)


# ---- remote clients ---------------------------------------------------------------------------


def test_a_client_sets_the_lms_options_for_the_lm_only() -> None:
    assert override_problems(["workload=lm", "workload_options.padding=packed", "workload_options={layers: 2}"]) == []
    # the same name for another workload could name a file there: refused, the workload known now or later
    refused = override_problems(["workload=two_tower", "workload_options.padding=packed"])
    assert [p.path for p in refused] == ["sets.workload_options.padding"], refused
    assert "has no options a remote client may set" in refused[0].message
    later = RunConfig(workload="two_tower", workload_options={"padding": "packed"})
    assert [p.path for p in limit_problems(later)] == ["workload_options.padding"]
    assert limit_problems(RunConfig(workload="lm", workload_options={"padding": "packed"})) == []
    # a stored best config of an LM sweep trains from the UI; its options for another workload do not
    stored = {"workload": "lm", "workload_options": {"context": 32, "padding": "dynamic"}}
    assert stored_config_problems(stored) == []
    planted = stored_config_problems({"workload": "two_tower", "workload_options": {"padding": "/etc/passwd"}})
    assert [p.path for p in planted] == ["from_sweep.workload_options.padding"]
    moved = stored_config_problems({"workload": "lm", "data": {"padding": "dynamic"}})
    assert [(p.path, p.message.split(";")[0]) for p in moved] == [
        ("from_sweep.data.padding", "moved to workload_options.padding (workload lm)")
    ]
