"""A real Ray on 127.0.0.1 that wants a token this client lacks, in a process of its own, stopped
(and anything of it killed) when the module ends: `auto` sees it and is refused naming it, and the UI
pointed at it stops at start with the fix, where `ray.init` would log InvalidAuthToken for minutes."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from elastune.cluster import AUTO_FIX

from tests.integration.processes import ray_driver
from tests.unit.test_cluster_messages import ROOT, one_line

pytestmark = pytest.mark.integration


def tokenless_env(**extra: str) -> dict[str, str]:
    """This client as a user without the cluster's token runs it: auth off, no token variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    return {**env, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **extra}


@pytest.fixture(scope="module")
def token_cluster(wait_until: Callable[..., None]) -> Iterator[str]:
    """The GCS address of a Ray on 127.0.0.1 with token auth on, whose token this client lacks."""
    folder = Path(tempfile.mkdtemp(prefix="elastune-token-", dir="/tmp"))  # short: Ray's socket paths
    try:
        env = tokenless_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        with ray_driver(folder, env, wait_until) as address:
            yield address
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_autos_candidates_are_the_clusters_ray_sees_on_this_machine(token_cluster: str) -> None:
    """compat.ray_auto_candidates, Ray's own discovery: it sees the cluster started here."""
    probe = "from elastune.compat import ray_auto_candidates; print(' '.join(ray_auto_candidates()))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=tokenless_env(), timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert token_cluster in done.stdout.split(), done.stdout


def test_the_ui_stops_at_once_where_its_cluster_refuses_this_clients_token(token_cluster: str, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "elastune.cli", "ui", "--cluster-address", token_cluster, "--port", str(port)]
    command += ["--spec-dir", str(ROOT / "search_spaces")]
    env = tokenless_env(ELASTUNE_HOME=str(tmp_path / "home"), MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'm.db'}")
    # A UI that started serving instead would run until the timeout: the test fails then.
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180, check=False)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    said = one_line(done.stderr)
    assert said.startswith(
        f"error: --cluster-address='{token_cluster}': the Ray cluster there requires token authentication"
    ), said
    assert "`export RAY_AUTH_MODE=token`" in said and "ray get-auth-token" in said, said
    assert "InvalidAuthToken" not in done.stderr.replace("[Ray: RPC error: InvalidAuthToken", ""), done.stderr
    assert done.stdout == ""  # never said where it serves


def test_a_sweep_with_auto_stops_before_anything_starts(token_cluster: str, tmp_path: Path) -> None:
    """A cluster that wants a token this client lacks runs on this machine (perhaps beside others):
    `auto` is refused at once, naming it among the clusters Ray sees and the fix, where `ray.init`
    would have joined one of them and logged InvalidAuthToken every second; nothing is written."""
    command = [sys.executable, "-m", "elastune.cli", "sweep", str(ROOT / "search_spaces" / "dlrm_quick.yaml")]
    command += ["--address", "auto", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    env = tokenless_env(ELASTUNE_HOME=str(tmp_path / "home"))
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    said = one_line(done.stderr)
    assert said.startswith("error: --address='auto': `auto` makes Ray join whichever cluster"), said
    assert AUTO_FIX in said and token_cluster in said, said
    assert "InvalidAuthToken" not in done.stderr
    assert not (tmp_path / "home").exists() and not (tmp_path / "m.db").exists()
