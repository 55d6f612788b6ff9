"""A relative data file in a run config's YAML is taken from the YAML file's folder (the config and
its data move together); one given with --set from the working directory, as a shell argument is.
A file that is not there is said with the path tried and what it was taken from.

Through the CLI (`elastune config show [--check]`), run from a working directory that holds no data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from elastune.cli import main
from elastune.errors import ConfigError
from elastune.validate import validate_run_config

SCHEMA = {"label": "clicked", "dense": ["price"], "categorical": ["city"]}


def table(path: Path, rows: int = 600) -> Path:
    lines = ["clicked,price,city", *(f"{i % 2},{i / 10},c{i % 7}" for i in range(rows))]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the config's folder, the working directory): neither inside the other."""
    configs, work = tmp_path / "configs", tmp_path / "work"
    configs.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    return configs, work


def write_config(folder: Path, data: dict[str, object]) -> Path:
    run = folder / "run.yaml"
    config = {"data": {"source": "table", "schema": SCHEMA, **data}, "eval": {"samples": 256}}
    run.write_text(yaml.safe_dump(config))
    return run


def shown(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["config", "show", *argv, "--format", "json"]) == 0, capsys.readouterr().err
    data: dict[str, object] = json.loads(capsys.readouterr().out)["data"]
    return data


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["config", "show", "--check", *argv]) == 2  # --check: the files are read
    said = capsys.readouterr()
    assert said.out == ""
    return " ".join(said.err.split())  # one line: rich may wrap a long one


def test_a_relative_data_file_in_the_yaml_is_taken_from_its_folder(
    layout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    configs, work = layout
    table(configs / "clicks.csv")
    table(configs / "held-out.csv", rows=300)
    run = write_config(configs, {"path": "clicks.csv", "eval_path": "held-out.csv"})
    data = shown(capsys, str(run))
    assert data["path"] == str(configs / "clicks.csv")
    assert data["eval_path"] == str(configs / "held-out.csv")
    assert not (work / "clicks.csv").exists()  # not found by luck in the working directory


def test_an_absolute_data_file_in_the_yaml_is_kept(
    layout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    configs, work = layout
    clicks = table(work / "clicks.csv")
    run = write_config(configs, {"path": str(clicks)})
    assert shown(capsys, str(run))["path"] == str(clicks)


def test_a_data_file_given_with_set_is_taken_from_the_working_directory(
    layout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    configs, work = layout
    table(configs / "clicks.csv")
    table(work / "mine.csv")
    run = write_config(configs, {"path": "clicks.csv"})
    data = shown(capsys, str(run), "--set", "data.path=mine.csv")
    assert data["path"] == "mine.csv"  # relative, as given: the working directory's
    assert not (configs / "mine.csv").exists()


def test_a_missing_file_in_the_yaml_says_the_path_tried_and_from_what(
    layout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    configs, _ = layout
    run = write_config(configs, {"path": "clickz.csv"})
    said = refused(capsys, str(run))
    assert (
        f"data.path='clickz.csv': tried {configs / 'clickz.csv'} (a relative path in {run} is taken from that "
        "file's folder): file does not exist; give the path to an existing data file"
    ) in said, said


def test_a_missing_file_given_with_set_says_the_path_tried_and_from_what(
    layout: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    configs, work = layout
    table(configs / "clicks.csv")
    run = write_config(configs, {"path": "clicks.csv"})
    said = refused(capsys, str(run), "--set", "data.eval_path=gone.csv")
    assert (
        f"data.eval_path='gone.csv': tried {work / 'gone.csv'} (a relative path is taken from the working "
        "directory): file does not exist"
    ) in said, said


def test_a_config_that_is_not_a_yaml_file_takes_no_folder(layout: tuple[Path, Path]) -> None:
    """Only a file the user gave is read relative to its folder: a config handed over as data (a
    sweep's best, read back from a store) names no folder, and its relative path stays the working
    directory's."""
    configs, work = layout
    table(configs / "clicks.csv")
    with pytest.raises(ConfigError, match="taken from the working directory") as caught:
        validate_run_config({"data": {"source": "table", "schema": SCHEMA, "path": "clicks.csv"}})
    assert str(work / "clicks.csv") in str(caught.value)


# -- a sweep spec's base: the same rule, from the spec file's folder


def write_spec(folder: Path, data: dict[str, object]) -> Path:
    spec = folder / "sweep.yaml"
    base = {"data": {"source": "table", "schema": SCHEMA, **data}, "eval": {"samples": 256}}
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "rel",
                "base": base,
                "parameters": {"batch.micro": {"type": "choice", "values": [256, 512]}},
                "constraints": {"effective_batch": 512},
            }
        )
    )
    return spec


def test_a_relative_data_file_in_a_sweep_specs_base_is_taken_from_its_folder(layout: tuple[Path, Path]) -> None:
    from elastune.tuning.spec import load_sweep_spec

    configs, work = layout
    table(configs / "clicks.csv")
    spec = load_sweep_spec(write_spec(configs, {"path": "clicks.csv"}))
    assert spec.base["data"]["path"] == str(configs / "clicks.csv")  # what every trial reads, wherever it runs
    assert not (work / "clicks.csv").exists()


def test_a_sweep_specs_data_file_given_with_set_is_taken_from_the_working_directory(
    layout: tuple[Path, Path],
) -> None:
    from elastune.tuning.spec import load_sweep_spec

    configs, work = layout
    table(configs / "clicks.csv")
    table(work / "mine.csv")
    spec = load_sweep_spec(write_spec(configs, {"path": "clicks.csv"}), ["base.data.path=mine.csv"])
    assert spec.base["data"]["path"] == "mine.csv"


def test_a_missing_file_in_a_sweep_spec_says_the_path_tried_and_from_what(layout: tuple[Path, Path]) -> None:
    from elastune.tuning.spec import load_sweep_spec

    configs, _ = layout
    spec_file = write_spec(configs, {"path": "clickz.csv"})
    with pytest.raises(ConfigError) as caught:
        load_sweep_spec(spec_file)
    said = " ".join(str(caught.value).split())
    assert (
        f"base.data.path='clickz.csv': tried {configs / 'clickz.csv'} (a relative path in {spec_file} is taken "
        "from that file's folder)"
    ) in said, said
