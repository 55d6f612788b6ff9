"""A sweep under EDO: trials acquire grants from the cluster's broker on a virtual device, train
within them, and release them; the broker's timeline shows every trial that ran."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elastune.edo.broker import read_status, shutdown_broker
from elastune.edo.client import plan_demand
from elastune.tuning.spec import SweepSpec, validate_sweep_spec
from elastune.tuning.sweep import SweepOptions, run_sweep

from tests.integration.sweep_specs import tiny_spec

pytestmark = pytest.mark.integration


@pytest.fixture
def broker_cleanup(ray_local: Any) -> Iterator[None]:
    yield
    shutdown_broker()


def test_sweep_trials_run_under_edo_grants(broker_cleanup: None, tmp_path: Path) -> None:
    raw = tiny_spec(
        parameters={"embedding.strategy": {"type": "choice", "values": ["hashed"]},
                    "batch.micro": {"type": "choice", "values": [64, 128]}},
        budget={"max_trials": 2, "max_concurrent": 2},
    )  # fmt: skip
    spec = validate_sweep_spec(raw)
    trials = [spec.trial_config({"embedding.strategy": "hashed", "batch.micro": m}) for m in (64, 128)]
    want = max(plan_demand(cfg).want_bytes for cfg in trials)
    raw["edo"] = {"mode": "on", "virtual_capacity": 3 * want}  # room for both at once, not for three
    record = run_sweep(
        SweepSpec.model_validate(raw),
        SweepOptions(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", home=tmp_path / "home"),
    )
    ran = [t for t in record.trials if t.trial_id != "reference"]
    assert [t.status for t in ran] == ["ok", "ok"], [(t.status, t.error) for t in ran]
    status = read_status()
    assert status is not None
    (device,) = status["devices"]
    assert device["capacity_bytes"] == 3 * want and device["device"].endswith("/virtual:0")
    granted = {p["trial_id"] for p in status["timeline"] if p["grant_bytes"] > 0}
    assert {t.trial_id for t in ran} <= granted
    assert device["trials"] == []  # every grant was released when its trial ended
    assert all(p["grant_bytes"] <= device["capacity_bytes"] for p in status["timeline"])
