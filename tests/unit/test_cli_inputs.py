"""Hostile and careless input to the command line: one clear line per problem (field, value, fix),
exit 2, and nothing written, launched or left behind. Each case runs the real CLI in this process,
in an empty folder with its own ELASTUNE_HOME, and checks that the folder is still empty and no Ray
was started."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import ray
import yaml
from elastune.cli import main
from elastune.tracking.mlflow import SweepTracker
from elastune.tracking.records import SweepRecord, TrialRecord
from elastune.units import MAX_BYTES, parse_bytes

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "search_spaces" / "dlrm_quick.yaml")
HUGE = "9" * 400


@pytest.fixture
def empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder and ELASTUNE_HOME; the default MLflow store would be created here."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


def refused(args: list[str], folder: Path, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    """Run the CLI; it must exit 2 with each expected text on stderr, write nothing, start no Ray."""
    code = main(args)
    said = capsys.readouterr().err
    assert code == 2, said
    for text in expected:
        assert text in said, said
    assert "Traceback" not in said
    assert list(folder.iterdir()) == [], f"{args} left {list(folder.iterdir())}"
    assert not ray.is_initialized()
    return said


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--memory-ceiling", HUGE], "constraints.memory_ceiling"),
        (["--memory-ceiling", "1e999"], "constraints.memory_ceiling"),
        (["--memory-ceiling", "２GiB"], "constraints.memory_ceiling"),  # full-width digits
        (["--memory-ceiling", "٥١٢MiB"], "constraints.memory_ceiling"),  # Arabic-Indic digits
        (["--memory-ceiling", "5" * 90 + "MiB"], "constraints.memory_ceiling"),
        (["--memory-ceiling", "0"], "constraints.memory_ceiling"),
        (["--set", "constraints.memory_ceiling=.inf"], "constraints.memory_ceiling"),
        (["--set", "constraints.memory_ceiling=.nan"], "constraints.memory_ceiling"),
        (["--cpus-per-trial", "inf"], "resources.cpus_per_trial"),
        (["--cpus-per-trial", "nan"], "resources.cpus_per_trial"),
        (["--cpus-per-trial", "0"], "resources.cpus_per_trial"),
        (["--cpus-per-trial", "-1"], "resources.cpus_per_trial"),
        (["--cpus-per-trial", "1e308"], "resources.cpus_per_trial"),
        (["--gpus-per-trial", "inf"], "resources.gpus_per_trial"),
        (["--max-trials", HUGE], "budget.max_trials"),
        (["--set", f"budget.trial_steps={HUGE}"], "budget.trial_steps"),
        (["--set", "budget.max_trials=" + "9" * 5000], "budget.max_trials"),  # past Python's int-from-text limit
        (["--set", "budget.time_limit_s=.inf"], "budget.time_limit_s"),
        (["--set", "search.seed=-1"], "search.seed"),
        (["--set", "edo.acquire_timeout_s=.nan"], "edo.acquire_timeout_s"),
        (["--set", "name=../../outside"], "name"),
        (["--set", "name=/tmp/x"], "name"),
        (["--set", "name=.."], "name"),
        (["--set", "name=" + "n" * 65], "name"),
    ],
)
def test_sweep_input_is_refused_before_anything_runs(
    flags: list[str], field: str, empty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = refused(["sweep", QUICK, *flags], empty, capsys, field)
    problems = [line for line in said.splitlines() if line.strip().startswith("- ")]
    assert len(problems) == 1 and len(problems[0]) < 400, said  # one short line, whatever the value's size


@pytest.mark.parametrize(
    ("parameter", "field"),
    [
        ({"type": "int", "low": 1, "high": int(HUGE)}, "high"),
        ({"type": "float", "low": 0.1, "high": math.inf}, "high"),
        ({"type": "float", "low": math.nan, "high": 1.0}, "low"),
        ({"type": "choice", "values": list(range(2000))}, "values"),
    ],
)
def test_searched_ranges_are_finite_and_bounded(
    parameter: dict[str, object], field: str, empty: Path, tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    raw = yaml.safe_load(Path(QUICK).read_text())
    raw["parameters"]["optimizer.lr"] = parameter
    spec = tmp_path_factory.mktemp("spec") / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw))
    refused(["sweep", str(spec)], empty, capsys, f"parameters.optimizer.lr.{parameter['type']}.{field}")


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        ([f"steps={HUGE}"], "steps"),
        (["steps=" + "9" * 5000], "steps"),
        (["steps=1e999"], "steps"),
        (["optimizer.lr=.nan"], "optimizer.lr"),
        (["optimizer.lr=.inf"], "optimizer.lr"),
        (["optimizer.lr=1e999"], "optimizer.lr"),
        ([f"seed={HUGE}"], "seed"),
        ([f"data.seed={HUGE}"], "data.seed"),
        (["embedding.strategy=cached", f"embedding.cache_rows={HUGE}"], "embedding.cache_rows"),
        (["embedding.strategy=hashed", "embedding.compression=.inf"], "embedding.compression"),
        ([f"eval.samples={HUGE}"], "eval.samples"),
        ([f"workload_options.top_mlp=[{HUGE}]"], "workload_options.top_mlp"),
        (["workload_options.top_mlp=[" + ",".join(["8"] * 40) + "]"], "workload_options.top_mlp"),
    ],
)
def test_run_config_numbers_are_finite_and_bounded(
    sets: list[str], field: str, empty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["train", *(a for s in [*TINY, *sets] for a in ("--set", s))]
    refused(args, empty, capsys, field)
    refused(["estimate", *args[1:]], empty, capsys, field)


@pytest.mark.parametrize("source", ["parquet", "criteo_tsv"])
@pytest.mark.parametrize("key", ["path", "eval_path"])
def test_a_directory_given_as_a_data_file_says_so(
    source: str, key: str, empty: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path_factory.mktemp("a-folder")
    data = tmp_path_factory.mktemp("data") / "train.tsv"
    data.write_text("")
    sets = [f"data.source={source}", f"data.path={folder if key == 'path' else data}", f"data.{key}={folder}"]
    args = ["train", *(a for s in [*TINY, *sets] for a in ("--set", s))]
    said = refused(args, empty, capsys, f"data.{key}=", "is a directory")
    assert "does not exist" not in said


@pytest.mark.parametrize("sweep_id", ["../../etc", "x/../../y", "..", "a b", "/tmp", "id;rm -rf ~", "ünï"])
def test_resume_takes_sweep_ids_not_paths(sweep_id: str, empty: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["sweep", "--resume", sweep_id], empty, capsys, "--resume", "is not a sweep id")


def test_parse_bytes_takes_ascii_sizes_within_bounds() -> None:
    assert parse_bytes("512MiB") == 512 * 2**20 and parse_bytes(" 1.5 GB ") == 1_500_000_000
    assert parse_bytes("1EiB".replace("EiB", "")) == 1 and parse_bytes(MAX_BYTES) == MAX_BYTES
    assert parse_bytes("1 PiB") == 2**50 and parse_bytes("1eib") == MAX_BYTES
    for bad in ["５１２MiB", "٥١٢", "1" * 31, "1e3MiB", "inf", "nan", "-1", "0", "2 EiB", "1 XB", "", "MiB", "1.5.5GB"]:
        with pytest.raises(ValueError):
            parse_bytes(bad)
    for bad_number in [math.inf, math.nan, MAX_BYTES + 1, 10**400, 0, -5, True]:
        with pytest.raises(ValueError):
            parse_bytes(bad_number)  # type: ignore[arg-type]


def test_json_output_is_valid_json_when_figures_are_not_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`results --format json` on a sweep whose figures include NaN and infinity: strict JSON, null there."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trial = TrialRecord("t1", 0, "ok", {"batch.micro": 64}, {}, samples_per_s=math.nan, quality=math.inf)
    record = SweepRecord(
        "nan-sweep", {"name": "nan-sweep"}, "finished", reference_quality=math.nan, trials=[trial], started_at=1.0
    )
    tracker = SweepTracker(uri)
    tracker.start_sweep(record)
    tracker.log_trial(record, trial)
    assert main(["results", "nan-sweep", "--tracking-uri", uri, "--format", "json"]) == 0
    printed = capsys.readouterr().out

    def no_constants(name: str) -> None:
        raise AssertionError(f"not JSON: {name}")

    shown = json.loads(printed, parse_constant=no_constants)
    assert shown["sweep_id"] == "nan-sweep"
    assert "NaN" not in printed and "Infinity" not in printed


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--max-trials", "9" * 5000), ("--max-concurrent", "1.5"), ("--cpus-per-trial", "one"), ("--max-trials", "１２")],
)
def test_flags_click_cannot_read_are_usage_errors(
    flag: str, value: str, empty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Typer reads int and float flags itself: what it cannot read is a usage error naming the flag."""
    said = refused(["sweep", QUICK, flag, value], empty, capsys, flag)
    assert len(said) < 2000, said


