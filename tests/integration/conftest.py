"""Fixtures for integration tests (real Ray, real MLflow server, real browser).

The tests are grouped by what they run on, so each shared server lives only as long as its group:

- `local_ray/`: one local Ray (2 CPUs, a logical GPU, 127.0.0.1, no dashboard) for all its modules;
- `served/`: a token-authenticated two-node Ray cluster with its job server, and an `mlflow server`;
- here: tests that start their own (the resume test's drivers, the UI server's bind checks).

Starting a Ray or a server costs 5-25 s on a 2-core machine and an idle one still takes a few
percent of it, so each is started once per group and stopped when the group ends. Everything binds
127.0.0.1.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

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
