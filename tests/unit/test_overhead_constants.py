"""The estimator's fitted constants and its expected-error figures (memory/overhead.py) are typed in
from bench/fit_overhead.py's newest `estimator-zoo-refit` record: they must say what that record
says, so a refit that is not carried over (or a constant edited by hand) fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from elastune.memory import overhead

RECORDS = Path(__file__).resolve().parents[2] / "bench" / "records"
MiB = 2**20


@pytest.fixture(scope="module")
def refit() -> dict:
    newest = max(RECORDS.glob("estimator-zoo-refit-*.json"), key=lambda p: (json.loads(p.read_text())["date"], p.name))
    return json.loads(newest.read_text())


def test_the_fitted_constants_are_the_records(refit: dict) -> None:
    fit = refit["settings"]["cpu_fit"]
    assert overhead.CPU_FIT.fixed == pytest.approx(fit["fixed"], abs=0.05 * MiB)
    assert overhead.CPU_FIT.row_optimizer == pytest.approx(fit["row_optimizer"], abs=0.05 * MiB)
    for share in ("activation_share", "traced_share", "gradient_share"):
        assert getattr(overhead.CPU_FIT, share) == pytest.approx(fit[share], abs=5e-4), share
    virtual = refit["settings"]["virtual_fit"]
    assert overhead.VIRTUAL_FIT.runtime == pytest.approx(virtual["runtime_mib"] * MiB, abs=0.01 * MiB)
    assert overhead.VIRTUAL_FIT.churn_share == pytest.approx(virtual["churn_share"], abs=5e-4)
    assert overhead.VIRTUAL_FIT.churn_cap == pytest.approx(virtual["churn_cap_mib"] * MiB, abs=0.01 * MiB)


def test_the_screening_margins_are_the_records(refit: dict) -> None:
    for kind, margin in refit["settings"]["screen_margin"].items():
        assert overhead.SCREEN_MARGIN[kind] == pytest.approx(margin, abs=0.005), kind


@pytest.mark.parametrize(("kind", "probe"), [("cpu_rss_hwm", "cpu"), ("virtual", "virtual")])
def test_the_expected_error_is_the_held_out_halfs(refit: dict, kind: str, probe: str) -> None:
    figures = {f["name"]: f for f in refit["figures"]}
    held = overhead.HELD_OUT[kind]
    band = f"±{held.band:.0%}"
    within = figures[f"{probe} held-out: configs within {band}"]
    assert f"{held.within}/{held.configs}" == within["note"]
    assert held.median == pytest.approx(figures[f"{probe} held-out: median |error|"]["value"], abs=5e-4)
    errors = [
        float(re.sub(r"[%+]", "", row[3])) / 100
        for row in refit["table"]["rows"]
        if row[0] == probe and row[2] == "held-out"
    ]
    assert len(errors) == held.configs
    assert sum(abs(e) <= held.band for e in errors) == held.within
    assert held.worst_under == pytest.approx(min(errors), abs=5e-4)
