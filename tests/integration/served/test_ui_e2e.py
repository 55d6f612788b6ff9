"""The UI against a real local Ray (job server included) and a real MLflow store:

- an OpenAPI fuzz run (schemathesis) with no 5xx answer, and no job launched by invalid input;
- the browser test: a real headless Chromium opens the UI, launches a sweep through the form,
  waits for it to finish, and finds the trial table and the Pareto plot; screenshots of each page
  (ELASTUNE_UPDATE_SCREENSHOTS=1 copies them into docs/screenshots/).

The UI lists the repository's specs plus the integration tests' tiny one, which the browser
launches (its trials take seconds); with ELASTUNE_UPDATE_SCREENSHOTS=1 it launches the README's
quick sweep instead, so the screenshots show a real one. The Ray cluster is served/conftest.py's
token-authenticated one (shared with the `ray job submit` test); everything started here is
stopped here.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from elastune.ui import UISettings, create_app

from tests.integration.served.conftest import RayHead
from tests.integration.sweep_specs import tiny_spec, write_spec
from tests.unit.test_ui_api import write_lm_sweep, write_sweep

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
UPDATE_SCREENSHOTS = os.environ.get("ELASTUNE_UPDATE_SCREENSHOTS") == "1"
LAUNCHED = "dlrm_quick" if UPDATE_SCREENSHOTS else "tiny"  # the spec the browser test launches


@dataclass
class Served:
    base: str
    dashboard: str
    tracking_uri: str


@pytest.fixture(scope="module")
def ray_dashboard(ray_token_head: RayHead) -> Iterator[str]:
    """The token-authenticated Ray head (conftest), with its token where Ray looks for it: the UI
    finds it there too. This process does not set RAY_AUTH_MODE, so the job client sends the
    token only because the UI passes it."""
    saved = os.environ.get("RAY_AUTH_TOKEN_PATH")
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(ray_token_head.token_file)
    try:
        yield ray_token_head.address
    finally:
        if saved is None:
            os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
        else:
            os.environ["RAY_AUTH_TOKEN_PATH"] = saved


def test_the_cluster_refuses_a_client_without_the_token(ray_dashboard: str) -> None:
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    with pytest.raises(AuthenticationError, match=r"(Missing|Invalid) authentication token"):
        JobSubmissionClient(ray_dashboard).list_jobs()


@pytest.fixture(scope="module")
def served(
    ray_dashboard: str,
    tmp_path_factory: pytest.TempPathFactory,
    free_port: Callable[[], int],
    serve_ui: Any,
) -> Iterator[Served]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    specs = tmp_path_factory.mktemp("search_spaces")
    for shipped in (ROOT / "search_spaces").glob("*.yaml"):
        shutil.copy(shipped, specs / shipped.name)
    write_spec(specs / "tiny.yaml", tiny_spec())
    port = free_port()
    app = create_app(UISettings(port=port, ray_address=ray_dashboard, tracking_uri=uri, spec_dir=specs))
    with serve_ui(app, port) as url:
        yield Served(url, ray_dashboard, uri)


def _stop_job(dashboard: str, job_id: str) -> None:
    from elastune.ui.settings import ray_auth_token
    from ray.job_submission import JobSubmissionClient

    JobSubmissionClient(dashboard, headers={"Authorization": f"Bearer {ray_auth_token()}"}).stop_job(job_id)


def _job_ids(dashboard: str) -> set[str]:
    from elastune.ui.settings import ray_auth_token
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(dashboard, headers={"Authorization": f"Bearer {ray_auth_token()}"})
    return {j.submission_id or "" for j in client.list_jobs()}


# ---- only elastune's jobs ------------------------------------------------------------------


def test_the_ui_shows_and_acts_on_elastunes_jobs_only(served: Served) -> None:
    """A job submitted to the cluster some other way (here: straight to Ray, even one that copies
    the UI's metadata tag) is not listed, and reading, following or stopping it is a 404, as for an
    id the cluster does not know; a UI started with --all-jobs sees and reads it."""
    from elastune.ui.settings import ray_auth_token
    from fastapi.testclient import TestClient
    from ray.job_submission import JobStatus, JobSubmissionClient

    ray = JobSubmissionClient(served.dashboard, headers={"Authorization": f"Bearer {ray_auth_token()}"})
    foreign = [
        ray.submit_job(entrypoint="sleep 300", metadata={"owner": "someone else"}),
        ray.submit_job(entrypoint="sleep 300", metadata={"elastune_ui": "1", "elastune_kind": "train"}),
    ]
    try:
        listed = httpx.get(f"{served.base}/api/jobs", timeout=30)
        assert listed.status_code == 200, listed.text
        assert not {j["job_id"] for j in listed.json()} & set(foreign)
        unknown = httpx.get(f"{served.base}/api/jobs/no-such-job-0", timeout=30)
        assert unknown.status_code == 404
        for job_id in foreign:
            for method, path in (("GET", ""), ("GET", "/logs"), ("POST", "/stop")):
                response = httpx.request(method, f"{served.base}/api/jobs/{job_id}{path}", timeout=30)
                assert response.status_code == 404, (method, path, response.text)
                # the same answer as for an id the cluster does not know: nothing says the job exists
                assert response.json()["detail"] == unknown.json()["detail"].replace("no-such-job-0", job_id)
            assert ray.get_job_status(job_id) in (JobStatus.PENDING, JobStatus.RUNNING)  # not stopped
        everything = UISettings(
            ray_address=served.dashboard, tracking_uri=served.tracking_uri, allowed_hosts=("testserver",), all_jobs=True
        )
        with TestClient(create_app(everything)) as all_jobs:
            assert set(foreign) <= {j["job_id"] for j in all_jobs.get("/api/jobs").json()}
            assert all_jobs.get(f"/api/jobs/{foreign[0]}/logs").status_code == 200
    finally:
        for job_id in foreign:
            ray.stop_job(job_id)


# ---- the OpenAPI fuzz run -----------------------------------------------------------------


def test_fuzzing_the_openapi_schema_finds_no_server_error(served: Served) -> None:
    import schemathesis
    from elastune.ui.launch import JobRequest
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from pydantic import TypeAdapter
    from schemathesis import GenerationMode

    write_sweep(served.tracking_uri, "sw-fuzz")  # so sweep reads have something real to read
    before = _job_ids(served.dashboard)
    schema = schemathesis.openapi.from_dict(httpx.get(f"{served.base}/openapi.json").json())
    server_errors: list[str] = []
    calls = 0
    launch_calls: list[bool] = []
    launched: list[str] = []  # valid bodies the negative generator produced (see below)
    for result in schema.get_all_operations():
        operation = result.ok()
        launches = operation.method.upper() == "POST" and operation.path == "/api/jobs"
        # A schema-valid launch would start a real job: the launch endpoint gets invalid input only.
        modes = [GenerationMode.NEGATIVE] if launches else [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
        for mode in modes:
            expect_refusal = launches

            @settings(max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case: Any) -> None:
                nonlocal calls
                response = case.call(base_url=served.base, timeout=30)
                calls += 1
                launch_calls.append(expect_refusal)  # noqa: B023
                if response.status_code >= 500:
                    server_errors.append(
                        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
                    )
                if expect_refusal and response.status_code == 201:  # noqa: B023 - called right here
                    # Negative generation can mutate what does not matter (a header) and leave a
                    # valid body: that launch must be one the API's own model accepts. Stop it.
                    TypeAdapter(JobRequest).validate_python(case.body)
                    launched.append(response.json()["job_id"])
                    _stop_job(served.dashboard, launched[-1])
                elif expect_refusal:  # noqa: B023
                    assert response.status_code in (400, 404, 422), response.text

            try:
                call()
            except Unsatisfiable:
                # No invalid input exists for an operation without parameters (GET /api/health).
                no_parameters = not list(operation.iter_parameters())
                assert mode is GenerationMode.NEGATIVE and not launches and no_parameters, operation.label
    assert calls > 100 and sum(launch_calls) >= 10, (calls, sum(launch_calls))
    assert not server_errors, "\n".join(server_errors[:10])
    assert _job_ids(served.dashboard) - before == set(launched), "invalid input launched a job"


# ---- the browser test ---------------------------------------------------------------------


def _table_fits(page: Any) -> None:
    """The trial table needs no sideways scrolling (test_ui_pages.py checks it at 1280 px, figure by figure)."""
    widths = page.evaluate(
        """() => [document.getElementById("trial-table").scrollWidth,
                  document.querySelector("#table-card .table-wrap").clientWidth]"""
    )
    assert widths[0] <= widths[1], widths


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("screenshots")
    yield folder
    if UPDATE_SCREENSHOTS:
        target = ROOT / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        for png in folder.glob("*.png"):
            shutil.copy(png, target / png.name)


def test_launch_a_sweep_from_the_browser_and_read_its_results(
    served: Served, browser: Any, shots: Path, wait_until: Callable[..., None]
) -> None:
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    page.set_default_timeout(30_000)
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(str(e)))
    # The page loads nothing from anywhere but the UI server.
    foreign: list[str] = []
    page.on("request", lambda r: foreign.append(r.url) if not r.url.startswith(served.base) else None)

    # 1. The form, built from the schemas; a bad ceiling is reported beside its field.
    page.goto(f"{served.base}/jobs")
    page.wait_for_selector("#f-spec option[value=dlrm_quick]", state="attached")
    page.select_option("#f-spec", "dlrm_quick")
    page.fill("#f-memory_ceiling", "lots")
    page.click("#launch-button")
    problem = page.locator('.field[data-field="memory_ceiling"] .problem')
    problem.wait_for(state="visible")
    assert "2GiB" in problem.inner_text()
    page.screenshot(path=str(shots / "jobs-validation.png"), full_page=True)

    # 2. Launch for real; the job shows up with its live log. Two trials (one round at two at a
    # time) keep the test quick; with the reference that is three rows in the table.
    page.select_option("#f-spec", LAUNCHED)
    page.fill("#f-memory_ceiling", "")  # the spec's own ceiling
    page.fill("#f-max_trials", "2")
    page.click("#launch-button")
    page.wait_for_selector("#log-card:not([hidden])")
    job_id = page.inner_text("#log-job")
    assert job_id.startswith("elastune-sweep-")
    page.wait_for_selector(f'#jobs-table tr[data-job="{job_id}"]')
    wait_until(lambda: "waiting for the first" not in page.inner_text("#log-text"), 120, "the job's first log lines")
    page.screenshot(path=str(shots / "jobs.png"), full_page=True)

    # 3. Follow it to the end, as the page shows it.
    wait_until(
        lambda: page.inner_text("#log-status") in ("succeeded", "failed", "stopped"), 420, "the sweep job to end", 2.0
    )
    status = page.inner_text("#log-status")
    assert status == "succeeded", page.inner_text("#log-text")[-3000:]
    # the job's row says so too, at once: not "running" above a finished log until the next poll
    row_status = page.locator(f'#jobs-table tr[data-job="{job_id}"] .pill')
    wait_until(lambda: row_status.inner_text() == status, 1.0, "the job row to take the log's status", 0.1)
    page.screenshot(path=str(shots / "jobs-finished.png"), full_page=True)

    # 4. The sweep list, then the sweep: trial table and Pareto plot.
    page.goto(f"{served.base}/sweeps")
    page.wait_for_selector("#sweeps-table tbody tr")
    page.screenshot(path=str(shots / "sweeps.png"), full_page=True)
    page.click("#sweeps-table tbody tr >> nth=0")
    page.wait_for_selector("#trial-table tbody tr[data-trial]")
    page.wait_for_selector("#scatter svg")
    assert page.locator("#trial-table tbody tr[data-trial]").count() == 3
    assert page.locator('#scatter [data-role="pareto-point"]').count() >= 1
    assert page.locator("#parcoords svg polyline").count() >= 1
    page.locator("#trial-table th[data-key=samples_per_s]").click()  # sorts; must not break the table
    assert page.locator("#trial-table tbody tr[data-trial]").count() >= 2
    _table_fits(page)
    # every trial with a throughput is a dot and a line, a pruned one included (at its predicted peak)
    sweep_id = page.url.rsplit("/", 1)[-1]
    ran = [t for t in page.evaluate(f"Elastune.api.get('/api/sweeps/{sweep_id}')")["trials"] if t["samples_per_s"]]
    for trial in ran:
        assert page.locator(f'#scatter circle[data-trial="{trial["trial_id"]}"]').count() == 1, trial["status"]
        assert page.locator(f'#parcoords polyline[data-trial="{trial["trial_id"]}"]').count() == 1, trial["status"]
    page.screenshot(path=str(shots / "sweep.png"), full_page=True)

    # 4b. A language-model sweep: its quality column is named by its metric, its real tokens/s shown
    write_lm_sweep(served.tracking_uri)
    page.goto(f"{served.base}/sweeps/sw-ui-lm")
    page.wait_for_selector("#trial-table tbody tr[data-trial]")
    headers = page.locator("#trial-table th").all_inner_texts()
    assert any("Tokens/s" in h for h in headers) and any("Eval perplexity" in h for h in headers), headers
    assert "33" in page.inner_text("#tiles") and "tokens/s" in page.inner_text("#best")
    _table_fits(page)
    # both trials have batch.micro 32 and the same peak: one label each, no negative memory
    assert page.eval_on_selector_all('#parcoords g[data-axis="batch.micro"] text.tick', "ts => ts.length") == 1
    labels = page.eval_on_selector_all("#parcoords text", "ts => ts.map((t) => t.textContent)")
    assert not [t for t in labels if t.startswith("-")], labels
    page.screenshot(path=str(shots / "sweep-lm.png"), full_page=True)

    # 5. The memory view: this sweep ran on CPU (no shared GPU), so it says so in plain words.
    page.goto(f"{served.base}/memory")
    page.wait_for_selector("#memory .empty, #memory .device")
    if page.locator("#memory .empty").count():  # the hint's option names are each on one line
        codes = page.eval_on_selector_all("#memory .empty code", "cs => cs.map((c) => c.getClientRects().length)")
        assert all(lines == 1 for lines in codes), codes
        assert codes or "--" not in page.inner_text("#memory .empty")
    page.screenshot(path=str(shots / "memory.png"), full_page=True)

    assert not foreign, foreign[:5]
    # The one refused launch in step 1 is logged by the browser as a failed load (422): expected.
    unexpected = [e for e in console_errors if "status of 422" not in e]
    assert not unexpected, unexpected[:5]
    page.close()
