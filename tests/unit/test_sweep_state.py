"""A resume trusts the sweep's local state folder, never the store (tuning/state.py, tuning/sweep.py).

Each refusal here happens before Ray starts: the record is planted in a real SQLite store, as
anyone who can write the team's store could, and the local folder is the victim's own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from elastune.cli import main
from elastune.errors import InputError
from elastune.tracking.encoding import record_tags
from elastune.tracking.mlflow import SweepTracker
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.tuning.space import point_problem
from elastune.tuning.spec import SweepSpec, validate_sweep_spec
from elastune.tuning.state import SPEC_FILE, create_state, read_local_spec, trusted_state
from elastune.tuning.sweep import SweepOptions, run_sweep
from mlflow import MlflowClient

from tests.integration.sweep_specs import tiny_spec

SWEEP_ID = "tiny-20261126-120000-ab12"


def plant(uri: str, own: dict[str, Any], **fields: Any) -> str:
    """An interrupted sweep `SWEEP_ID` of spec `own` in the store, its record then rewritten with
    `fields` as anyone with write access to the store could: the run keeps its `elastune.sweep_id` tag."""
    record = SweepRecord(sweep_id=SWEEP_ID, spec=own, status="interrupted", started_at=time.time())
    tracker = SweepTracker(uri)
    run_id = tracker.start_sweep(record)
    tracker.finish_sweep(record)
    planted = {k: v for k, v in record.to_dict().items() if k != "trials"} | fields
    for key, value in record_tags(planted).items():
        MlflowClient(uri).set_tag(run_id, key, value)
    return run_id


def resume(uri: str, home: Path, spec: SweepSpec | None = None) -> list[str]:
    lines: list[str] = []
    run_sweep(spec, SweepOptions(tracking_uri=uri, home=home, echo=lines.append), resume=SWEEP_ID)
    return lines


@pytest.fixture
def victim(tmp_path: Path) -> tuple[str, Path, SweepSpec]:
    """The store and the user's own state folder of an interrupted sweep, with its spec."""
    spec = validate_sweep_spec(tiny_spec())
    home = tmp_path / "sweeps"
    create_state(home, SWEEP_ID, spec)
    return f"sqlite:///{tmp_path / 'mlflow.db'}", home, spec


def test_a_record_naming_another_sweep_id_is_refused(victim: tuple[str, Path, SweepSpec], tmp_path: Path) -> None:
    uri, home, spec = victim
    # The old resume restored Tune from `home / record.sweep_id`: an absolute path there is any folder.
    elsewhere = tmp_path / "artifacts" / "evil"
    elsewhere.mkdir(parents=True)
    plant(uri, spec.model_dump(mode="json"), sweep_id=str(elsewhere))
    with pytest.raises(InputError, match="names another sweep id") as caught:
        resume(uri, home)
    assert str(elsewhere) in str(caught.value)


@pytest.mark.parametrize(
    "damage",
    ["group-writable file", "world-writable folder", "symlink", "foreign owner", "writable home"],
)
def test_a_state_folder_someone_else_could_write_is_refused(
    damage: str, victim: tuple[str, Path, SweepSpec], tmp_path: Path
) -> None:
    uri, home, spec = victim
    plant(uri, spec.model_dump(mode="json"))
    state = home / SWEEP_ID
    tuner = state / "tuner.pkl"
    tuner.write_bytes(b"not read")
    named = tuner
    if damage == "group-writable file":
        tuner.chmod(0o664)
    elif damage == "world-writable folder":
        (state / "trial_1").mkdir()
        (state / "trial_1").chmod(0o777)
        named = state / "trial_1"
    elif damage == "symlink":
        tuner.unlink()
        tuner.symlink_to(tmp_path / "planted.pkl")
    elif damage == "foreign owner":
        if os.getuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(tuner, 4242, 4242)
    else:
        home.chmod(0o777)
        named = home
    with pytest.raises(InputError) as caught:
        resume(uri, home)
    assert str(named) in str(caught.value) and "yours alone" in str(caught.value)


def test_the_local_spec_runs_and_the_stores_differing_copy_is_reported(victim: tuple[str, Path, SweepSpec]) -> None:
    uri, home, spec = victim
    planted = tiny_spec(base={"data": {"source": "table", "path": "/home/victim/private.csv"}})
    plant(uri, spec.model_dump(mode="json"), spec=planted)
    from elastune.tuning.sweep import _resume_state

    used, record, notes = _resume_state(SWEEP_ID, uri, home, None, SweepOptions(home=home))
    assert used == spec and record.spec == spec.model_dump(mode="json")
    assert any("store's copy of the spec differs" in note for note in notes), notes
    assert "private.csv" not in repr(record.spec)


