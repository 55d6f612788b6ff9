"""A sweep of an example workload as the web UI shows it: `movie_ratings` (examples/movie_ratings,
installed by `make install`) swept on the shared local Ray into a real MLflow store, then its page
in a real browser, served by a real UI server. The trial table's quality column is named by the
workload's own metric ("Eval rmse"), each other metric it reports has a column of its own (MAE, and
its eval loss under the name it gives it, mse), and there is no log loss anywhere."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elastune.tuning.spec import SweepSpec
from elastune.tuning.sweep import SweepOptions, run_sweep
from elastune.ui import UISettings, create_app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SPECS = ROOT / "examples" / "movie_ratings" / "search_spaces"

# The user table hashed against the reference's full one, each trial 20 steps of 1024 ratings.
SPEC = {
    "name": "movie_ratings_ui",
    "base": {
        "workload": "movie_ratings",
        "device": "cpu",
        "embedding": {"overrides": [{"match": {"name": "user_id"}, "strategy": "full"}]},
        "eval": {"samples": 4096},
        "warmup_steps": 2,
    },
    "parameters": {"embedding.overrides.0.strategy": {"type": "choice", "values": ["hashed"]}},
    "constraints": {"effective_batch": 1024, "quality_tolerance": 0.2, "reference": {"batch.micro": 1024}},
    "budget": {"max_trials": 1, "max_concurrent": 1, "trial_samples": 20 * 1024},
    "confirm": {"top": 0},
    "search": {"algorithm": "grid", "scheduler": "none", "seed": 0},
    "resources": {"cpus_per_trial": 1},
    "edo": {"mode": "off"},
}


def test_the_sweep_page_shows_the_workloads_own_metrics(
    ray_local: Any, browser: Any, tmp_path: Path, free_port: Callable[[], int], serve_ui: Any
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = run_sweep(SweepSpec.model_validate(SPEC), SweepOptions(tracking_uri=uri, home=tmp_path / "sweeps"))
    assert record.status == "finished" and (record.quality_metric, record.quality_direction) == ("rmse", "min")
    assert [t.status for t in record.trials] == ["ok", "ok"], [(t.trial_id, t.error) for t in record.trials]

    port = free_port()
    # The job server's URL, where nothing listens: showing a sweep needs only the MLflow store.
    settings = UISettings(port=port, tracking_uri=uri, spec_dir=SPECS, ray_address=f"http://127.0.0.1:{free_port()}")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        with serve_ui(create_app(settings), port) as base:
            page.set_default_timeout(20_000)
            page.goto(f"{base}/sweeps/{record.sweep_id}")
            page.wait_for_selector("#trial-table tbody tr[data-trial]")
            headers = page.eval_on_selector_all("#trial-table thead th", "ths => ths.map((t) => t.textContent)")
            assert {"Eval rmse", "Eval mae", "Eval mse"} <= set(headers), headers
            assert not [h for h in headers if "log" in h.lower() or h == "Eval quality"], headers
            reference = record.reference_quality
            assert reference is not None
            for trial in record.trials:  # each trial's figures, in the column of its metric's name
                cells = page.eval_on_selector_all(
                    f'#trial-table tr[data-trial="{trial.trial_id}"] td', "tds => tds.map((t) => t.textContent)"
                )
                shown = dict(zip(headers, cells, strict=True))
                rmse = f"{trial.metrics['rmse']:.4f}"
                change = (trial.metrics["rmse"] - reference) / reference  # against the reference's: lower is better
                said = f"{'▲' if change < 0 else '▼'} {abs(change):.1%} {'better' if change < 0 else 'worse'}"
                said = "" if trial.trial_id == "reference" else "same" if round(abs(change), 3) == 0 else said
                assert shown["Eval rmse"] == rmse + said, (trial.trial_id, shown)
                assert shown["Eval mae"] == f"{trial.metrics['mae']:.4f}", (trial.trial_id, shown)
            assert "log" not in page.inner_text("#trial-table").lower()
    finally:
        page.close()
    assert not errors, errors[:5]
