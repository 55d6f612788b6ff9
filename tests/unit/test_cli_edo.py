"""`elastune edo status` reads the cluster the user names (--address, else $RAY_ADDRESS), else Ray's
default GCS on loopback, never one Ray discovers through its temp folder (`auto`): an address it
cannot use is refused before Ray is touched. tests/integration/local_ray/test_edo_address.py runs it
against a real cluster, with a discovery file planted."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import ray
from elastune.cli import main


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--address", "auto"], {}, "--address='auto': is Ray's discovery through its temp folder"),
        ([], {"RAY_ADDRESS": "auto"}, "--address (from $RAY_ADDRESS)='auto': is Ray's discovery"),
        (["--address", "local"], {}, "--address='local': is not HOST:PORT"),  # Ray would start a cluster
        (["--address", "ray://10.0.0.5:10001"], {}, "--address='ray://10.0.0.5:10001': is not HOST:PORT"),
    ],
)
def test_an_address_that_is_not_host_port_is_refused(
    no_cluster: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["edo", "status", *args]) == 2
    said = capsys.readouterr().err
    assert expected in said, said
    assert "e.g. 127.0.0.1:6379" in said  # the fix
    assert not ray.is_initialized()


def test_an_address_nothing_listens_on_fails_at_once_naming_where_it_came_from(
    no_cluster: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    assert main(["edo", "status"]) == 1
    said = capsys.readouterr().err
    assert f"--address (from $RAY_ADDRESS)='127.0.0.1:{port}': nothing answers there" in said, said
    assert not ray.is_initialized()
