"""`elastune.WorkloadOptions`: the base of a workload's own options (`workload_options` in a run config).

Subclass it and name the class in the workload's `options_model`:

```python
class TowerOptions(elastune.WorkloadOptions):
    hidden: int = Field(16, ge=1, le=1024, description="Width of the towers' MLP.")
```

Each field is then a key of `workload_options` that `--set workload_options.hidden=32` sets and a
sweep searches (`parameters: {workload_options.hidden: {type: choice, values: [16, 32]}}`). An
unknown key is refused whatever the model's own `extra` setting (registry.py), with a "did you
mean"; this base says so itself, and refuses NaN and infinity, as every run-config section does.
Give every number finite bounds (`ge`, `le`): a config may come from a remote client.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["WorkloadOptions"]


class WorkloadOptions(BaseModel):
    """A workload's own options, validated from `workload_options`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
