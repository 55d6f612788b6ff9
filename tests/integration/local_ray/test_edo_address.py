"""`elastune edo status` against the package's local Ray: it never joins the cluster Ray's temp
folder names (another user may have written that file), and what the broker holds reaches the
terminal without its escape sequences or markup.

The command runs as a user runs it, in a process of its own with an environment of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elastune.edo.broker import ensure_broker, shutdown_broker
from elastune.edo.policy import DeviceSpec

pytestmark = pytest.mark.integration
MiB = 2**20
PLANTED = "planted-by-another-user"
HOSTILE = "gpu [/bold]\x1b]0;pwned\x07\x1b[31m"


def edo_status(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "elastune"
    clean = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [str(exe), "edo", "status", *args], capture_output=True, text=True, timeout=120, env={**clean, **env}
    )


@pytest.fixture
def broker(ray_local: Any) -> Iterator[Any]:
    """A factory: a fresh broker with one virtual device of the given name; stopped after the test."""

    def start(name: str) -> None:
        ensure_broker([DeviceSpec(name, capacity_bytes=64 * MiB)])

    shutdown_broker()
    yield start
    shutdown_broker()


def test_the_cluster_named_in_rays_temp_folder_is_never_joined(ray_local: Any, broker: Any, tmp_path: Path) -> None:
    address = ray_local.address_info["gcs_address"]
    broker(PLANTED)
    # Another user's file: Ray's `auto` reads $RAY_TMPDIR/ray/ray_current_cluster (by default
    # /tmp/ray/ray_current_cluster, which every user of the machine may write).
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(address)
    said = edo_status("--format", "json", RAY_TMPDIR=str(tmp_path))
    assert PLANTED not in said.stdout + said.stderr, said
    with socket.socket() as probe:
        default_taken = probe.connect_ex(("127.0.0.1", 6379)) == 0
    if not default_taken:  # else a cluster of this machine's at Ray's default answered, as it should
        assert said.returncode == 1
        assert "--address (default 127.0.0.1:6379: none given)='127.0.0.1:6379': nothing answers there" in said.stderr
    # The same cluster, named by the user, is read.
    named = edo_status("--format", "json", RAY_TMPDIR=str(tmp_path), RAY_ADDRESS=address)
    assert named.returncode == 0, named.stderr
    assert [d["device"] for d in json.loads(named.stdout)["devices"]] == [PLANTED]


def test_what_the_broker_holds_is_shown_escaped(ray_local: Any, broker: Any) -> None:
    address = ray_local.address_info["gcs_address"]
    broker(HOSTILE)
    table = edo_status("--address", address)
    assert table.returncode == 0, table.stderr  # `[/bold]` read as markup would crash the table
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout
    assert "gpu [/bold]]0;pwned[31m: capacity 64.00 MiB" in table.stdout
    shown = edo_status("--address", address, "--format", "json")
    assert shown.returncode == 0 and "\x1b" not in shown.stdout  # json.dumps writes \u001b
    assert [d["device"] for d in json.loads(shown.stdout)["devices"]] == [HOSTILE]  # the value itself, intact
