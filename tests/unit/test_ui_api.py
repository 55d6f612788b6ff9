"""The UI's JSON API against a real MLflow store (SQLite in tmp) and no Ray cluster.

The launch path stops before Ray here (validation); launching for real is in
tests/integration/served/test_ui_e2e.py.
"""

from __future__ import annotations

import csv
import io
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from elastune.config import RunConfig
from elastune.tracking.mlflow import SweepTracker
from elastune.tracking.records import SweepRecord, TrialRecord, pareto_front
from elastune.ui import UISettings, create_app
from elastune.ui.launch import SweepJob, TrainJob, plan_launch
from elastune.validate import validate_run_config
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _trial(number: int, status: str, sps: float | None, peak: int | None, est: int, **params: Any) -> TrialRecord:
    config = RunConfig.model_validate({"batch": {"micro": params.get("batch.micro", 512)}}).to_dict()
    return TrialRecord(
        trial_id=f"t{number:02d}",
        number=number,
        status=status,  # type: ignore[arg-type]
        params=params,
        config=config,
        estimated_peak_bytes=est,
        samples_per_s=sps,
        peak_memory_bytes=peak,
        peak_memory_kind="cpu_rss_hwm" if peak else None,
        quality=0.5 if sps else None,
        metrics={"logloss": 0.5, "auc": 0.7} if sps else {},
        quality_ok=True if status == "ok" else None,
        error="estimated peak over the ceiling" if status == "infeasible" else None,
    )


def write_lm_sweep(tracking_uri: str, sweep_id: str = "sw-ui-lm") -> SweepRecord:
    """A finished language-model sweep: judged by perplexity, throughput in real tokens too."""
    record = SweepRecord(
        sweep_id=sweep_id,
        spec={"name": "lm_ui_test", "description": "an LM sweep made by the UI tests"},
        status="running",
        memory_ceiling_bytes=600 * 2**20,
        quality_tolerance=0.1,
        quality_metric="perplexity",
        reference_quality=40.0,
        started_at=time.time() - 60,
    )
    trials = []
    for number, (padding, sps, tokens) in enumerate([("static", 300.0, 11_000.0), ("packed", 900.0, 33_000.0)]):
        trial = _trial(number, "ok", sps, 250 * 2**20, 260 * 2**20, **{"data.padding": padding, "batch.micro": 32})
        trial.units, trial.units_per_s = "tokens", tokens
        trial.quality, trial.metrics = 41.0 + number, {"perplexity": 41.0 + number, "loss": 3.7}
        trials.append(trial)
    return _finished(tracking_uri, record, trials)


def _finished(tracking_uri: str, record: SweepRecord, trials: list[TrialRecord]) -> SweepRecord:
    """`record` written to the MLflow store as a sweep that ran `trials`, in order, and finished."""
    tracker = SweepTracker(tracking_uri)
    tracker.start_sweep(record)
    for trial in trials:
        record.trials.append(trial)
        tracker.log_trial(record, trial)
    record.status, record.ended_at = "finished", time.time()
    tracker.finish_sweep(record)
    return record


def write_sweep(tracking_uri: str, sweep_id: str = "sw-ui-1") -> SweepRecord:
    """A finished sweep with every kind of trial: two on the Pareto front, one dominated, one
    pruned, one screened out as infeasible, one OOM."""
    mib = 2**20
    record = SweepRecord(
        sweep_id=sweep_id,
        spec={"name": "ui_test", "description": "made by the UI tests"},
        status="running",
        memory_ceiling_bytes=200 * mib,
        quality_tolerance=0.05,
        started_at=time.time() - 60,
        job_id="elastune-sweep-test",
    )
    trials = [
        _trial(0, "ok", 40_000.0, 120 * mib, 110 * mib, **{"embedding.strategy": "full", "batch.micro": 512}),
        _trial(1, "ok", 55_000.0, 150 * mib, 140 * mib, **{"embedding.strategy": "half", "batch.micro": 1024}),
        _trial(2, "ok", 30_000.0, 160 * mib, 150 * mib, **{"embedding.strategy": "full", "batch.micro": 2048}),
        _trial(3, "pruned", 10_000.0, 90 * mib, 80 * mib, **{"embedding.strategy": "hashed", "batch.micro": 512}),
        _trial(4, "infeasible", None, None, 400 * mib, **{"embedding.strategy": "full", "batch.micro": 2048}),
        _trial(5, "oom", None, None, 190 * mib, **{"embedding.strategy": "int8", "batch.micro": 2048}),
    ]
    return _finished(tracking_uri, record, trials)


