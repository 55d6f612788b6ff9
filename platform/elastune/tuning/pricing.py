"""What a proposal is predicted to cost in memory, priced once per config and device: the
searcher screens proposals over the ceiling with it, and the preflight refuses a ceiling that not
even the cheapest corner of the space fits under (`cheapest_estimate`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from elastune.tuning.space import candidate_points
from elastune.tuning.spec import SweepSpec

__all__ = ["cheapest_estimate", "predicted_peak", "screen"]

_PRICED: dict[tuple[str, str], int] = {}  # (config as JSON, device) -> predicted peak bytes


def predicted_peak(spec: SweepSpec, params: Mapping[str, Any]) -> int:
    """A proposal's predicted peak bytes, priced for the device its trial runs on. A prediction
    depends on the config and the device alone, so each is traced once per process (the preflight's
    and the searcher's pricing of one config, a resumed sweep's re-proposals)."""
    import torch

    from elastune.memory.estimate import estimate  # lazy: pulls in torch's fake-tensor machinery

    cfg = spec.trial_config(params)
    device = spec.trial_device(cfg)
    key = (json.dumps(cfg.to_dict(), sort_keys=True), device)
    if key not in _PRICED:
        _PRICED[key] = estimate(cfg, torch.device(device)).peak_bytes
    return _PRICED[key]


def screen(spec: SweepSpec, params: Mapping[str, Any]) -> tuple[bool, int | None, str]:
    """(fits, predicted peak bytes, reason) for one proposal. Without a ceiling, everything fits."""
    ceiling = spec.constraints.memory_ceiling
    if ceiling is None:
        return True, None, ""
    predicted = predicted_peak(spec, params)
    if predicted > ceiling:
        return False, predicted, f"predicted peak {predicted} B is over the memory ceiling {ceiling} B"
    return True, predicted, ""


def cheapest_estimate(spec: SweepSpec, enough: int | None = None) -> tuple[int, dict[str, Any]]:
    """(smallest predicted peak bytes, the parameters that give it). With `enough`, stop at the
    first point predicted at or below it: the preflight asks only whether anything fits under the
    ceiling, and pricing every corner (36 traces for the quick sweep, ~30 s) delayed every sweep."""
    best: tuple[int, dict[str, Any]] | None = None
    for params in candidate_points(spec.parameters):
        peak = predicted_peak(spec, params)
        if best is None or peak < best[0]:
            best = (peak, params)
        if enough is not None and peak <= enough:
            break
    assert best is not None  # a spec has at least one parameter, so at least one point
    return best
