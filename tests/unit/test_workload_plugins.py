"""Your own workload without touching elastune: an import path `MODULE:FACTORY`, or a name an
installed package registers under the `elastune.workloads` entry-point group; its options are
validated by its own pydantic model; every way it can be wrong is a config error naming the field
(exit 2, nothing run); a remote client may name installed workloads only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.untrusted import override_problems, stored_config_problems
from elastune.validate import load_run_config
from elastune.workloads import build_workload, workload_names

from tests.conftest import ANY_TINY as TINY

TOWER = "tests.unit.plugin_workload.tower"


def _args(*sets: str) -> list[str]:
    return [a for s in [*TINY, *sets] for a in ("--set", s)]


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An installed distribution that registers the towers as `towers` (what `pip install` of a
    package with `[project.entry-points."elastune.workloads"]` leaves in site-packages)."""
    dist = tmp_path / "site" / "tower_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tower-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[elastune.workloads]\ntowers = {TOWER}:make_workload\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return "towers"


@pytest.mark.parametrize("how", ["import path", "entry point"])
def test_a_users_workload_trains_and_is_estimated(how: str, plugin: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"{TOWER}:make_workload" if how == "import path" else plugin
    sets = [f"workload={name}", "workload_options={hidden: 8}", "embedding.strategy=hashed"]
    assert main(["train", "--format", "json", *_args(*sets)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["workload"] == name and result["config"]["workload_options"] == {"hidden": 8}
    assert result["samples"] > 0 and 0 < result["val_auc"] <= 1
    assert main(["estimate", "--format", "json", *_args(*sets)]) == 0
    estimate = json.loads(capsys.readouterr().out)
    assert estimate["tables"]["count"] == 2 and estimate["estimated_peak_bytes"] > 0


def test_the_plugin_is_listed_and_built_with_its_options(plugin: str) -> None:
    assert plugin in workload_names() and "dlrm" in workload_names()
    workload = build_workload(load_run_config(None, [f"workload={plugin}", "workload_options={hidden: 3}"]))
    assert workload.table_sizes == (500, 300)
    assert workload.options.hidden == 3  # type: ignore[attr-defined]
    model = workload.build_model()
    assert type(model.user).__name__ == "SwappedEmbedding"  # the run's strategy, through swap_embeddings


@pytest.mark.parametrize(
    ("sets", "field", "says"),
    [
        (["workload=no_such_pkg.models:make"], "workload", "cannot import 'no_such_pkg.models'"),
        ([f"workload={TOWER}:missing"], "workload", "has no 'missing'"),
        ([f"workload={TOWER}:NOT_CALLABLE"], "workload", "not a factory"),
        ([f"workload={TOWER}:raising"], "workload", "its factory raised RuntimeError: the towers need a GPU"),
        ([f"workload={TOWER}:not_a_workload"], "workload", "not an elastune.Workload"),
        (["workload=two_towers"], "workload", "no workload named 'two_towers'; installed:"),
        (["workload=os.system; rm -rf ~"], "workload", "string should match pattern"),
        ([f"workload={TOWER}:make_workload", "workload_options={hidden: lots}"], "workload_options.hidden", "integer"),
        ([f"workload={TOWER}:make_workload", "workload_options={depth: 3}"], "workload_options.depth", "not an option"),
        ([f"workload={TOWER}:wrong_metric", "workload_options={hidden: 8}"], "workload_options", "takes no options"),
        (["workload_options={hidden: 8}"], "workload_options.hidden", "not an option of workload 'dlrm'"),
        ([f"workload={TOWER}:untyped_metric"], "workload", "UntypedMetric.quality is a tuple; declare it as"),
    ],
)
def test_every_way_a_workload_can_be_wrong_is_a_config_error(
    sets: list[str], field: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    for command in ("train", "estimate"):
        assert main([command, *_args(*sets)]) == 2
        said = capsys.readouterr().err
        assert field in said and says.lower() in said.lower(), said
        assert "Traceback" not in said
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_remote_client_names_installed_workloads_only(plugin: str) -> None:
    # An import path would make the run import whatever module the client names.
    assert override_problems([f"workload={plugin}"]) == []
    refused = override_problems([f"workload={TOWER}:make_workload"])
    assert [p.path for p in refused] == ["sets.workload"] and "import path" in refused[0].message
    stored = stored_config_problems({"workload": f"{TOWER}:make_workload"})
    assert [p.path for p in stored] == ["from_sweep.workload"]
    assert [p.path for p in override_problems(["workload_options={hidden: 8}"])] == ["sets.workload_options.hidden"]


def test_a_workload_judged_by_its_own_metric(capsys: pytest.CaptureFixture[str]) -> None:
    """A workload that declares `quality` and computes `evaluate` is reported by that metric: no log
    loss or AUC invented for it, and `train` names the metric and its direction."""
    sets = [f"workload={TOWER}:make_ranked", "batch.micro=64"]
    assert main(["train", *_args(*sets)]) == 0
    text = capsys.readouterr().out
    assert "eval hit_rate" in text and "higher is better" in text and "log loss" not in text
    assert main(["train", "--format", "json", *_args(*sets)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["quality_metric"], result["quality_direction"]) == ("hit_rate", "max")
    assert result["quality"] == result["metrics"]["hit_rate"] == result["val_hit_rate"]
    assert 0 <= result["quality"] <= 1 and result["metrics"]["batches_seen"] > 0
    assert "val_logloss" not in result and "logloss" not in result["metrics"]


def test_a_declared_metric_the_workload_does_not_compute_is_an_error() -> None:
    from elastune.training.loop import train

    with pytest.raises(ValueError, match="declares the quality metric 'recall_at_10' but its eval metrics are"):
        train(load_run_config(None, [*TINY, f"workload={TOWER}:wrong_metric"]))


def test_an_unknown_name_lists_the_installed_workloads() -> None:
    from elastune.workloads import WorkloadError
    from elastune.workloads.registry import resolve

    try:
        resolve("two_towers")
    except WorkloadError as exc:
        listed = str(exc).split("installed: ", 1)[1].split(";")[0].split(", ")
    else:
        raise AssertionError("an unknown workload name was resolved")
    assert {"dlrm", "lm", "hf", "two_tower"} <= set(listed) and listed == sorted(listed)