def test_the_recorded_cluster_is_a_hint_never_an_address(
    victim: tuple[str, Path, SweepSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, home, spec = victim
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    plant(uri, spec.model_dump(mode="json"), ray_address="10.9.8.7:6379")
    from elastune.tuning.sweep import _resume_state

    options = SweepOptions(home=home)
    _, _, notes = _resume_state(SWEEP_ID, uri, home, None, options)
    assert options.address is None
    assert any("10.9.8.7:6379" in note and "never dials" in note for note in notes), notes


def test_without_a_local_spec_the_spec_file_is_needed(victim: tuple[str, Path, SweepSpec]) -> None:
    uri, home, spec = victim
    plant(uri, spec.model_dump(mode="json"))
    (home / SWEEP_ID / SPEC_FILE).unlink()  # a folder an older elastune made
    with pytest.raises(InputError, match="pass the spec file the sweep started"):
        resume(uri, home)


def test_a_spec_file_that_differs_from_the_local_copy_is_refused(victim: tuple[str, Path, SweepSpec]) -> None:
    uri, home, spec = victim
    plant(uri, spec.model_dump(mode="json"))
    other = validate_sweep_spec(tiny_spec(budget={"max_trials": 2}))
    with pytest.raises(InputError, match="differs from the one this sweep started with"):
        resume(uri, home, other)


@pytest.mark.parametrize("sweep_id", ["../x", "/tmp/x", "a/../../b", "..", "x\n", ""])
def test_a_resume_id_that_is_not_an_id_is_refused(sweep_id: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a sweep id"):
        run_sweep(None, SweepOptions(home=tmp_path, tracking_uri=f"sqlite:///{tmp_path}/m.db"), resume=sweep_id)


def test_the_state_folder_and_its_spec_are_private(tmp_path: Path) -> None:
    spec = validate_sweep_spec(tiny_spec())
    old = os.umask(0o002)  # a permissive umask must not leave a state a resume would refuse
    try:
        state = create_state(tmp_path / "sweeps", SWEEP_ID, spec)
    finally:
        os.umask(old)
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / SPEC_FILE).stat().st_mode & 0o777 == 0o600
    assert read_local_spec(state) == spec
    trusted_state(tmp_path / "sweeps", state)  # passes: nothing to refuse
    assert [p.name for p in state.iterdir()] == [SPEC_FILE]  # no temporary file left


def test_the_kept_spec_keeps_its_parameter_order(tmp_path: Path) -> None:
    """A gated parameter must follow its gate; search_spaces/lm_quick.yaml's gate sorts after it, so
    a spec kept with sorted keys read back as invalid and `--from-sweep` refused the sweep."""
    raw = tiny_spec()
    raw["parameters"] = {
        "precision": {"type": "choice", "values": ["fp32", "bf16"]},
        "optimizer.sparse": {"type": "choice", "values": ["sgd", "rowwise_adagrad"], "when": {"precision": ["bf16"]}},
        "batch.micro": raw["parameters"]["batch.micro"],
    }
    spec = validate_sweep_spec(raw)
    state = create_state(tmp_path / "sweeps", SWEEP_ID, spec)
    kept = read_local_spec(state)
    assert kept is not None and list(kept.parameters) == ["precision", "optimizer.sparse", "batch.micro"]


def test_a_spec_file_elastune_did_not_write_is_refused(tmp_path: Path) -> None:
    state = create_state(tmp_path / "sweeps", SWEEP_ID, validate_sweep_spec(tiny_spec()))
    (state / SPEC_FILE).write_text("[1, 2")
    with pytest.raises(InputError, match="is not JSON"):
        read_local_spec(state)


SPACE = validate_sweep_spec(
    tiny_spec(
        search={"algorithm": "tpe"},
        parameters={
            "embedding.strategy": {"type": "choice", "values": ["full", "hashed"]},
            "batch.micro": {"type": "choice", "values": [64, 128]},
            "embedding.buckets": {
                "type": "int",
                "low": 16,
                "high": 64,
                "step": 16,
                "when": {"embedding.strategy": ["hashed"]},
            },
            "optimizer.lr": {"type": "float", "low": 0.001, "high": 0.01, "log": True},
        },
    )
).parameters


@pytest.mark.parametrize(
    ("point", "why"),
    [
        ({"data.path": "/etc/passwd"}, "not a searched parameter"),
        ({"workload": "os:system"}, "not a searched parameter"),
        ({"embedding.strategy": "int8"}, "not a value"),
        ({"batch.micro": True}, "not a value"),  # True == 1, but not a choice of 64 or 128
        ({"batch.micro": 64.0}, "not a value"),
        ({"embedding.strategy": "hashed", "embedding.buckets": 24}, "not a value"),  # off the step
        ({"embedding.strategy": "hashed", "embedding.buckets": 80}, "not a value"),
        ({"embedding.strategy": "full", "embedding.buckets": 32}, "drawn only when"),
        ({"optimizer.lr": float("nan")}, "not a value"),
        ({"optimizer.lr": 0.5}, "not a value"),
        ({"optimizer.lr": "0.005"}, "not a value"),
    ],
)
def test_a_stored_point_outside_the_space_is_named(point: dict[str, Any], why: str) -> None:
    problem = point_problem(SPACE, point)
    assert problem is not None and why in problem


def test_a_point_the_space_can_propose_passes() -> None:
    point = {"embedding.strategy": "hashed", "batch.micro": 128, "embedding.buckets": 48, "optimizer.lr": 0.002}
    assert point_problem(SPACE, point) is None
    assert point_problem(SPACE, {"embedding.strategy": "full", "batch.micro": 64}) is None


def plant_best(uri: str, spec: SweepSpec, params: dict[str, Any], config: dict[str, Any]) -> None:
    """The sweep's best trial, as the store holds it: `params` and `config` as written (planted)."""
    record = SweepRecord(sweep_id=SWEEP_ID, spec=spec.model_dump(mode="json"), status="finished")
    trial = TrialRecord("t1", 0, "ok", params, config, samples_per_s=1000.0)
    tracker = SweepTracker(uri)
    tracker.start_sweep(record)
    tracker.log_trial(record, trial)


def train_from_sweep(uri: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["train", "--from-sweep", SWEEP_ID, "--tracking-uri", uri, "--format", "json"])
    said = capsys.readouterr()
    return code, said.out, said.err


@pytest.fixture
def planted_config(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """A best config whose data is someone's private file (a table source on a CSV)."""
    private = tmp_path / "private.csv"
    private.write_text("label,email\n" + "".join(f"{i % 2},p{i}@example.org\n" for i in range(50)))
    spec = validate_sweep_spec(tiny_spec())
    config = spec.trial_config({"embedding.strategy": "full", "batch.micro": 64}).to_dict()
    config["data"] |= {"source": "table", "path": str(private), "schema": {"label": "label", "categorical": ["email"]}}
    return config, private


def test_from_sweep_without_local_state_refuses_a_stored_config_that_names_a_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    planted_config: tuple[dict[str, Any], Path],
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))  # no state of this sweep here
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config, private = planted_config
    plant_best(uri, validate_sweep_spec(tiny_spec()), {"embedding.strategy": "full", "batch.micro": 64}, config)
    code, out, err = train_from_sweep(uri, capsys)
    assert code == 2, err
    assert "from_sweep.data.path" in err and str(private) in err and "it ran elsewhere" in err
    assert out == ""


def test_from_sweep_with_local_state_trains_the_local_spec_not_the_stored_config(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    planted_config: tuple[dict[str, Any], Path],
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    spec = validate_sweep_spec(tiny_spec(budget={"max_trials": 4, "max_concurrent": 2, "trial_samples": 256}))
    create_state(tmp_path / "home" / "sweeps", SWEEP_ID, spec)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config, private = planted_config
    plant_best(uri, spec, {"embedding.strategy": "hashed", "batch.micro": 64}, config)
    code, out, err = train_from_sweep(uri, capsys)
    assert code == 0, err
    ran = json.loads(out)["config"]
    assert ran["data"]["source"] == "synthetic" and str(private) not in out
    assert ran["embedding"]["strategy"] == "hashed" and ran["batch"]["micro"] == 64  # the trial's point


def test_from_sweep_refuses_stored_parameters_outside_the_local_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    spec = validate_sweep_spec(tiny_spec())
    create_state(tmp_path / "home" / "sweeps", SWEEP_ID, spec)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    plant_best(uri, spec, {"workload": "os:system"}, spec.base_config().to_dict())
    code, _, err = train_from_sweep(uri, capsys)
    assert code == 2 and "not a point of the sweep's space" in err and "'workload'" in err, err
