"""The cheapest config a spec can propose, by predicted peak memory: the preflight that refuses a
memory ceiling nothing in the space could fit under, before anything is launched.

Memory is monotone in each numeric knob (micro-batch, compression, cache size), so only the ends
of a range can be the cheapest; choices are all tried. Conditions are honoured, and the number of
combinations priced is capped (each estimate is a fake-tensor trace, ~0.1-1 s). The preflight stops
at the first point under the ceiling; only a ceiling nothing fits under prices them all.
"""

from __future__ import annotations

import itertools
from typing import Any

from elastune.tuning.spec import ChoiceParam, IntParam, SweepSpec

__all__ = ["candidate_points", "cheapest_estimate", "grid_points"]

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
    return _combine(spec, options, MAX_COMBINATIONS)


def grid_points(spec: SweepSpec, limit: int = 100_000) -> list[dict[str, Any]]:
    """Every distinct proposal of a discrete space (what grid search enumerates), conditions applied."""
    options: list[tuple[str, list[Any]]] = []
    for name, param in spec.parameters.items():
        if isinstance(param, ChoiceParam):
            options.append((name, list(param.values)))
        elif isinstance(param, IntParam):
            options.append((name, list(range(param.low, param.high + 1, param.step))))
        else:
            assert param.step is not None, "grid specs give floats a step (check_spec enforces it)"
            count = round((param.high - param.low) / param.step) + 1
            options.append((name, [param.low + i * param.step for i in range(count)]))
    return _combine(spec, options, limit)


def _combine(spec: SweepSpec, options: list[tuple[str, list[Any]]], limit: int) -> list[dict[str, Any]]:
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
        if len(points) >= limit:
            break
    return points


def cheapest_estimate(spec: SweepSpec, enough: int | None = None) -> tuple[int, dict[str, Any]]:
    """(smallest predicted peak bytes, the parameters that give it). With `enough`, stop at the
    first point predicted at or below it: the preflight asks only whether anything fits under the
    ceiling, and pricing every corner (36 traces for the quick sweep, ~30 s) delayed every sweep."""
    from elastune.tuning.search import predicted_peak

    best: tuple[int, dict[str, Any]] | None = None
    for params in candidate_points(spec):
        peak = predicted_peak(spec, params)
        if best is None or peak < best[0]:
            best = (peak, params)
        if enough is not None and peak <= enough:
            break
    assert best is not None  # a spec has at least one parameter, so at least one point
    return best
