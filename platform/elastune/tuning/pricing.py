"""What a proposal is predicted to cost in memory, priced once per config and device: the
searcher screens proposals over the ceiling with it, and the preflight refuses a ceiling that not
even the cheapest corner of the space fits under (`cheapest_estimate`).

Both compare the ceiling with the estimate's upper bound, not the bare prediction: the prediction
times the most the estimator under-predicted a config of its fit set (memory/overhead.py
`SCREEN_MARGIN`), so a config predicted just under the ceiling, which the estimator's own error
could put over it, is not launched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from elastune.tuning.space import candidate_points
from elastune.tuning.spec import SweepSpec

__all__ = ["cheapest_estimate", "predicted_peak", "screen", "upper_bound"]

# (config as JSON, device) -> (predicted peak bytes, its upper bound)
_PRICED: dict[tuple[str, str], tuple[int, int]] = {}


def predicted_peak(spec: SweepSpec, params: Mapping[str, Any]) -> int:
    """A proposal's predicted peak bytes, priced for the device its trial runs on."""
    return _priced(spec, params)[0]


def upper_bound(spec: SweepSpec, params: Mapping[str, Any]) -> int:
    """A proposal's predicted peak times the screening margin: what is compared with the ceiling."""
    return _priced(spec, params)[1]


def _priced(spec: SweepSpec, params: Mapping[str, Any]) -> tuple[int, int]:
    """A prediction depends on the config and the device alone, so each is traced once per process
    (the preflight's and the searcher's pricing of one config, a resumed sweep's re-proposals)."""
    import torch

    from elastune.memory.estimate import estimate  # lazy: pulls in torch's fake-tensor machinery

    cfg = spec.trial_config(params)
    device = spec.trial_device(cfg)
    key = (json.dumps(cfg.to_dict(), sort_keys=True), device)
    if key not in _PRICED:
        est = estimate(cfg, torch.device(device))
        _PRICED[key] = (est.peak_bytes, est.upper_bound_bytes)
    return _PRICED[key]


def screen(spec: SweepSpec, params: Mapping[str, Any]) -> tuple[bool, int | None, str]:
    """(fits, predicted peak bytes, reason) for one proposal. Without a ceiling, everything fits."""
    ceiling = spec.constraints.memory_ceiling
    if ceiling is None:
        return True, None, ""
    predicted, bound = _priced(spec, params)
    if bound > ceiling:
        padded = "" if bound == predicted else f" (with the estimator's screening margin {bound} B)"
        return False, predicted, f"predicted peak {predicted} B{padded} is over the memory ceiling {ceiling} B"
    return True, predicted, ""


def cheapest_estimate(spec: SweepSpec, enough: int | None = None) -> tuple[int, dict[str, Any]]:
    """(smallest upper bound of a predicted peak, in bytes, the parameters that give it). With
    `enough`, stop at the first point bounded at or below it: the preflight asks only whether
    anything fits under the ceiling, and pricing every corner (36 traces for the quick sweep, ~30 s)
    delayed every sweep."""
    best: tuple[int, dict[str, Any]] | None = None
    for params in candidate_points(spec.parameters):
        peak = upper_bound(spec, params)
        if best is None or peak < best[0]:
            best = (peak, params)
        if enough is not None and peak <= enough:
            break
    assert best is not None  # a spec has at least one parameter, so at least one point
    return best
