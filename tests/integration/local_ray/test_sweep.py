"""A sweep for real: a local Ray on 127.0.0.1, a real SQLite MLflow store, the real engine.

The tiny spec's grid is full vs hashed x two splits of a 128 batch, with a ceiling between the
estimator's prices of the two strategies (the upper bounds it screens with), so the full proposals
must be screened out (never launched) and the hashed ones must run. The Ray
(local_ray/conftest.py) declares one logical GPU and each trial asks for half of it: the two hashed
trials share it (Ray's fractional GPUs), and hand it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from elastune.cli import main
from elastune.memory.estimate import estimate
from elastune.tracking.mlflow import artifact_path, load_sweep
from elastune.tracking.records import SweepRecord
from elastune.tuning.spec import SweepSpec, validate_sweep_spec
from elastune.tuning.sweep import SweepOptions, run_sweep

from tests.integration.sweep_specs import tiny_spec

pytestmark = pytest.mark.integration


def ceiling_between_strategies(raw: dict[str, Any]) -> int:
    spec = validate_sweep_spec(raw)
    price = {
        (s, m): estimate(spec.trial_config({"embedding.strategy": s, "batch.micro": m})).upper_bound_bytes
        for s in ("full", "hashed")
        for m in (64, 128)
    }
    cheapest_full = min(v for (s, _), v in price.items() if s == "full")
    dearest_hashed = max(v for (s, _), v in price.items() if s == "hashed")
    assert dearest_hashed < cheapest_full, price
    return (dearest_hashed + cheapest_full) // 2


@pytest.fixture(scope="module")
def swept(ray_local: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SweepRecord, str, Path]]:
    root = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    raw = tiny_spec(resources={"cpus_per_trial": 1, "gpus_per_trial": 0.5})
    raw["constraints"]["memory_ceiling"] = ceiling_between_strategies(raw)
    record = run_sweep(SweepSpec.model_validate(raw), SweepOptions(tracking_uri=uri, home=root / "home"))
    yield record, uri, root


def test_over_ceiling_proposals_are_screened_and_the_rest_run(swept: tuple[SweepRecord, str, Path]) -> None:
    record, _, _ = swept
    by_strategy: dict[str, list[str]] = {}
    for trial in record.trials:
        if trial.trial_id != "reference":
            by_strategy.setdefault(trial.params["embedding.strategy"], []).append(trial.status)
    assert sorted(by_strategy["full"]) == ["infeasible", "infeasible"]
    assert all(
        t.trial_id.startswith("screened-") for t in record.trials if t.params.get("embedding.strategy") == "full"
    )
    assert sorted(by_strategy["hashed"]) == ["ok", "ok"]
    assert record.status == "finished"


def test_fractional_gpu_shares_are_all_handed_back(
    swept: tuple[SweepRecord, str, Path], wait_until: Callable[..., None]
) -> None:
    import ray

    record, _, _ = swept
    ran = [t for t in record.trials if t.status == "ok"]
    assert len(ran) == 3  # the reference and both hashed trials, each on half of the one GPU
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 1.0, 30, "every GPU share to be handed back")


def test_no_trial_over_the_ceiling_counts_as_feasible(swept: tuple[SweepRecord, str, Path]) -> None:
    record, _, _ = swept
    ceiling = record.memory_ceiling_bytes
    assert ceiling is not None
    for trial in record.trials:
        if trial.peak_memory_bytes is not None and trial.peak_memory_bytes > ceiling:
            assert not trial.feasible and trial.status == "infeasible"
    best = record.best()
    assert best is not None and best.peak_memory_bytes is not None and best.peak_memory_bytes <= ceiling


def test_optuna_learns_violations_as_constraints_never_as_fail(swept: tuple[SweepRecord, str, Path]) -> None:
    """What Optuna was told, read back the way a resume reads it: the searcher restored from the
    state it saved in the sweep's folder (JSON it wrote itself), not Tune's files picked apart."""
    import optuna
    from elastune.tuning.search import ScreeningSearch

    record, _, root = swept
    searcher = ScreeningSearch(
        SweepSpec.model_validate(record.spec), record.sweep_id, metric="samples_per_s", mode="max"
    )
    searcher.restore_from_dir(str(root / "home" / record.sweep_id))
    trials = searcher.study().get_trials(deepcopy=False)
    assert len(trials) == 4 and searcher.proposed == 4
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), [t.state for t in trials]
    for t in trials:
        over = t.constraints["memory"] > 0
        assert over == (t.params["embedding.strategy"] == "full"), (t.params, t.constraints)
    # the same four proposals the results table holds, with the values their trials reported
    ran = {tuple(sorted(t.params.items())): t.samples_per_s for t in record.trials if t.trial_id != "reference"}
    told = {tuple(sorted(t.params.items())): t.value for t in trials}
    assert told.keys() == ran.keys()
    assert all(told[k] == ran[k] for k in told if ran[k] is not None), (told, ran)


def test_mlflow_holds_one_child_run_per_trial(swept: tuple[SweepRecord, str, Path]) -> None:
    from mlflow.tracking import MlflowClient

    record, uri, _ = swept
    client = MlflowClient(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name("elastune").experiment_id],
        filter_string=f"tags.`elastune.sweep_id` = '{record.sweep_id}' and tags.`elastune.kind` = 'trial'",
    )
    ids = [r.data.tags["elastune.trial_id"] for r in runs]
    assert sorted(ids) == sorted(t.trial_id for t in record.trials)
    assert len(ids) == len(set(ids)) == 5  # 4 proposals + the reference
    parent = record.mlflow_run_id
    assert all(r.data.tags["mlflow.parentRunId"] == parent for r in runs)
    statuses = {r.data.tags["elastune.trial_id"]: r.data.tags["elastune.status"] for r in runs}
    assert sorted(statuses.values()).count("infeasible") >= 2


def test_results_command_reads_the_sweep_back(
    swept: tuple[SweepRecord, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    record, uri, _ = swept
    shown = json.loads(_elastune(["results", record.sweep_id, "--format", "json", "--tracking-uri", uri], capsys))
    best = record.best()
    assert best is not None and shown["best"]["trial_id"] == best.trial_id
    assert shown["counts"] == record.counts()
    table = _elastune(["results", record.sweep_id, "--tracking-uri", uri], capsys)
    assert record.sweep_id in table and "samples/s" in table


def test_best_config_file_trains_unchanged(
    swept: tuple[SweepRecord, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    record, uri, _ = swept
    best = load_sweep(record.sweep_id, uri).best()
    assert best is not None
    path = artifact_path(record.sweep_id, "best_config.yaml", uri)
    assert json.loads(_elastune(["train", str(path), "--format", "json"], capsys))["config"] == best.config
    via_flag = _elastune(["train", "--from-sweep", record.sweep_id, "--tracking-uri", uri, "--format", "json"], capsys)
    assert json.loads(via_flag)["config"] == best.config


def test_from_sweep_measures_with_the_trials_threads(
    swept: tuple[SweepRecord, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Parity: a trial's torch threads are its CPUs, recorded in its config; --from-sweep reruns
    with them and says so; --all-cores lifts them."""
    record, uri, _ = swept
    assert {t.config["threads"] for t in record.trials if t.config} == {1}  # cpus_per_trial: 1
    capsys.readouterr()
    assert main(["train", "--from-sweep", record.sweep_id, "--tracking-uri", uri, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["config"]["threads"] == 1 and "threads=1" in err and "--all-cores" in err
    assert (
        main(["train", "--from-sweep", record.sweep_id, "--tracking-uri", uri, "--all-cores", "--format", "json"]) == 0
    )
    out, err = capsys.readouterr()
    assert json.loads(out)["config"]["threads"] is None and "threads all" in err


def _elastune(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's entry point, in this process (a fresh interpreter per command would spend most
    of its time importing); its stdout, after checking it exited 0."""
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    return out


def test_the_confirmation_stage_re_measures_the_fastest_and_names_the_best(
    ray_local: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """confirm {top: 2, rounds: 2}: after the search the two fastest feasible configs are trained
    again against the reference, interleaved; their ratios are in the record, in MLflow and in the
    results table, and the sweep's best is the confirmed one. The grid proposes the reference's own
    config too (micro 128 of an effective 128): it is not trained again (its figures are the
    reference's) nor confirmed against itself."""
    from mlflow.tracking import MlflowClient

    from tests.unit.test_tracking_mlflow import child_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    raw = tiny_spec(
        confirm={"top": 2, "rounds": 2}, parameters={"batch.micro": {"type": "choice", "values": [32, 64, 128]}}
    )
    raw["parameters"].pop("embedding.strategy")
    raw["budget"] = {"max_trials": 3, "max_concurrent": 2, "trial_samples": 768}
    lines: list[str] = []
    record = run_sweep(SweepSpec.model_validate(raw), SweepOptions(tracking_uri=uri, home=tmp_path, echo=lines.append))
    confirmed = {t.trial_id: t.confirmed_speedup for t in record.trials if t.confirmed_speedup}
    assert len(confirmed) == 3 and confirmed["reference"] == [1.0, 1.0, 1.0]  # two configs + the reference
    for low, median, high in confirmed.values():
        assert 0 < low <= median <= high
    best = record.best()
    assert best is not None and best.trial_id in confirmed
    ranking = record.ranking()
    if ranking.tied:  # the rounds' ranges overlap: not told apart, the leaner config wins, and it is said
        assert best.peak_memory_bytes == min(t.peak_memory_bytes or 0 for t in ranking.tied)
        assert any(line.startswith("not distinguishable on this machine: ") for line in lines), lines
    else:
        assert best.confirmed_speedup == max(confirmed.values(), key=lambda c: c[1])
    reference = next(t for t in record.trials if t.trial_id == "reference")
    (twin,) = [t for t in record.trials if t.trial_id != "reference" and t.params == {"batch.micro": 128}]
    assert twin.status == "ok" and twin.samples_per_s == reference.samples_per_s and twin.confirmed_speedup is None
    said = f"confirmation: trial {twin.number} is the reference's own config; not measured against itself (1.00x)"
    assert said in lines and best.trial_id != twin.trial_id
    assert [line.split(":")[0].strip() for line in lines if line.strip().startswith("round ")] == ["round 1", "round 2"]
    # MLflow: the ratios on the child runs and the best's on the parent
    runs = {r.data.tags["elastune.trial_id"]: r for r in child_runs(uri, record.mlflow_run_id or "")}
    for trial_id, (_, median, _) in confirmed.items():
        assert runs[trial_id].data.metrics["confirmed_speedup_median"] == pytest.approx(median)
    parent = MlflowClient(uri).get_run(record.mlflow_run_id or "")
    assert parent.data.metrics["best_confirmed_speedup"] == pytest.approx(best.confirmed_speedup[1])
    # the results table ranks the confirmed first
    capsys.readouterr()
    assert main(["results", record.sweep_id, "--tracking-uri", uri, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["best"]["trial_id"] == best.trial_id
