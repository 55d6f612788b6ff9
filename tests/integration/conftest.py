"""Fixtures for integration tests (real Ray, real MLflow server, real browser).

Generic helpers only; a test's own servers live in its module and are stopped by its fixtures.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """A factory: a TCP port on 127.0.0.1 that nothing listens on right now."""

    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    return pick


@pytest.fixture(scope="session")
def wait_until() -> Callable[..., None]:
    """A factory: poll `condition()` until it is true, or fail with `what` after `timeout_s`."""

    def wait(condition: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(interval_s)

    return wait


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A real local Ray (2 CPUs, bound to 127.0.0.1, no dashboard) for one test module, shut down after it."""
    import ray

    context = ray.init(
        address="local",  # a new Ray, never one a `ray start` elsewhere on the machine left running
        num_cpus=2,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        yield context
    finally:
        ray.shutdown()
