"""`elastune doctor --address` against a real Ray: the package's local one (127.0.0.1, 2 CPUs, one
logical GPU), one started here without token auth, a port nothing listens on, and one that accepts
connections but never speaks Ray.

Doctor runs as a command in a process of its own, as a user runs it: it reads the cluster from its
GCS without connecting a driver, so the cluster this process is attached to does not stand in for it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.integration.processes import ray_driver

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def open_cluster(wait_until: Callable[..., None]) -> Iterator[tuple[str, Path]]:
    """(GCS address, temp folder) of a local Ray that takes clients without a token, in a process of
    its own (this one is attached to `ray_local`). Stopped when the module ends."""
    folder = Path(tempfile.mkdtemp(prefix="elastune-open-", dir="/tmp"))  # short: Ray's socket paths
    folder.chmod(0o755)  # like /tmp: other users may enter, so its `ray` folder is as exposed as /tmp/ray
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env |= {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    try:
        with ray_driver(folder, env, wait_until) as address:
            yield address, folder / "ray"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def doctor(folder: Path, *args: str, **env: str) -> tuple[int, dict[str, Any], str]:
    env_free = {"RAY_ADDRESS": "", "MLFLOW_TRACKING_URI": "", "ELASTUNE_HOME": str(folder / "home"), **env}
    done = subprocess.run(
        [sys.executable, "-m", "elastune.cli", "doctor", "--format", "json", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env_free},
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def by_check(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in report["findings"]}


def test_doctor_finds_the_running_ray_and_its_gpus(ray_local: Any, tmp_path: Path) -> None:
    address = ray_local.address_info["gcs_address"]
    declared = ray.cluster_resources()
    code, report, said = doctor(tmp_path, "--address", address)
    assert code == 0, said
    checks = by_check(report)
    found = checks["ray"]
    assert found["status"] == "ok", found
    assert found["details"]["nodes"] == 1
    assert found["details"]["cpus"] == declared["CPU"] == 2
    assert found["details"]["gpus"] == declared["GPU"] == 1
    assert f"{address}: 1 node(s) with 2 CPU(s) and 1 GPU(s)" in found["finding"]
    # Ray turns token auth on for a cluster `ray.init` starts (and RAY_AUTH_MODE=token here, which the
    # command inherits): a client without the token, asked from a process of its own, is refused.
    assert os.environ.get("RAY_AUTH_MODE") == "token"
    assert found["details"]["requires_token"] is True, found
    assert checks["gpus"]["details"]["ray_gpus"] == 1  # Ray's logical GPU, beside torch's none here
    # The cluster's GCS is among the sockets doctor saw, and on loopback.
    port = address.rpartition(":")[2]
    gcs = [s for s in checks["ports"]["details"]["listening"] if s.startswith("ray gcs_server") and f":{port}" in s]
    assert gcs and all("127.0.0.1" in s for s in gcs), checks["ports"]
    assert list(tmp_path.iterdir()) == []  # no store, no home: nothing left behind


def test_a_client_without_the_clusters_token_is_told_how_to_get_it(ray_local: Any, tmp_path: Path) -> None:
    # Ray turns token auth on for a local cluster when ~/.ray/auth_token exists (and tells this
    # process so through RAY_AUTH_MODE); without a token file the cluster takes any client.
    if os.environ.get("RAY_AUTH_MODE") != "token":
        pytest.skip("the local Ray started without token auth (no ~/.ray/auth_token)")
    address = ray_local.address_info["gcs_address"]
    code, report, _ = doctor(tmp_path, "--address", address, RAY_AUTH_MODE="disabled")
    found = by_check(report)["ray"]
    assert (code, found["status"]) == (1, "fail")
    assert "requires token authentication and this client has token authentication off" in found["finding"]
    assert "export RAY_AUTH_MODE=token" in found["fix"]


def test_an_address_nothing_listens_on_fails_at_once(tmp_path: Path, free_port: Any) -> None:
    address = f"127.0.0.1:{free_port()}"
    code, report, said = doctor(tmp_path, "--address", address)
    assert code == 1
    assert report["failed"] == ["ray"]
    found = by_check(report)["ray"]
    assert found["finding"].startswith(f"{address}: nothing answers there")
    assert "GCS address" in found["fix"]
    assert found["seconds"] < 5
    assert "1 check(s) failed: ray" in said


def test_an_address_that_never_speaks_ray_fails_at_the_time_limit(tmp_path: Path) -> None:
    from elastune.doctor import LIMITS_S

    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        code, report, said = doctor(tmp_path, "--address", f"127.0.0.1:{silent.getsockname()[1]}")
    found = by_check(report)["ray"]
    assert (code, found["status"], found["finding"]) == (1, "fail", f"no answer within {LIMITS_S['ray']:g} s")
    assert "does not answer as Ray's GCS" in found["fix"]
    assert found["seconds"] < LIMITS_S["ray"] + 1  # Ray's own client waits 40 s for a GCS before it gives up
    assert [f["check"] for f in report["findings"]][1:] == [
        "ports",
        "ray temp",
        "mlflow",
        "gpus",
        "cpu precision",
        "home",
    ]
    assert "1 check(s) failed: ray" in said  # error output survives the abandoned probe (fd 2 restored)


@pytest.mark.parametrize(
    "client",
    [
        {"RAY_AUTH_MODE": "disabled"},  # the client's own request goes through without a token
        {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32},  # it sends one; a tokenless child is let in too
    ],
    ids=["client-without-token", "client-with-token"],
)
def test_a_cluster_without_token_auth_fails_with_the_fix(
    open_cluster: tuple[str, Path], tmp_path: Path, client: dict[str, str]
) -> None:
    address, ray_temp = open_cluster
    code, report, said = doctor(tmp_path, "--address", address, **client)
    checks = by_check(report)
    found = checks["ray"]
    assert (code, found["status"]) == (1, "fail"), found
    assert found["details"]["requires_token"] is False
    assert f"{address}: 1 node(s) with 1 CPU(s)" in found["finding"]
    assert "takes clients without a token: every user of this machine can run code there" in found["finding"]
    assert "RAY_AUTH_MODE=token" in found["fix"] and "--node-ip-address=127.0.0.1" in found["fix"]
    assert "ray" in report["failed"] and "check(s) failed:" in said
    # Its temp folder (its --temp-dir), found from its processes, as Ray made it: open to every user
    # and without the sticky bit.
    temp = checks["ray temp"]
    assert (ray_temp.stat().st_mode & 0o7777, temp["status"]) == (0o777, "warn"), temp
    assert (
        f"{ray_temp} (--temp-dir of a running Ray) is writable by every user and lacks the sticky bit"
        in (temp["finding"])
    )