def write_pruned_sweep(tracking_uri: str, sweep_id: str = "sw-ui-pruned") -> SweepRecord:
    """Shaped like the README's quick sweep: the reference, a trial confirmed against it, one that
    ASHA stopped early with a samples/s but no measured peak (the peak is read when a trial ends),
    one that ran out of memory (a long note) and one screened out; four parameters."""
    mib = 2**20
    record = SweepRecord(
        sweep_id=sweep_id,
        spec={"name": "pruned_ui_test", "description": "a pruned trial without a measured peak"},
        status="running",
        memory_ceiling_bytes=256 * mib,
        quality_tolerance=0.05,
        started_at=time.time() - 60,
    )
    searched = ("batch.micro", "embedding.strategy", "optimizer.sparse", "precision")
    configs = [
        (512, "half", "rowwise_adagrad", "bf16"),
        (1024, "int8", "sgd", "fp32"),
        (2048, "full", "adagrad", "fp32"),
    ]
    reference = _trial(-1, "ok", 37_105.0, 199 * mib, 212 * mib)
    reference.trial_id = "reference"
    reference.samples_per_s_quartiles, reference.windows = [34_933.0, 37_105.0, 39_244.0], 6
    reference.confirmed_speedup = [1.0, 1.0, 1.0]
    confirmed = _trial(0, "ok", 55_507.0, 48 * mib, 44 * mib, **dict(zip(searched, configs[0], strict=True)))
    confirmed.samples_per_s_quartiles, confirmed.windows = [51_848.0, 55_507.0, 63_034.0], 6
    confirmed.confirmed_speedup = [1.38, 1.42, 1.45]
    pruned = _trial(1, "pruned", 54_335.0, None, 47 * mib, **dict(zip(searched, configs[1], strict=True)))
    oom = _trial(2, "oom", None, None, 250 * mib, **dict(zip(searched, configs[2], strict=True)))
    oom.error = (
        "CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.77 GiB total capacity; 13.2 GiB already allocated)"
    )
    screened = _trial(3, "infeasible", None, None, 900 * mib, **dict(zip(searched, configs[2], strict=True)))
    return _finished(tracking_uri, record, [reference, confirmed, pruned, oom, screened])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, SweepRecord]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    return uri, write_sweep(uri)


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("specs")
    (folder / "dlrm_quick.yaml").write_text((ROOT / "search_spaces" / "dlrm_quick.yaml").read_text())
    (folder / "broken.yaml").write_text("name: broken\nparameters: {}\n")
    (folder.parent / "outside.yaml").write_text((ROOT / "search_spaces" / "dlrm_quick.yaml").read_text())
    return folder


@pytest.fixture(scope="module")
def client(store: tuple[str, SweepRecord], spec_dir: Path) -> Iterator[TestClient]:
    # Nothing listens on this port: every call that needs Ray meets an unreachable cluster.
    settings = UISettings(
        tracking_uri=store[0],
        spec_dir=spec_dir,
        ray_address=f"http://127.0.0.1:{free_port()}",
        allowed_hosts=("testserver",),
    )
    with TestClient(create_app(settings)) as c:
        yield c


def problems(response: Any) -> dict[str, dict[str, Any]]:
    assert response.status_code == 422, response.text
    return {p["field"]: p for p in response.json()["problems"]}


# ---- reading ------------------------------------------------------------------------------


def test_health_names_the_services(client: TestClient, store: tuple[str, SweepRecord]) -> None:
    body = client.get("/api/health").json()
    assert body["status"] == "ok"
    assert body["tracking_uri"] == store[0]


def test_specs_are_listed_by_name_and_a_broken_one_says_why(client: TestClient) -> None:
    specs = {s["name"]: s for s in client.get("/api/specs").json()}
    assert set(specs) == {"dlrm_quick", "broken"}  # outside.yaml is in the parent folder: not offered
    from elastune.tuning.spec import load_sweep_spec

    ceiling = load_sweep_spec(ROOT / "search_spaces" / "dlrm_quick.yaml").constraints.memory_ceiling
    assert specs["dlrm_quick"]["valid"] and specs["dlrm_quick"]["memory_ceiling_bytes"] == ceiling
    assert not specs["broken"]["valid"] and "parameters" in specs["broken"]["error"]


def test_job_kinds_publish_schemas_without_any_free_form_field(client: TestClient) -> None:
    body = client.get("/api/job-kinds").json()
    assert set(body["kinds"]) == {"sweep", "train"}
    for kind in body["kinds"].values():
        fields = set(kind["schema"]["properties"])
        assert not fields & {"entrypoint", "runtime_env", "command", "path", "spec_path"}
        assert kind["schema"]["additionalProperties"] is False
    assert "embedding" in body["run_config_schema"]["properties"]
    assert body["specs"] == ["broken", "dlrm_quick"]


