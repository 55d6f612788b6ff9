"""A proposal's price (elastune/tuning/pricing.py) with the estimator replaced by a price list, so
each expected figure is read off the list by hand: what is compared with the ceiling (the upper
bound, not the bare prediction), each config priced once per device, and the preflight's search
for the cheapest corner stopping where it may. The estimator's own figures are tested in
test_estimate*.py; bench/mutation.py found pricing's logic reached only by slow sweep tests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from elastune.memory import estimate as estimate_module
from elastune.tuning import pricing
from elastune.tuning.pricing import cheapest_estimate, predicted_peak, screen, upper_bound
from elastune.tuning.spec import SweepSpec

from tests.integration.sweep_specs import tiny_spec

# (strategy, micro-batch) -> (predicted peak, upper bound) on the CPU; on CUDA each is 1000 B more.
# The hashed configs are priced alike, with no margin (bound == peak).
PRICES = {
    ("full", 64): (160_000, 240_000),
    ("full", 128): (200_000, 300_000),
    ("hashed", 64): (50_000, 50_000),
    ("hashed", 128): (50_000, 50_000),
}
FULL_64 = {"embedding.strategy": "full", "batch.micro": 64}
HASHED_64 = {"embedding.strategy": "hashed", "batch.micro": 64}


@pytest.fixture
def priced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str]]:
    """The estimator replaced by PRICES, with an empty cache; returns each pricing's (strategy,
    micro-batch, device) as it happens."""
    calls: list[tuple[str, int, str]] = []

    def fake(cfg: Any, device: torch.device) -> SimpleNamespace:
        calls.append((cfg.embedding.strategy, cfg.batch.micro, device.type))
        peak, bound = PRICES[cfg.embedding.strategy, cfg.batch.micro]
        extra = 1000 if device.type == "cuda" else 0
        return SimpleNamespace(peak_bytes=peak + extra, upper_bound_bytes=bound + extra)

    monkeypatch.setattr(estimate_module, "estimate", fake)
    monkeypatch.setattr(pricing, "_PRICED", {})
    return calls


def sweep(ceiling: int | None = None, gpus: float = 0) -> SweepSpec:
    # device auto: the trial's device is decided by the spec's resources (CUDA where it gives GPUs)
    return SweepSpec.model_validate(
        tiny_spec(base={"device": "auto"}, constraints={"memory_ceiling": ceiling}, resources={"gpus_per_trial": gpus})
    )


def test_a_config_is_priced_once_per_device(priced: list[tuple[str, int, str]]) -> None:
    cpu, gpu = sweep(), sweep(gpus=1)
    assert cpu.trial_config(FULL_64) == gpu.trial_config(FULL_64)  # one config, two devices
    assert (predicted_peak(cpu, FULL_64), upper_bound(cpu, FULL_64)) == (160_000, 240_000)
    assert (predicted_peak(gpu, FULL_64), upper_bound(gpu, FULL_64)) == (161_000, 241_000)
    assert predicted_peak(cpu, HASHED_64) == 50_000
    assert priced == [("full", 64, "cpu"), ("full", 64, "cuda"), ("hashed", 64, "cpu")]


def test_one_config_is_one_price_whatever_order_its_parameters_come_in(priced: list[tuple[str, int, str]]) -> None:
    raw = tiny_spec()
    # no options in the base (a copy: tiny_spec shares TINY_BASE), so their order is the parameters'
    raw["base"] = {key: value for key, value in raw["base"].items() if key != "workload_options"}
    spec = SweepSpec.model_validate(raw)
    first = {**FULL_64, "workload_options.bottom_mlp": [8], "workload_options.top_mlp": [8]}
    second = {"workload_options.top_mlp": [8], "workload_options.bottom_mlp": [8], **FULL_64}
    assert spec.trial_config(first) == spec.trial_config(second)
    assert predicted_peak(spec, first) == predicted_peak(spec, second) == 160_000
    assert priced == [("full", 64, "cpu")]


def test_without_a_ceiling_everything_fits_unpriced(priced: list[tuple[str, int, str]]) -> None:
    assert screen(sweep(), FULL_64) == (True, None, "")
    assert priced == []


def test_screen_compares_the_upper_bound_with_the_ceiling(priced: list[tuple[str, int, str]]) -> None:
    assert screen(sweep(240_000), FULL_64) == (True, 160_000, "")  # a bound at the ceiling fits
    assert screen(sweep(239_999), FULL_64) == (
        False,
        160_000,
        "predicted peak 160000 B (with the estimator's screening margin 240000 B) is over the memory ceiling 239999 B",
    )
    # No margin to mention where the bound is the prediction itself.
    assert screen(sweep(49_999), HASHED_64) == (
        False,
        50_000,
        "predicted peak 50000 B is over the memory ceiling 49999 B",
    )


def test_the_cheapest_corner_and_where_its_search_stops(priced: list[tuple[str, int, str]]) -> None:
    spec = sweep()
    # All four priced: the hashed ones tie at 50000, and the first of them found is kept.
    assert cheapest_estimate(spec) == (50_000, HASHED_64)
    assert len(priced) == 4
    for enough, expected, count in [
        (10**9, (240_000, FULL_64), 1),  # the first corner is under it: priced alone
        (50_000, (50_000, HASHED_64), 3),  # the third is exactly at it: the fourth is not priced
        (49_999, (50_000, HASHED_64), 4),  # nothing is under it: every corner priced
    ]:
        pricing._PRICED.clear()
        priced.clear()
        assert cheapest_estimate(spec, enough=enough) == expected
        assert len(priced) == count
