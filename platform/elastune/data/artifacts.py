"""The data artifact of a run config given as a plain dict (a checkpoint's, a sweep spec's base):
what turned a file source's data into the ids the model trained on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elastune.data.source import DataArtifact
from elastune.data.table import vocabulary_artifact
from elastune.data.text import tokenizer_artifact

__all__ = ["data_artifact"]


def data_artifact(config: Mapping[str, Any]) -> DataArtifact | None:
    """The data artifact of a run config given as a plain dict (a checkpoint's, a sweep spec's
    base), built if it is not cached; None for data that has none (synthetic data, the Criteo
    files, a hashed table)."""
    data = config.get("data")
    source = data.get("source") if isinstance(data, Mapping) else None
    if source == "table":
        return vocabulary_artifact(data)
    if source == "text":
        return tokenizer_artifact(config)
    return None