def test_sweep_list_and_detail(client: TestClient, store: tuple[str, SweepRecord]) -> None:
    _, record = store
    listed = client.get("/api/sweeps").json()
    assert [s["sweep_id"] for s in listed] == [record.sweep_id]
    assert listed[0]["counts"]["infeasible"] == 1 and listed[0]["best_samples_per_s"] == 55_000.0

    detail = client.get(f"/api/sweeps/{record.sweep_id}").json()
    assert detail["best"]["trial_id"] == "t01"
    assert detail["pareto_trial_ids"] == [t.trial_id for t in pareto_front(record.trials)] == ["t00", "t01"]
    flags = {t["trial_id"]: (t["pareto"], t["best"]) for t in detail["trials"]}
    assert flags["t01"] == (True, True) and flags["t02"] == (False, False)
    assert detail["parameters"] == ["batch.micro", "embedding.strategy"]  # no order in the spec: sorted
    assert detail["mlflow_run_id"] and detail["mlflow_url"] is None  # a SQLite store has no web page


def test_an_lm_sweep_shows_its_tokens_and_its_metric(tmp_path: Path, spec_dir: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = write_lm_sweep(uri)
    settings = UISettings(tracking_uri=uri, spec_dir=spec_dir, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as lm_client:
        (listed,) = lm_client.get("/api/sweeps").json()
        assert (listed["units"], listed["best_units_per_s"]) == ("tokens", 33_000.0)
        detail = lm_client.get(f"/api/sweeps/{record.sweep_id}").json()
    assert (detail["quality_metric"], detail["best"]["trial_id"]) == ("perplexity", "t01")
    assert [t["units_per_s"] for t in detail["trials"]] == [11_000.0, 33_000.0]
    # ...and a DLRM sweep counts no units of its own
    write_sweep(uri, "sw-ui-dlrm")
    with TestClient(create_app(settings)) as lm_client:
        assert lm_client.get("/api/sweeps/sw-ui-dlrm").json()["units"] is None


def test_a_trial_stopped_early_is_plotted_at_its_predicted_peak(tmp_path: Path, spec_dir: Path) -> None:
    # The charts draw each trial at plot_peak_bytes: a pruned trial has a samples/s but no measured
    # peak, and was left out of both charts; it is drawn at its predicted peak, and says so.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = write_pruned_sweep(uri)
    settings = UISettings(tracking_uri=uri, spec_dir=spec_dir, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as c:
        trials = {t["number"]: t for t in c.get(f"/api/sweeps/{record.sweep_id}").json()["trials"]}
    pruned = trials[1]
    assert (pruned["status"], pruned["samples_per_s"], pruned["peak_memory_bytes"]) == ("pruned", 54_335.0, None)
    assert (pruned["plot_peak_bytes"], pruned["plot_peak_source"]) == (47 * 2**20, "predicted")
    assert (trials[0]["plot_peak_bytes"], trials[0]["plot_peak_source"]) == (48 * 2**20, "measured")
    assert trials[-1]["plot_peak_source"] == "measured"  # the reference ran like any trial
    # a trial that never ran has its prediction too: the scatter's strip below the axis draws it there
    assert (trials[2]["plot_peak_bytes"], trials[2]["plot_peak_source"]) == (250 * 2**20, "predicted")
    assert trials[2]["samples_per_s"] is None


def test_every_trial_that_measured_a_throughput_has_a_peak_to_plot_at(
    client: TestClient, store: tuple[str, SweepRecord]
) -> None:
    trials = client.get(f"/api/sweeps/{store[1].sweep_id}").json()["trials"]
    ran = [t for t in trials if t["samples_per_s"] is not None]
    assert {t["status"] for t in ran} == {"ok", "pruned"}
    assert all(t["plot_peak_bytes"] == t["peak_memory_bytes"] and t["plot_peak_source"] == "measured" for t in ran)


def test_csv_export_has_one_row_per_trial(client: TestClient, store: tuple[str, SweepRecord]) -> None:
    response = client.get(f"/api/sweeps/{store[1].sweep_id}/trials.csv")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [r["status"] for r in rows] == ["ok", "ok", "ok", "pruned", "infeasible", "oom"]


def test_best_config_downloads_as_a_valid_run_config(client: TestClient, store: tuple[str, SweepRecord]) -> None:
    response = client.get(f"/api/sweeps/{store[1].sweep_id}/best-config.yaml")
    assert response.status_code == 200
    cfg = validate_run_config(yaml.safe_load(response.text))
    assert cfg.batch.micro == 1024  # trial t01's


def test_unknown_sweep_is_a_404_in_plain_words(client: TestClient) -> None:
    response = client.get("/api/sweeps/no-such-sweep")
    assert response.status_code == 404
    assert "no such sweep" in response.json()["detail"]


def test_unreadable_store_is_a_503_that_names_it(spec_dir: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    settings = UISettings(tracking_uri=url, spec_dir=spec_dir, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as c:
        response = c.get("/api/sweeps")
    assert response.status_code == 503
    assert url in response.json()["detail"]


def test_pages_render(client: TestClient, store: tuple[str, SweepRecord]) -> None:
    for path in ("/jobs", "/sweeps", f"/sweeps/{store[1].sweep_id}", "/memory"):
        response = client.get(path)
        assert response.status_code == 200 and "<nav>" in response.text, path
    assert client.get("/", follow_redirects=False).headers["location"] == "/jobs"
    assert client.get("/static/charts.js").status_code == 200


# ---- launching: validation ----------------------------------------------------------------


def test_a_valid_launch_meets_the_unreachable_cluster_with_a_503(client: TestClient) -> None:
    response = client.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick", "max_trials": 2})
    assert response.status_code == 503
    assert "Cannot reach the Ray job server" in response.json()["detail"]


def test_bad_fields_are_reported_each_beside_its_field(client: TestClient) -> None:
    body = {"kind": "sweep", "spec": "dlrm_quick", "memory_ceiling": "lots", "max_trials": 0, "gpus_per_trial": -1}
    found = problems(client.post("/api/jobs", json=body))
    assert set(found) == {"memory_ceiling", "max_trials", "gpus_per_trial"}
    assert found["memory_ceiling"]["value"] == "lots" and "2GiB" in found["memory_ceiling"]["message"]


def test_numbers_sent_as_text_are_refused(client: TestClient) -> None:
    found = problems(client.post("/api/jobs", json={"kind": "sweep", "spec": "dlrm_quick", "max_trials": "4"}))
    assert set(found) == {"max_trials"}


def test_unknown_kind_is_refused(client: TestClient) -> None:
    found = problems(client.post("/api/jobs", json={"kind": "shell", "spec": "dlrm_quick"}))
    assert found["kind"]["value"] == "shell" and "sweep, train" in found["kind"]["message"]


def test_unknown_spec_names_the_ones_there_are(client: TestClient) -> None:
    found = problems(client.post("/api/jobs", json={"kind": "sweep", "spec": "nope"}))
    assert "dlrm_quick" in found["spec"]["message"]


def test_train_overrides_are_validated_per_key(client: TestClient) -> None:
    body = {"kind": "train", "sets": ["batch.micro=0", "precison=bf16", "steps=10"]}
    found = problems(client.post("/api/jobs", json=body))
    # steps=10 is below the default warmup_steps: the run's rule, said beside the two bad keys, not after them
    assert set(found) == {"sets.batch.micro", "sets.precison", "sets.config"}
    assert "did you mean 'precision'" in found["sets.precison"]["message"]
    assert "warmup_steps=20 must be below steps=10" in found["sets.config"]["message"]


def test_train_from_an_unknown_sweep_is_refused(client: TestClient) -> None:
    found = problems(client.post("/api/jobs", json={"kind": "train", "from_sweep": "nope-1"}))
    assert "no sweep with this id" in found["from_sweep"]["message"]


def test_job_ids_are_checked_before_reaching_ray(client: TestClient) -> None:
    assert client.get("/api/jobs/..%2F..%2Fetc/logs").status_code in (404, 422)
    assert client.get("/api/jobs/bad id!/logs").status_code == 422


# ---- the entrypoint the server builds -----------------------------------------------------


def test_sweep_argv_is_built_from_validated_fields_only(spec_dir: Path) -> None:
    job = SweepJob(spec="dlrm_quick", memory_ceiling="1.5GB", max_trials=3, cpus_per_trial=0.5)
    plan = plan_launch(job, spec_dir=spec_dir, python="/venv/bin/python", tracking_uri="sqlite:////t/m.db")
    assert plan.argv == [
        "/venv/bin/python",
        "-m",
        "elastune.jobs.sweep",
        str((spec_dir / "dlrm_quick.yaml").resolve()),
        "--memory-ceiling",
        "1.5GB",
        "--max-trials",
        "3",
        "--cpus-per-trial",
        "0.5",
        "--tracking-uri",
        "sqlite:////t/m.db",
    ]


def test_train_overrides_are_quoted_for_the_shell(spec_dir: Path) -> None:
    job = TrainJob(sets=["workload_options.top_mlp=[64, 32]"])
    plan = plan_launch(job, spec_dir=spec_dir, python="python", tracking_uri=None)
    assert plan.entrypoint == "python -m elastune.jobs.train --untrusted --set 'workload_options.top_mlp=[64, 32]'"


# ---- memory -------------------------------------------------------------------------------


def _status() -> dict[str, Any]:
    gib = 2**30
    return {
        "devices": [
            {
                "device": "node1:gpu0",
                "capacity_bytes": 16 * gib,
                "reserve_bytes": gib,
                "free_bytes": 5 * gib,
                "trials": [
                    {"trial_id": "a", "grant_bytes": 6 * gib, "used_bytes": 5 * gib, "min_bytes": gib,
                     "want_bytes": 8 * gib, "state": "active"},
                    {"trial_id": "b", "grant_bytes": 4 * gib, "used_bytes": 3 * gib, "min_bytes": gib,
                     "want_bytes": 4 * gib, "state": "active"},
                ],
            }
        ],
        "timeline": [{"t": 1.0, "device": "node1:gpu0", "trial_id": "a", "grant_bytes": 6 * gib, "used_bytes": 0}],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("reader", "available", "reason"),
    [
        (lambda s: _status(), True, ""),
        (lambda s: None, False, "No EDO broker is running"),
        (
            lambda s: (_ for _ in ()).throw(ConnectionError("no cluster")),
            False,
            "No Ray cluster to ask for device memory",
        ),
    ],
)
def test_memory_view(store: tuple[str, SweepRecord], spec_dir: Path, reader: Any, available: bool, reason: str) -> None:
    settings = UISettings(tracking_uri=store[0], spec_dir=spec_dir, allowed_hosts=("testserver",))
    with TestClient(create_app(settings, memory_reader=reader)) as c:
        body = c.get("/api/memory?timeline_s=60").json()
    assert body["available"] is available and body["reason"].startswith(reason)
    if available:
        device = body["devices"][0]
        assert device["granted_bytes"] == 10 * 2**30 and device["used_bytes"] == 8 * 2**30
        assert len(body["timeline"]) == 1
    else:
        assert body["devices"] == []


def test_memory_reader_given_a_dashboard_url_says_what_to_pass_instead() -> None:
    import ray
    from elastune.ui.memory import make_broker_reader, memory_view

    if ray.is_initialized():
        pytest.skip("this process is already a Ray driver; the reader would use that connection")
    view = memory_view(make_broker_reader("http://127.0.0.1:8265"), 60)
    # said at once, not after the reader's wait ran out ("not answering"); and no connection tried
    assert not view["available"] and "--cluster-address ray://HOST:10001" in view["reason"]
    assert not ray.is_initialized()


def test_the_memory_page_reaches_the_broker_at_the_cluster_address_not_the_job_server() -> None:
    # docker/compose.yaml's UI: jobs through the job server's URL, the broker through Ray Client
    split = UISettings(ray_address="http://ray-head:8265", cluster_address="ray://ray-head:10001")
    assert split.broker_address() == "ray://ray-head:10001"
    assert UISettings(ray_address="10.0.0.5:6379").broker_address() == "10.0.0.5:6379"  # one address serves both
    # the local cluster at Ray's default GCS on loopback, never Ray's discovery file (`auto`)
    assert UISettings().broker_address() == "127.0.0.1:6379"
    assert UISettings(ray_address="http://ray-head:8265").broker_address() is None  # not ours to guess


def test_a_url_as_the_cluster_address_is_refused_at_start_up() -> None:
    from elastune.errors import InputError
    from elastune.ui import check_bind

    with pytest.raises(InputError, match="--cluster-address='http://ray-head:8265' is a URL"):
        check_bind(UISettings(cluster_address="http://ray-head:8265"))
    check_bind(UISettings(cluster_address="ray://ray-head:10001"))


def test_the_cli_hands_the_cluster_address_to_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import elastune.ui
    from elastune.cli import main

    served: list[UISettings] = []
    monkeypatch.delenv("ELASTUNE_UI_TOKEN", raising=False)
    monkeypatch.setattr(elastune.ui, "serve", served.append)
    args = ["ui", "--ray-address", "http://ray-head:8265", "--cluster-address", "ray://ray-head:10001"]
    assert main(args) == 0
    assert served[0].ray_address == "http://ray-head:8265" and served[0].broker_address() == "ray://ray-head:10001"
