"""Issue 17, section A, replayed against a real `elastune ui` process and the token-authenticated
Ray head (served/conftest.py): the token stays out of `ps`, the job list and the jobs; a train job
never takes a file from the client (a pickle offered as a checkpoint is refused, nothing runs), and
a valid one checkpoints where the cluster chooses; a UI holding the wrong Ray token says so.

The fast cases of the same catalogue (hostile bodies, cross-site writes, the allowlist) run
against the app in-process in tests/unit/test_ui_hostile.py.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import TINY
from tests.integration.served.conftest import RayHead, UIProcess, ui_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ui_process(
    ray_token_head: RayHead,
    tmp_path_factory: pytest.TempPathFactory,
    free_port: Callable[[], int],
    wait_until: Callable[..., None],
) -> Iterator[UIProcess]:
    with ui_server(ray_token_head, tmp_path_factory.mktemp("ui-process"), free_port(), wait_until) as ui:
        yield ui


def _cluster_jobs(head: RayHead) -> list[object]:
    from ray.job_submission import JobSubmissionClient

    return list(JobSubmissionClient(head.address, headers=head.headers()).list_jobs())


class _RunsCode:
    """Unpickling this would create the marker file: what a planted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_offered_as_a_checkpoint_is_refused_and_nothing_runs(
    ui_process: UIProcess, ray_token_head: RayHead, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    planted = tmp_path / "evil.pt"
    planted.write_bytes(pickle.dumps({"model": _RunsCode(marker)}))
    before = {getattr(j, "submission_id", None) for j in _cluster_jobs(ray_token_head)}
    for sets in (
        [f"checkpoint.path={planted}", "checkpoint.resume=true", "steps=2"],
        [f"checkpoint={{path: {planted}, resume: true}}"],
        ["data.path=/etc/hostname", "data.source=parquet"],
    ):
        response = ui_process.api("POST", "/api/jobs", json={"kind": "train", "sets": sets})
        assert response.status_code == 422, response.text
        assert all("remote client" in p["message"] for p in response.json()["problems"] if ".path" in p["field"])
    assert {getattr(j, "submission_id", None) for j in _cluster_jobs(ray_token_head)} == before
    assert not marker.exists()


def test_a_ui_train_job_checkpoints_where_the_cluster_chooses_and_never_shows_the_token(
    ui_process: UIProcess, ray_token_head: RayHead, wait_until: Callable[..., None]
) -> None:
    response = ui_process.api("POST", "/api/jobs", json={"kind": "train", "sets": TINY})
    assert response.status_code == 201, response.text
    job_id = response.json()["job_id"]
    assert "--untrusted" in response.json()["entrypoint"]

    def done() -> bool:
        return bool(ui_process.api("GET", f"/api/jobs/{job_id}").json()["done"])

    wait_until(done, 180, "the UI's train job to finish", interval_s=1.0)
    job = ui_process.api("GET", f"/api/jobs/{job_id}").json()
    log = ui_process.api("GET", f"/api/jobs/{job_id}/logs").json()["text"]
    assert job["status"] == "SUCCEEDED", log[-2000:]
    checkpoint = Path(ray_token_head.env["ELASTUNE_HOME"]) / "jobs" / job_id / "checkpoint.pt"
    assert checkpoint.is_file(), log[-2000:]

    # The token: not in the UI's command line (ps), the job list, or anything a job shows.
    assert all(ui_process.token not in part for part in psutil.Process(ui_process.proc.pid).cmdline())
    listed = ui_process.api("GET", "/api/jobs").text
    assert job_id in listed and ui_process.token not in listed
    for info in _cluster_jobs(ray_token_head):
        shown = repr((info.entrypoint, info.metadata, info.runtime_env))  # type: ignore[attr-defined]
        assert ui_process.token not in shown
    assert ui_process.token not in log


def test_a_ui_with_the_wrong_ray_token_says_so(ray_token_head: RayHead, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "cannot reach" (503): the cluster answered, and refused the token (502, with the fix)."""
    from elastune.ui import UISettings, create_app
    from fastapi.testclient import TestClient

    monkeypatch.setenv("RAY_AUTH_TOKEN", "0" * 64)
    settings = UISettings(ray_address=ray_token_head.address, allowed_hosts=("testserver",))
    with TestClient(create_app(settings)) as client:
        response = client.get("/api/jobs")
    assert response.status_code == 502, response.text
    assert "refused this UI's token" in response.json()["detail"]
    assert "RAY_AUTH_TOKEN" in response.json()["detail"]
