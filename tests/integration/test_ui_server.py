"""`elastune ui` as a user starts it: a real process, a real port on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.unit.test_ui_trust import RAY_TOKEN, FakeDashboard

pytestmark = pytest.mark.integration

TOKEN = "integration-token-0123456789abcdef"


def _elastune(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    # Ray's address variables would redirect the UI's job client (it refuses to start with one)
    inherited = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    return subprocess.Popen(
        [sys.executable, "-m", "elastune.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**inherited, **(env or {})},
    )


def test_a_public_bind_without_token_refuses_to_start(free_port: Callable[[], int]) -> None:
    env = {"ELASTUNE_UI_TOKEN": ""}
    process = _elastune("ui", "--host", "0.0.0.0", "--port", str(free_port()), env=env)
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2, output
    assert "--token" in output


@pytest.fixture
def planted() -> Iterator[FakeDashboard]:
    with FakeDashboard() as dashboard:
        yield dashboard


@pytest.fixture
def served(
    free_port: Callable[[], int], wait_until: Callable[..., None], tmp_path: Path, planted: FakeDashboard
) -> Iterator[str]:
    """`elastune ui` with its defaults, on a machine where another user has pointed Ray's discovery
    file (in the UI's RAY_TMPDIR) at a dashboard of theirs, `planted`."""
    port = free_port()
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    planted.plant(tmp_path)
    env = {"ELASTUNE_UI_TOKEN": TOKEN, "RAY_TMPDIR": str(tmp_path), "RAY_AUTH_TOKEN": RAY_TOKEN}
    process = _elastune("ui", "--port", str(port), "--tracking-uri", store, env=env)
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert process.poll() is None, process.stdout.read() if process.stdout else "exited"
        try:
            return httpx.get(f"{base}/jobs", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, 60, "elastune ui to answer")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_served_ui_needs_its_token_and_checks_the_host(served: str) -> None:
    assert httpx.get(f"{served}/api/health").status_code == 401
    assert httpx.get(f"{served}/api/sweeps").status_code == 401
    # The schema and its docs page hold no data and load without the token (the page's Authorize takes it).
    assert httpx.get(f"{served}/openapi.json").status_code == 200
    assert httpx.get(f"{served}/api/docs").status_code == 200
    auth = {"Authorization": f"Bearer {TOKEN}"}
    health = httpx.get(f"{served}/api/health", headers=auth)
    assert health.status_code == 200 and health.json()["token_required"] is True
    rebound = httpx.get(f"{served}/api/health", headers={**auth, "Host": "attacker.example"})
    assert rebound.status_code == 400
    schema = httpx.get(f"{served}/openapi.json", headers=auth).json()
    assert "/api/jobs" in schema["paths"] and "/api/sweeps/{sweep_id}" in schema["paths"]


def test_the_served_ui_never_sends_rays_token_to_a_dashboard_named_in_rays_discovery_file(
    served: str, planted: FakeDashboard
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    listed = httpx.get(f"{served}/api/jobs", headers=auth, timeout=60)
    assert listed.status_code != 500, listed.text
    assert planted.received == []  # not contacted: Ray's token never went there
    assert httpx.get(f"{served}/api/health", headers=auth).json()["ray_address"] == "http://127.0.0.1:8265"
