"""Dotted keys and nested mappings, both ways: `{"batch": {"micro": 64}}` <-> `{"batch.micro": 64}`.

Overrides (`--set batch.micro=64`), sweep parameters, the UI's allowlist and MLflow params all name a
run-config field by its dotted path; the config itself is nested. One pair of functions here
converts, for every one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["flatten", "nest", "set_path"]


def flatten(tree: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """`{"batch": {"micro": 64}}` -> `{"batch.micro": 64}`. Lists, scalars and empty mappings are
    leaves (an empty section stays visible)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.update({f"{key}{sep}{inner}": leaf for inner, leaf in flatten(value, sep).items()})
        else:
            out[str(key)] = value
    return out


def nest(flat: Mapping[str, Any], sep: str = ".") -> dict[str, Any]:
    """`{"batch.micro": 64}` -> `{"batch": {"micro": 64}}` (the inverse of `flatten`)."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        set_path(nested, key.split(sep), value)
    return nested


def set_path(target: dict[str, Any], keys: list[str], value: Any) -> None:
    """Set `target[k1][k2]...[kn] = value`, making (or replacing with) mappings on the way."""
    for key in keys[:-1]:
        child = target.get(key)
        if not isinstance(child, dict):
            child = target[key] = {}
        target = child
    target[keys[-1]] = value
