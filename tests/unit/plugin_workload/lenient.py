"""The towers of tower.py behind options models that would let a typo through on their own: a plain
pydantic BaseModel (extra keys ignored, pydantic's default) and one that keeps extra keys
(extra="allow"). elastune refuses an unknown option whatever the model says
(tests/unit/test_workload_options.py)."""

from __future__ import annotations

from elastune import RunConfig
from pydantic import BaseModel, ConfigDict, Field

from tests.unit.plugin_workload.tower import TowerWorkload


class PlainOptions(BaseModel):  # no model_config: pydantic ignores keys it has no field for
    hidden: int = Field(16, ge=1, le=1024)


class KeepingOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    hidden: int = Field(16, ge=1, le=1024)


def plain(cfg: RunConfig, options: PlainOptions) -> TowerWorkload:
    return TowerWorkload(cfg, options)


def keeping(cfg: RunConfig, options: KeepingOptions) -> TowerWorkload:
    return TowerWorkload(cfg, options)


plain.options_model = PlainOptions  # type: ignore[attr-defined]
keeping.options_model = KeepingOptions  # type: ignore[attr-defined]
