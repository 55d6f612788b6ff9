"""Shared fixtures. Everything a test starts (Ray, servers, threads) is stopped by the test."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from elastune.config import RunConfig
from elastune.validate import load_run_config

# MLflow starts a usage-telemetry client on import; tests send nothing beyond 127.0.0.1.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Ray rewrites 127.0.0.1 in an address to the machine's outward IP (services.resolve_ip_for_localhost)
# unless it believes multi-node clusters are off; with this, every Ray address a test uses (and
# every Ray process it starts, which inherits the variable) stays on loopback. Set before Ray is
# imported: Ray reads it once.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# A configuration small enough to train in a second or two on two CPU cores: ANY_TINY for any
# workload, TINY for the default one (DLRM) with its MLPs narrowed too.
ANY_TINY = [
    "data.rows_scale=0.0005",
    "model.embedding_dim=8",
    "batch.micro=64",
    "batch.accum=1",
    "steps=6",
    "warmup_steps=1",
    "eval.samples=512",
    "device=cpu",
]
TINY = [*ANY_TINY, "workload_options.bottom_mlp=[16]", "workload_options.top_mlp=[16]"]


@pytest.fixture
def tiny_cfg() -> Callable[..., RunConfig]:
    def make(*overrides: str, **_: Any) -> RunConfig:
        return load_run_config(None, [*TINY, *overrides])

    return make


@pytest.hookimpl(optionalhook=True)  # an xdist hook: no error where xdist is not loaded (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With pytest-xdist (`make test` runs `-n 2`): each package of integration tests that shares a
    Ray cluster or servers (integration/local_ray, integration/served) is one unit of work, so one
    worker runs it in order and its package fixtures start once; every other test file is a unit
    of its own. The integration units go first: they are the longest, and a worker running Ray
    tests leaves the other core idle about a third of the time."""
    from xdist.scheduler import LoadScopeScheduling

    class ByPackage(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            parts = path.split("/")
            return "/".join(parts[:3]) if parts[:2] == ["tests", "integration"] and len(parts) > 3 else path

    config.option.loadscopereorder = False  # the collection's order (below), not the largest unit first
    return ByPackage(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: the integration tests first (see pytest_xdist_make_scheduler); the
    order is otherwise pytest's, the same in every worker."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: not item.nodeid.startswith("tests/integration/"))
