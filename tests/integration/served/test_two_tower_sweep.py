"""The example workload end to end, as a user of the web UI meets it: `elastune ui --spec-dir
examples/two_tower/search_spaces` offers the example's own sweep spec by name, launches it as a Ray
job on the token-authenticated two-node cluster (served/conftest.py), its trials import the
installed `two_tower` package on both nodes, and the results (judged by recall@10, higher is better)
are in MLflow and in the UI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from elastune.tracking.mlflow import load_sweep

from tests.integration.served.conftest import RayHead, ui_server
from tests.unit.test_tracking_mlflow import child_runs

pytestmark = pytest.mark.integration

SPECS = Path(__file__).resolve().parents[3] / "examples" / "two_tower" / "search_spaces"


def test_the_ui_sweeps_the_example_and_shows_it_by_its_own_metric(
    ray_token_head: RayHead, tmp_path: Path, free_port: Callable[[], int], wait_until: Callable[..., None]
) -> None:
    with ui_server(ray_token_head, tmp_path, free_port(), wait_until, "--spec-dir", str(SPECS)) as ui:
        assert [s["name"] for s in ui.api("GET", "/api/specs").json()] == ["two_tower_quick"]
        job = {"kind": "sweep", "spec": "two_tower_quick", "max_trials": 3}
        response = ui.api("POST", "/api/jobs", json=job)
        assert response.status_code == 201, response.text
        job_id = response.json()["job_id"]
        wait_until(lambda: ui.api("GET", f"/api/jobs/{job_id}").json()["done"], 300, "the sweep job", interval_s=2.0)
        log = ui.api("GET", f"/api/jobs/{job_id}/logs").json()["text"]
        assert ui.api("GET", f"/api/jobs/{job_id}").json()["status"] == "SUCCEEDED", log[-3000:]
        assert "eval recall_at_10" in log and "higher is better" in log

        # MLflow: the sweep judged by the workload's metric, each trial's metrics logged
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        (listed,) = ui.api("GET", "/api/sweeps").json()
        record = load_sweep(listed["sweep_id"], uri)
        assert record.status == "finished" and record.spec["base"]["workload"] == "two_tower"
        assert (record.quality_metric, record.quality_direction) == ("recall_at_10", "max")
        assert record.reference_quality is not None and 0 < record.reference_quality <= 1
        finished = [t for t in record.trials if t.status == "ok"]
        assert len(finished) >= 2 and all(t.quality == t.metrics["recall_at_10"] for t in finished)
        runs = child_runs(uri, record.mlflow_run_id)
        assert any("val_recall_at_10" in r.data.metrics for r in runs)
        assert all("val_logloss" not in r.data.metrics for r in runs)

        # The UI: the sweep's page and its data, with the quality column named by the metric
        detail = ui.api("GET", f"/api/sweeps/{record.sweep_id}").json()
        assert detail["quality_metric"] == "recall_at_10" and detail["reference_quality"] == record.reference_quality
        assert {t["trial_id"] for t in detail["trials"]} == {t.trial_id for t in record.trials}
        assert ui.api("GET", f"/sweeps/{record.sweep_id}").status_code == 200
