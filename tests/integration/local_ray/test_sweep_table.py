"""A sweep over a table source (`data.source: table`) on the shared local Ray: trials train DLRM on
a generated CSV's own columns, and the sweep's MLflow parent run holds the vocabulary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from elastune.config import DataConfig
from elastune.tuning.spec import SweepSpec
from elastune.tuning.sweep import SweepOptions, run_sweep
from mlflow import MlflowClient

from tests.integration.sweep_specs import TINY_BASE, tiny_spec
from tests.unit.test_table_source import rows, write_csv

pytestmark = pytest.mark.integration


def _trial_home() -> str:
    """ELASTUNE_HOME as a trial process sees it (the Ray was started before this test set its own)."""
    import ray

    @ray.remote(num_cpus=0)
    def home() -> str:
        from elastune.config import elastune_home

        return str(elastune_home())

    return str(ray.get(home.remote()))


def test_a_sweep_trains_on_a_table_and_logs_its_vocabulary(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    path = write_csv(tmp_path / "clicks.csv", rows(1500))
    data = {
        "source": "table",
        "path": str(path),
        "schema": {"label": "y", "dense": ["x1", "x2"], "categorical": ["city", "device"], "multi_hot": {"tags": 3}},
    }
    raw = tiny_spec(
        name="tiny-table",
        base={**TINY_BASE, "data": data},
        parameters={"batch.micro": {"type": "choice", "values": [64, 128]}},
        budget={"max_trials": 2, "max_concurrent": 2, "trial_samples": 768},
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trial_cache = Path(_trial_home()) / "vocabularies"
    existed = trial_cache.is_dir()
    before = set(trial_cache.glob("*.json")) if existed else set()
    started = time.monotonic()
    try:
        record = run_sweep(SweepSpec.model_validate(raw), SweepOptions(tracking_uri=uri, home=tmp_path / "sweeps"))
    finally:  # a trial whose ELASTUNE_HOME is not this test's caches the vocabulary there: leave none behind
        for leftover in (set(trial_cache.glob("*.json")) if trial_cache.is_dir() else set()) - before:
            leftover.unlink()
        if existed is False and trial_cache.is_dir() and not any(trial_cache.iterdir()):
            trial_cache.rmdir()
    print(f"table sweep: {time.monotonic() - started:.0f} s")
    assert record.status == "finished"
    ran = [t for t in record.trials if t.trial_id != "reference"]
    assert sorted(t.status for t in ran) == ["ok", "ok"], [(t.status, t.error) for t in record.trials]
    assert all(t.metrics["auc"] is not None and t.metrics["auc"] > 0 for t in ran)

    client = MlflowClient(uri)
    assert record.mlflow_run_id is not None
    names = [a.path for a in client.list_artifacts(record.mlflow_run_id, "vocabulary")]
    assert names == ["vocabulary/vocabulary.json"]
    local = client.download_artifacts(record.mlflow_run_id, "vocabulary/vocabulary.json", str(tmp_path))
    logged = json.loads(Path(local).read_text())
    assert logged["fingerprint"]["path"] == str(path.resolve())
    assert logged["columns"]["city"]["values"][0] == "c0"
    config = DataConfig.model_validate(data)
    assert logged["rows"] == 1500 and config.table_schema is not None
    # every trial trained on the data's table sizes (a trial's params are its resolved config)
    params = client.get_run(ran[0].mlflow_run_id or "").data.params
    assert params["data.source"] == "table" and params["data.schema.label"] == "y"
