"""EDO (elastic device-memory optimization): co-located trials share one device's memory.

- `policy.py`: the sharing rule, pure (no Ray, no torch) and property-tested.
- `broker.py`: the one named Ray actor per cluster that holds the policy.
- `client.py`: a trial's session: acquire a grant, heartbeat, adapt at step boundaries, release.
- `reshape.py`: the memory model a trial re-shapes by (micro-batch x accumulation, cached rows), pure.

`elastune edo status` is cli/edo.py. What a trial uses is measured by training/probe.py; what it
will use is predicted by the estimator (memory/), which knows nothing of EDO.

The names below are re-exported lazily, so importing `elastune.edo` pulls in neither Ray nor torch
(the broker actor's process imports only the policy).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "BrokerConfig",
    "Demand",
    "DeviceSpec",
    "EdoError",
    "VirtualProbe",
    "edo_session",
    "ensure_broker",
    "get_broker",
    "plan_demand",
    "read_status",
    "shutdown_broker",
]

_HOME = {
    "BrokerConfig": "broker",
    "ensure_broker": "broker",
    "get_broker": "broker",
    "read_status": "broker",
    "shutdown_broker": "broker",
    "Demand": "client",
    "EdoError": "elastune.errors",
    "edo_session": "client",
    "plan_demand": "client",
    "DeviceSpec": "policy",
    "VirtualProbe": "elastune.training.probe",  # the measuring seam lives with the loop that uses it
}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        home = _HOME[name]
        return getattr(importlib.import_module(home if "." in home else f"{__name__}.{home}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