def test_a_spec_file_whose_name_is_a_path_is_refused(
    empty: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = yaml.safe_load(Path(QUICK).read_text())
    spec = tmp_path_factory.mktemp("spec") / "spec.yaml"
    for name in ["../../x", "a/b", "..", "-rf", "x" * 65, "ünï"]:
        raw["name"] = name
        spec.write_text(yaml.safe_dump(raw))
        refused(["sweep", str(spec)], empty, capsys, "name=", "names the sweep's folder")


def test_the_longest_sweep_id_a_spec_can_make_is_a_resumable_id(
    empty: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 64-character name gives the longest id the list can show; --resume takes it (and then says
    the store has no such sweep) rather than calling it 'not a sweep id'."""
    from elastune.tuning.spec import load_sweep_spec
    from elastune.tuning.sweep import new_sweep_id

    spec = load_sweep_spec(QUICK, ["name=" + "n" * 64])
    said = refused(["sweep", "--resume", new_sweep_id(spec)], empty, capsys, "no sweeps recorded")
    assert "is not a sweep id" not in said


def test_resume_refuses_a_state_folder_that_leads_outside_the_sweeps_home(
    empty: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A link planted in the sweeps home is not followed out of it."""
    outside = tmp_path_factory.mktemp("outside")
    sweeps = tmp_path_factory.mktemp("elastune-home") / "sweeps"
    sweeps.mkdir()
    (sweeps / "evil-20261124-101500-ab12").symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv("ELASTUNE_HOME", str(sweeps.parent))
    refused(["sweep", "--resume", "evil-20261124-101500-ab12"], empty, capsys, "--resume", "is a symlink")
    assert list(outside.iterdir()) == []


def test_a_number_past_pythons_digit_limit_in_a_yaml_file_names_its_field(
    empty: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """YAML reads a 5000-digit integer with int(), which Python refuses past 4300 digits: a config or
    spec file holding one is an input error naming the field, never a traceback."""
    folder = tmp_path_factory.mktemp("files")
    run = folder / "run.yaml"
    run.write_text(f"steps: {'9' * 5000}\n")
    for command in (["train"], ["estimate"], ["config", "show"]):
        said = refused([*command, str(run)], empty, capsys, "steps=", "5000 digits", "bounded")
        assert len(said) < 1000, said
    raw = yaml.safe_load(Path(QUICK).read_text())
    raw["search"] = {"seed": 0}
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw).replace("seed: 0", "seed: " + "9" * 5000))
    refused(["sweep", str(spec)], empty, capsys, "search.seed=", "5000 digits")


def test_resume_refuses_a_searcher_state_it_did_not_write_before_ray_starts(
    empty: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """An earlier release saved the searcher as a pickle (or someone planted one): a resume says so
    and exits 2 before anything runs, instead of a traceback from inside Tune's restore."""
    import pickle

    import ray
    from elastune.tracking.mlflow import SweepTracker
    from elastune.tracking.records import SweepRecord, TrialRecord
    from elastune.tuning.spec import load_sweep_spec
    from elastune.tuning.state import write_local_spec

    spec = load_sweep_spec(QUICK)
    sweep_id = "dlrm_quick-20261124-101500-ab12"
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    record = SweepRecord(sweep_id, spec.model_dump(mode="json"), "interrupted", started_at=1.0)
    record.trials = [TrialRecord("t1", 0, "ok", {}, {}, samples_per_s=1.0)]
    tracker = SweepTracker(uri)
    tracker.start_sweep(record)
    tracker.log_trial(record, record.trials[0])
    state = empty / "home" / "sweeps" / sweep_id
    state.mkdir(parents=True)
    write_local_spec(state, spec)  # the sweep's own state folder, its spec kept there
    planted = state / "searcher-state-2026-11-24_10-15-00.pkl"
    planted.write_bytes(pickle.dumps({"not": "ours"}))
    code = main(["sweep", "--resume", sweep_id, "--tracking-uri", uri])
    said = capsys.readouterr().err
    assert code == 2, said
    assert f"--resume {sweep_id}" in said and planted.name in said and "start a new sweep" in said, said
    assert "Traceback" not in said and not ray.is_initialized()
    assert planted.read_bytes() == pickle.dumps({"not": "ours"})
