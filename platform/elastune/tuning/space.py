"""A sweep's search space: its parameter types and the points they span.

A parameter is a choice, an int range or a float range (log scale and step optional), drawn only
`when` every named parameter drawn before it took one of the listed values. The enumerations serve
the preflight (the corners of the space, where the cheapest config must lie: memory is monotone in
each numeric knob) and grid search (every point of a discrete space).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChoiceParam",
    "FloatParam",
    "IntParam",
    "Parameter",
    "candidate_points",
    "grid_points",
    "point_problem",
]

_BIG = 10**12  # a bound for a searched int or float: finite, far beyond any real range


class _Section(BaseModel):
    # Finite numbers only, each bounded (below): a spec may come from a remote client (the web UI).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Param(_Section):
    when: dict[str, list[Any]] | None = Field(
        None, description="Draw this parameter only when each named parameter took one of the listed values."
    )


class ChoiceParam(_Param):
    type: Literal["choice"] = Field(description="choice: one of values.")
    values: list[Any] = Field(min_length=1, max_length=1000, description="The candidates, tried as given.")


class IntParam(_Param):
    type: Literal["int"] = Field(description="int: whole numbers from low to high.")
    low: int = Field(ge=-_BIG, le=_BIG, description="The smallest value, included.")
    high: int = Field(ge=-_BIG, le=_BIG, description="The largest value, included.")
    log: bool = Field(False, description="Sample on a log scale (low must be > 0; step is then 1).")
    step: int = Field(1, ge=1, le=_BIG, description="The values are low, low + step, ... up to high.")


class FloatParam(_Param):
    type: Literal["float"] = Field(description="float: real numbers from low to high.")
    low: float = Field(ge=-_BIG, le=_BIG, description="The smallest value, included.")
    high: float = Field(ge=-_BIG, le=_BIG, description="The largest value, included.")
    log: bool = Field(False, description="Sample on a log scale (low must be > 0; no step).")
    step: float | None = Field(None, gt=0, le=_BIG, description="Discretize: low, low + step, ... (none: continuous).")


Parameter = Annotated[ChoiceParam | IntParam | FloatParam, Field(discriminator="type")]


MAX_COMBINATIONS = 48


def candidate_points(parameters: Mapping[str, Parameter]) -> list[dict[str, Any]]:
    """Combinations of each parameter's extreme values, conditions applied, duplicates dropped."""
    options: list[tuple[str, list[Any]]] = []
    for name, param in parameters.items():
        if isinstance(param, ChoiceParam):
            values = list(param.values)
            if len(values) > 3 and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                values = [min(values), max(values)]
        else:
            values = [param.low, param.high]
        options.append((name, values))
    return _combine(parameters, options, MAX_COMBINATIONS)


def grid_points(parameters: Mapping[str, Parameter], limit: int = 100_000) -> list[dict[str, Any]]:
    """Every distinct proposal of a discrete space (what grid search enumerates), conditions applied."""
    options: list[tuple[str, list[Any]]] = []
    for name, param in parameters.items():
        if isinstance(param, ChoiceParam):
            options.append((name, list(param.values)))
        elif isinstance(param, IntParam):
            options.append((name, list(range(param.low, param.high + 1, param.step))))
        else:
            assert param.step is not None, "grid specs give floats a step (check_spec enforces it)"
            count = round((param.high - param.low) / param.step) + 1
            options.append((name, [param.low + i * param.step for i in range(count)]))
    return _combine(parameters, options, limit)


def point_problem(parameters: Mapping[str, Parameter], point: Mapping[str, Any]) -> str | None:
    """Why `point` is not a proposal this space could make (a key it does not search, a value
    outside a parameter's choices or range, a parameter drawn against its `when`); None if it is.
    A point read back from somewhere others can write (the tracking store) is run only if None."""
    for name, value in point.items():
        param = parameters.get(name)
        if param is None:
            return f"{name!r} is not a searched parameter ({', '.join(parameters)})"
        if not _admits(param, value):
            return f"{name}={value!r} is not a value the space gives it"
        if not all(point.get(key, _ABSENT) in allowed for key, allowed in (param.when or {}).items()):
            return f"{name} is drawn only when {param.when}"
    return None


_ABSENT = object()


def _admits(param: Parameter, value: Any) -> bool:
    # type(...) is: True == 1 and 1 == 1.0 in Python, but a choice of 1 is not a choice of True
    if isinstance(param, ChoiceParam):
        return any(type(value) is type(choice) and value == choice for choice in param.values)
    if isinstance(value, bool) or not isinstance(value, int | float) or not param.low <= value <= param.high:
        return False
    if isinstance(param, IntParam):
        return isinstance(value, int) and (value - param.low) % param.step == 0
    return math.isfinite(value)


def _combine(
    parameters: Mapping[str, Parameter], options: list[tuple[str, list[Any]]], limit: int
) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    seen: set[str] = set()
    for combo in itertools.product(*(values for _, values in options)):
        drawn: dict[str, Any] = {}
        for (name, _), value in zip(options, combo, strict=True):
            when = parameters[name].when or {}
            if all(key in drawn and drawn[key] in allowed for key, allowed in when.items()):
                drawn[name] = value
        key = repr(sorted(drawn.items()))
        if key not in seen:
            seen.add(key)
            points.append(drawn)
        if len(points) >= limit:
            break
    return points
