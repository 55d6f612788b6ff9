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

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The browser tests drive Debian's chromium (never a browser download).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless chromium for one test module; skipped where it is not installed, failed instead
    with ELASTUNE_REQUIRE_BROWSER=1 (CI)."""
    if not CHROMIUM.exists():
        reason = "Debian's chromium is not installed (apt-get install -y chromium); the browser tests need it"
        if os.environ.get("ELASTUNE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"ELASTUNE_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


# Ports a test picks come from 20000-32767: above Ray's worker ports (10002-19999) and below the
# kernel's ephemeral range (32768-60999 by default), from which the OS hands out the ports of every
# process that binds port 0 (Ray's workers, raylets and agents of another test's cluster included).
# A port picked from the ephemeral range can be taken by such a process between the pick and its use:
# a Ray node given one then fails to start (seen in CI as a second node that never joined). Each
# xdist worker gets its own slice, so two workers never pick the same port.
_PICKED_PORTS = range(20000, 32768)


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index, count = int(worker) if worker.isdigit() else 0, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    size = len(_PICKED_PORTS) // max(count, 1)
    return range(_PICKED_PORTS.start + index * size, _PICKED_PORTS.start + (index + 1) * size)


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """A factory: a TCP port on 127.0.0.1 that nothing listens on right now, from this xdist
    worker's slice of 20000-32767 (see above why not a port the OS picks), and never one it gave
    before in this session (a Ray head given the same port for its dashboard and its agent refused
    to start)."""
    given: set[int] = set()
    ports = _port_slice()
    start = ports.start + os.getpid() % len(ports)  # another session on the machine starts elsewhere

    def pick() -> int:
        for offset in range(len(ports)):
            port = ports.start + (start - ports.start + offset) % len(ports)
            if port in given:
                continue
            given.add(port)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:  # in use
                    continue
            return port
        raise RuntimeError(f"no free port left in {ports.start}-{ports.stop - 1}")

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


@pytest.fixture(scope="session")
def serve_ui(wait_until: Callable[..., None]) -> Callable[[Any, int], contextlib.AbstractContextManager[str]]:
    """A factory: `with serve_ui(app, port) as base:` serves a UI app (elastune.ui.create_app) on
    127.0.0.1:port from a thread of this process, `base` its URL, and stops it on leaving."""

    @contextlib.contextmanager
    def serve(app: Any, port: int) -> Iterator[str]:
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, name=f"ui-server-{port}", daemon=True)
        thread.start()
        try:
            wait_until(lambda: server.started, 30, "the UI server to start")
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(timeout=15)

    return serve
