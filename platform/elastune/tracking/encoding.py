"""How records and values become MLflow params and tags (no mlflow import needed).

A record is stored as compact JSON in tags `elastune.record.0..N-1` plus `elastune.record.chunks`
= N: see tracking/mlflow.py for why tags (mutable, returned by search_runs) and not params or an
artifact. JSON keeps ints, floats (repr round-trips exactly), bools and None.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["PARAM_MAX", "TAG_MAX", "mlflow_key", "param_value", "read_record", "record_tags"]

RECORD = "elastune.record"
# 5000, not MLflow 3's 8000: older `mlflow server`s still cap tag values at 5000 characters.
TAG_MAX = 5000
PARAM_MAX = 6000  # MLflow 3's param value limit
_KEY_MAX = 250
_BAD_KEY_CHARS = re.compile(r"[^\w./\- :]")  # what MLflow accepts in param/metric/tag keys


def mlflow_key(key: str) -> str:
    """A key MLflow accepts: odd characters become '_', at most 250 characters."""
    return _BAD_KEY_CHARS.sub("_", key)[:_KEY_MAX]


def param_value(value: str) -> str:
    """Within the param length limit; a cut value says so (the record holds the whole one)."""
    return value if len(value) <= PARAM_MAX else value[: PARAM_MAX - 3] + "..."


def record_tags(data: dict[str, Any]) -> dict[str, str]:
    """The record as JSON, cut into tag-sized chunks (ASCII-only, so a character is a byte everywhere)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    chunks = [text[i : i + TAG_MAX] for i in range(0, len(text), TAG_MAX)] or [""]
    tags = {f"{RECORD}.{i}": chunk for i, chunk in enumerate(chunks)}
    tags[f"{RECORD}.chunks"] = str(len(chunks))
    return tags


def read_record(tags: dict[str, str]) -> dict[str, Any] | None:
    """The record `record_tags` wrote, or None when the tags do not hold a whole one."""
    count = tags.get(f"{RECORD}.chunks")
    if count is None or not count.isdigit():
        return None
    try:
        data = json.loads("".join(tags[f"{RECORD}.{i}"] for i in range(int(count))))
    except (KeyError, ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        return None  # a run written by hand or damaged: the caller falls back to the plain tags
    return data if isinstance(data, dict) else None
