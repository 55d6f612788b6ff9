"""The cheapest config a spec can propose, by predicted peak memory: the preflight that refuses a
memory ceiling nothing in the space could fit under, before anything is launched.

Memory is monotone in each numeric knob (micro-batch, compression, cache size), so only the ends
of a range can be the cheapest; choices are all tried. Conditions are honoured, and the number of
combinations priced is capped (each estimate is a fake-tensor trace, ~0.1-0.3 s).
"""

from __future__ import annotations

import itertools
from typing import Any

from elastune.tuning.spec import ChoiceParam, SweepSpec

__all__ = ["candidate_points", "cheapest_estimate"]

MAX_COMBINATIONS = 48


def candidate_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Combinations of each parameter's extreme values, conditions applied, duplicates dropped."""
    options: list[tuple[str, list[Any]]] = []
    for name, param in spec.parameters.items():
        if isinstance(param, ChoiceParam):
            values = list(param.values)
            if len(values) > 3 and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                values = [min(values), max(values)]
        else:
            values = [param.low, param.high]
        options.append((name, values))
    points: list[dict[str, Any]] = []
    seen: set[str] = set()
    for combo in itertools.product(*(values for _, values in options)):
        drawn: dict[str, Any] = {}
        for (name, _), value in zip(options, combo, strict=True):
            when = spec.parameters[name].when or {}
            if all(key in drawn and drawn[key] in allowed for key, allowed in when.items()):
                drawn[name] = value
        key = repr(sorted(drawn.items()))
        if key not in seen:
            seen.add(key)
            points.append(drawn)
        if len(points) >= MAX_COMBINATIONS:
            break
    return points


def cheapest_estimate(spec: SweepSpec) -> tuple[int, dict[str, Any]]:
    """(smallest predicted peak bytes, the parameters that give it)."""
    from elastune.memory.estimate import estimate

    best: tuple[int, dict[str, Any]] | None = None
    for params in candidate_points(spec):
        peak = estimate(spec.trial_config(params)).peak_bytes
        if best is None or peak < best[0]:
            best = (peak, params)
    assert best is not None  # a spec has at least one parameter, so at least one point
    return best
