"""Shared fixtures. Everything a test starts (Ray, servers, threads) is stopped by the test."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from elastune.config import RunConfig, load_run_config

# MLflow starts a usage-telemetry client on import; tests send nothing beyond 127.0.0.1.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Ray rewrites 127.0.0.1 in an address to the machine's outward IP (services.resolve_ip_for_localhost)
# unless it believes multi-node clusters are off; with this, every Ray address a test uses (and
# every Ray process it starts, which inherits the variable) stays on loopback. Set before Ray is
# imported: Ray reads it once.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# A configuration small enough to train in a second or two on two CPU cores.
TINY = [
    "data.rows_scale=0.0005",
    "model.embedding_dim=8",
    "model.bottom_mlp=[16]",
    "model.top_mlp=[16]",
    "batch.micro=64",
    "batch.accum=1",
    "steps=6",
    "warmup_steps=1",
    "eval.samples=512",
    "device=cpu",
]


@pytest.fixture
def tiny_cfg() -> Callable[..., RunConfig]:
    def make(*overrides: str, **_: Any) -> RunConfig:
        return load_run_config(None, [*TINY, *overrides])

    return make
