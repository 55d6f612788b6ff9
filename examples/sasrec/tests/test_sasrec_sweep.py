"""The example's own sweep spec (search_spaces/sasrec.yaml), shrunk to a minute, on a local Ray:
trials import the installed `sasrec` package in Ray's workers, search the training loss and the
item table's storage, and are judged by recall@10, higher is better; MLflow records them by that
metric, and the web UI (its JSON API and the sweep's page, over the same store) shows them by it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

# Read by Ray when it is imported (tests/conftest.py sets the same for the repository's own tests):
# every address stays on the loopback interface.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

SPECS = Path(__file__).resolve().parents[1] / "search_spaces"


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A local Ray for this module (as tests/integration/local_ray/conftest.py starts one): 2 CPUs,
    a logical GPU, 127.0.0.1, no dashboard; shut down when the module ends."""
    import ray

    with pytest.MonkeyPatch.context() as env:
        env.setenv("GLOO_SOCKET_IFNAME", "lo")
        context = ray.init(
            address="local",
            num_cpus=2,
            num_gpus=1,
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=False,
        )
        try:
            yield context
        finally:
            ray.shutdown()


def test_the_sweep_searches_the_loss_and_the_item_table_judged_by_recall(ray_local: Any, tmp_path: Path) -> None:
    from elastune.tracking.mlflow import load_sweep
    from elastune.tuning.spec import SweepSpec
    from elastune.tuning.sweep import SweepOptions, run_sweep
    from elastune.ui import UISettings, create_app
    from fastapi.testclient import TestClient
    from mlflow.tracking import MlflowClient

    raw = yaml.safe_load((SPECS / "sasrec.yaml").read_text())
    raw["base"]["workload_options"] = {"users": 300, "items": 200, "max_len": 10}
    raw["base"]["model"] = {"embedding_dim": 16}
    raw["base"]["eval"] = {"samples": 300}
    raw["parameters"]["batch.micro"]["values"] = [32, 64]
    raw["constraints"].update(effective_batch=64, reference={"batch.micro": 64})
    raw["budget"] = {"max_trials": 3, "max_concurrent": 2, "trial_samples": 640}  # 10 steps of 64
    raw["confirm"] = {"top": 0}
    raw["resources"] = {"cpus_per_trial": 1, "gpus_per_trial": 0}  # two side by side on this Ray's 2 CPUs
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = run_sweep(SweepSpec.model_validate(raw), SweepOptions(tracking_uri=uri, home=tmp_path))

    assert record.status == "finished"
    assert (record.quality_metric, record.quality_direction) == ("recall_at_10", "max")
    assert record.reference_quality is not None and 0 < record.reference_quality <= 1
    searched = [t for t in record.trials if t.trial_id != "reference" and t.status in ("ok", "pruned")]
    assert len(searched) >= 2
    assert all({"workload_options.loss", "embedding.strategy", "batch.micro"} <= set(t.params) for t in searched)
    finished = [t for t in record.trials if t.status == "ok"]
    assert len(finished) >= 2
    assert all(t.quality == t.metrics["recall_at_10"] and 0 <= t.metrics["ndcg_at_10"] <= 1 for t in finished)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_run(record.mlflow_run_id).info.experiment_id])
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == record.mlflow_run_id]
    assert any("val_recall_at_10" in r.data.metrics and "val_ndcg_at_10" in r.data.metrics for r in children)
    assert all("val_logloss" not in r.data.metrics for r in children)
    assert load_sweep(record.sweep_id, uri).quality_metric == "recall_at_10"

    # The web UI over the same store: it offers the example's spec and shows the sweep by its metric.
    settings = UISettings(tracking_uri=uri, spec_dir=SPECS, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as ui:
        assert [s["name"] for s in ui.get("/api/specs").json()] == ["sasrec"]
        detail = ui.get(f"/api/sweeps/{record.sweep_id}").json()
        assert detail["quality_metric"] == "recall_at_10" and detail["reference_quality"] == record.reference_quality
        assert {t["trial_id"] for t in detail["trials"]} == {t.trial_id for t in record.trials}
        # the sweep page labels its quality column and the metric columns from these (ui/static/sweep.js)
        shown = {name for t in detail["trials"] for name in t["metrics"]}
        assert {"recall_at_10", "ndcg_at_10"} <= shown and "logloss" not in shown
        assert ui.get(f"/sweeps/{record.sweep_id}").status_code == 200
