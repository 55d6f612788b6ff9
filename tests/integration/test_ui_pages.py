"""The UI's pages as a browser draws them, against a real UI server and MLflow store but no Ray:
what the review of the screenshots found, checked where it shows (seconds, not the two minutes of
served/test_ui_e2e.py, which launches a real sweep).

- the trial table fits a 1280-px window, every figure still in it;
- a trial stopped early without a measured peak is drawn in both charts, at its predicted peak;
- an axis whose values are all equal is not padded into negative memory or invented batch sizes;
- the job row takes the log's final status at once (the job list is stubbed: there is no Ray);
- a hint never breaks a command-line option across lines.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from elastune.ui import UISettings, create_app

from tests.unit.test_ui_api import write_lm_sweep, write_pruned_sweep

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WINDOW = {"width": 1280, "height": 900}  # the narrowest window the pages are laid out for


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int], serve_ui: Any) -> Iterator[str]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    write_pruned_sweep(uri)
    write_lm_sweep(uri)
    specs = tmp_path_factory.mktemp("specs")
    shutil.copy(ROOT / "search_spaces" / "dlrm_quick.yaml", specs / "dlrm_quick.yaml")
    port = free_port()
    # The job server's URL, where nothing listens: the memory page says what to pass instead.
    settings = UISettings(port=port, tracking_uri=uri, spec_dir=specs, ray_address=f"http://127.0.0.1:{free_port()}")
    with serve_ui(create_app(settings), port) as url:
        yield url


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page(viewport=WINDOW)
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    page.close()
    assert not errors, errors[:5]


def _sweep(page: Any, base: str, sweep_id: str) -> None:
    page.goto(f"{base}/sweeps/{sweep_id}")
    page.wait_for_selector("#trial-table tbody tr[data-trial]")
    page.wait_for_selector("#scatter svg")
    page.wait_for_selector("#parcoords svg")


# ---- the trial table ----------------------------------------------------------------------


@pytest.mark.parametrize("sweep_id", ["sw-ui-pruned", "sw-ui-lm"])
def test_the_trial_table_fits_a_1280_px_window_with_every_figure_in_it(page: Any, base: str, sweep_id: str) -> None:
    _sweep(page, base, sweep_id)
    fit = page.evaluate(
        """() => { const wrap = document.querySelector("#table-card .table-wrap");
        return { table: document.getElementById("trial-table").scrollWidth, wrap: wrap.clientWidth,
                 page: document.documentElement.scrollWidth, window: window.innerWidth }; }"""
    )
    assert fit["table"] <= fit["wrap"] and fit["page"] <= fit["window"], fit
    trials = {t["trial_id"]: t for t in page.evaluate(f"Elastune.api.get('/api/sweeps/{sweep_id}')")["trials"]}
    for trial_id, trial in trials.items():
        row = page.inner_text(f'#trial-table tr[data-trial="{trial_id}"]')
        for key, value in trial["params"].items():
            assert key in row and str(value) in row, (trial_id, key, row)
        if trial["samples_per_s"]:
            assert f"{round(trial['samples_per_s']):,}" in row, row
        if trial["error"]:
            assert trial["error"][:60] in row, row
        if trial["confirmed_speedup"]:
            assert f"{trial['confirmed_speedup'][1]:.2f}×" in row, row


def test_sorting_by_the_parameters_orders_by_the_first_then_the_next(page: Any, base: str) -> None:
    _sweep(page, base, "sw-ui-pruned")
    page.click("#trial-table th[data-key=params]")
    order = page.eval_on_selector_all("#trial-table tbody tr[data-trial]", "rows => rows.map((r) => r.dataset.trial)")
    # batch.micro 512 (t00), 1024 (t01), 2048 twice (t02: adagrad... t03 the same config), the reference last
    assert order[:2] == ["t00", "t01"] and order[-1] == "reference", order


# ---- the charts ---------------------------------------------------------------------------


def test_a_trial_stopped_early_is_drawn_in_both_charts_at_its_predicted_peak(page: Any, base: str) -> None:
    _sweep(page, base, "sw-ui-pruned")
    dot = page.locator('#scatter circle[data-trial="t01"]')
    assert dot.count() == 1
    assert dot.get_attribute("fill") == "#fff"  # hollow: its x is the predicted peak
    assert "predicted" in page.inner_text("#scatter")  # the axis title and the legend say so
    line = page.locator('#parcoords polyline[data-trial="t01"]')
    assert line.count() == 1 and line.get_attribute("stroke-dasharray")
    # the ones that measured a peak are drawn solid, as before
    assert page.locator('#scatter circle[data-trial="t00"]').get_attribute("fill") != "#fff"
    assert page.locator('#parcoords polyline[data-trial="reference"]').count() == 1


def test_an_axis_whose_values_are_all_equal_sits_them_in_the_middle_never_below_zero(page: Any, base: str) -> None:
    _sweep(page, base, "sw-ui-lm")  # both trials: batch.micro 32, peak 250 MiB
    texts = page.eval_on_selector_all("#parcoords text", "ts => ts.map((t) => t.textContent)")
    assert not [t for t in texts if t.startswith(("-", "−"))], texts  # no negative memory
    assert "31" not in texts and "33" not in texts, texts  # no batch size no trial had
    labels = {
        axis: page.eval_on_selector_all(
            f'#parcoords g[data-axis="{axis}"] text.tick', "ts => ts.map((t) => t.textContent)"
        )
        for axis in ("batch.micro", "__peak", "__sps")
    }
    assert labels["batch.micro"] == ["32"], labels
    assert labels["__peak"] == ["0.24"], labels
    assert labels["__sps"] == ["300", "900"], labels
    spans = page.evaluate(
        """() => [Charts.span([32, 32]), Charts.span([0.24], 0), Charts.span([0, 0], 0), Charts.span([5, 5], 0),
                  Charts.span([-2, -2]), Charts.span([3, 7], 0), Charts.span([], 0)]"""
    )
    assert spans == [[16, 48], [0.12, 0.36], [0, 1], [2.5, 7.5], [-3, -1], [3, 7], [0, 1]]


# ---- the jobs page ------------------------------------------------------------------------


def test_the_job_row_takes_the_logs_final_status_at_once(page: Any, base: str) -> None:
    # No Ray here: the job list and the log are stubbed. The list is polled every 3 s, the log every
    # 1.5 s; the log says the job ended on its second read, 1.5 s before the list is read again.
    job_id, started = "elastune-sweep-pages-1", time.time() - 68
    served = {"logs": 0, "jobs_after_end": 0}

    def job(ended: bool) -> dict[str, Any]:
        return {
            "job_id": job_id, "kind": "sweep", "spec": "dlrm_quick", "from_sweep": None,
            "status": "SUCCEEDED" if ended else "RUNNING", "message": "", "entrypoint": "python -m elastune.jobs.sweep",
            "start_time": started, "end_time": started + 70 if ended else None, "done": ended,
        }  # fmt: skip

    def jobs(route: Any) -> None:
        ended = served["logs"] >= 2
        served["jobs_after_end"] += ended
        route.fulfill(json=[job(ended)])

    def logs(route: Any) -> None:
        served["logs"] += 1
        ended = served["logs"] >= 2
        text = "sweep dlrm_quick finished\n" if ended else "trial 0 running\n"
        status = "SUCCEEDED" if ended else "RUNNING"
        chunk = {
            "job_id": job_id,
            "text": text,
            "offset": 100 * served["logs"],
            "skipped_chars": 0,
            "status": status,
            "done": ended,
        }
        route.fulfill(json=chunk)

    page.route(lambda url: url.endswith("/api/jobs"), jobs)
    page.route(lambda url: "/logs?" in url, logs)
    page.goto(f"{base}/jobs#job={job_id}")
    page.wait_for_selector(f'#jobs-table tr[data-job="{job_id}"]')
    # the row's status seen in the same frame as the log's first says "succeeded"
    seen = page.wait_for_function(
        f"""() => {{ if (document.getElementById("log-status").textContent !== "succeeded") return null;
        const pill = document.querySelector('#jobs-table tr[data-job="{job_id}"] .pill');
        return pill ? pill.textContent : "(no row)"; }}""",
        timeout=10_000,
    ).json_value()
    assert seen == "succeeded"
    # ...and the list is read again at once, for the end time: the row stops counting
    page.wait_for_function(
        f"""() => document.querySelector('#jobs-table tr[data-job="{job_id}"] td.num').textContent === "1 min 10 s" """,
        timeout=1_200,
    )
    assert served["jobs_after_end"] >= 1


# ---- the memory page ----------------------------------------------------------------------


def test_a_hint_keeps_each_option_name_on_one_line(page: Any, base: str) -> None:
    page.set_viewport_size({"width": 700, "height": 900})  # narrow: the hint wraps several times
    page.goto(f"{base}/memory")
    page.wait_for_selector("#memory .empty")
    codes = page.eval_on_selector_all(
        "#memory .empty code",
        "cs => cs.map((c) => [c.textContent, getComputedStyle(c).whiteSpace, c.getClientRects().length])",
    )
    names = [text for text, _, _ in codes]
    assert "--cluster-address" in names and "ray://HOST:10001" in names, codes
    assert all(space == "nowrap" and lines == 1 for _, space, lines in codes), codes
    # the text around them is the server's, unchanged
    hint = page.inner_text("#memory .empty")
    assert "start the UI with --cluster-address ray://HOST:10001 (the head's Ray Client port)" in hint, hint


# ---- the API docs page --------------------------------------------------------------------


def test_the_docs_page_loads_nothing_from_elsewhere_and_keeps_no_token(page: Any, base: str) -> None:
    """Swagger UI from the UI server itself (no CDN), drawn from the schema; a token typed into its
    Authorize dialog is not written to the browser's storage (persistAuthorization off)."""
    foreign: list[str] = []
    page.on("request", lambda r: foreign.append(r.url) if not r.url.startswith(base) else None)
    page.goto(f"{base}/api/docs")
    page.wait_for_selector(".swagger-ui .opblock")  # the operations, drawn by the bundle this server sent
    typed = "token-typed-into-authorize-0123456789"
    page.click(".auth-wrapper .authorize")
    page.fill(".modal-ux input", typed)
    page.click(".modal-ux .auth-btn-wrapper .authorize")
    page.wait_for_selector('.modal-ux button[aria-label="Remove authorization"]')  # authorized, for this tab
    stored = page.evaluate("() => JSON.stringify([{...window.localStorage}, {...window.sessionStorage}])")
    assert typed not in stored, stored
    assert not foreign, foreign[:5]
