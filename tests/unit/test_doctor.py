"""`elastune doctor`: every verdict of the pure judges (findings.py) on plain data, the time limit,
and the real command on a SQLite store in tmp_path (no Ray: tests/integration/local_ray/test_doctor_ray.py
checks a running one)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from elastune import doctor
from elastune.cli import main
from elastune.cli.doctor import doctor_table
from elastune.doctor.findings import (
    Finding,
    Listener,
    Node,
    TempFolder,
    judge_gpus,
    judge_home,
    judge_listeners,
    judge_precision,
    judge_ray,
    judge_ray_temp,
    judge_store,
    server_owner,
)
from elastune.doctor.gather import check_ray_temp, temp_folder
from rich.console import Console

GiB = 2**30


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder and ELASTUNE_HOME, and no cluster or store from the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


# -- the judges


def test_no_address_means_a_local_ray_on_loopback() -> None:
    found = judge_ray(None, None, [], token=False)
    assert found.status == "ok"
    assert "127.0.0.1" in found.finding


def test_a_cluster_that_cannot_be_used_fails_with_its_fix() -> None:
    found = judge_ray("10.0.0.5:6379", ("nothing answers there (timed out)", "give the head's GCS address"), [], False)
    assert (found.status, found.fix) == ("fail", "give the head's GCS address")
    assert "10.0.0.5:6379: nothing answers there" in found.finding


def test_a_cluster_is_counted_and_its_token_judged() -> None:
    nodes = [Node("10.0.0.5", 8, 2), Node("10.0.0.6", 4, 0.5)]
    with_token = judge_ray("10.0.0.5:6379", None, nodes, token=True, requires_token=True)
    assert with_token.status == "ok"
    assert with_token.details == {
        "address": "10.0.0.5:6379",
        "nodes": 2,
        "cpus": 12,
        "gpus": 2.5,
        "token_auth": True,
        "requires_token": True,
    }
    assert "2 node(s) with 12 CPU(s) and 2.5 GPU(s); it requires a token" in with_token.finding
    assert judge_ray("10.0.0.5:6379", None, [], token=True, requires_token=True).status == "fail"


@pytest.mark.parametrize("address", ["127.0.0.1:6379", "10.0.0.5:6379"])
@pytest.mark.parametrize(("token", "requires_token"), [(False, None), (True, False)])
def test_a_cluster_without_token_auth_fails_on_loopback_too(address: str, token: bool, requires_token: bool) -> None:
    # A client without a token that read the nodes, or one with a token whose tokenless twin was let in.
    found = judge_ray(address, None, [Node("10.0.0.5", 8, 0)], token=token, requires_token=requires_token)
    assert found.status == "fail"
    assert found.details["requires_token"] is False
    assert "takes clients without a token" in found.finding
    reach = "every user of this machine" if address.startswith("127.") else "anyone who reaches it"
    assert reach in found.finding
    for command in ("RAY_AUTH_MODE=token", "--node-ip-address=127.0.0.1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"):
        assert command in found.fix


def test_a_cluster_whose_token_need_could_not_be_told_is_a_warning() -> None:
    why = "a client without a token got no answer within 8 s"
    found = judge_ray("10.0.0.5:6379", None, [Node("10.0.0.5", 8, 0)], token=True, requires_token=why)
    assert (found.status, found.details["requires_token"]) == ("warn", None)
    assert why in found.finding
    assert "RAY_AUTH_MODE=disabled ray status --address 10.0.0.5:6379" in found.fix


@pytest.mark.parametrize(
    ("name", "cmdline", "owner"),
    [
        ("gcs_server", ["/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server", "--port=6379"], "ray"),
        ("raylet", ["raylet"], "ray"),
        ("ray::IDLE", ["ray::IDLE"], "ray"),
        ("python", ["/venv/bin/python", "/venv/lib/site-packages/ray/dashboard/agent.py"], "ray"),
        ("mlflow", ["/venv/bin/python", "/venv/bin/mlflow", "server", "--host", "0.0.0.0"], "mlflow"),
        ("uvicorn", ["/venv/bin/python", "-m", "uvicorn", "mlflow.server.fastapi_app:app"], "mlflow"),
        ("elastune", ["/venv/bin/python", "/venv/bin/elastune", "ui"], "elastune"),
        ("python", ["python", "-m", "elastune.jobs.sweep", "spec.yaml"], "elastune"),
        ("python", ["python", "-m", "pytest", "tests/unit/test_array.py"], None),
        ("gray", ["gray", "--stray"], None),
    ],
)
def test_server_processes_are_told_apart(name: str, cmdline: list[str], owner: str | None) -> None:
    assert server_owner(name, cmdline) == owner


LOOPBACK_RAY = [
    Listener("ray", "gcs_server", 10, "127.0.0.1", 6379),
    Listener("ray", "raylet", 11, "::1", 7000),
    Listener("ray", "raylet", 11, "::ffff:127.0.0.1", 7001),  # a dual-stack socket's IPv4 loopback
]


def test_mlflow_or_ui_sockets_beyond_loopback_are_a_warning() -> None:
    assert judge_listeners([]).status == "ok"
    assert judge_listeners(LOOPBACK_RAY).status == "ok"
    exposed = judge_listeners([*LOOPBACK_RAY, Listener("mlflow", "mlflow", 12, "0.0.0.0", 5000)])
    assert exposed.status == "warn"
    assert "mlflow mlflow on 0.0.0.0:5000 (every interface)" in exposed.finding
    assert "mlflow server --host 127.0.0.1" in exposed.fix and "ray start" not in exposed.fix
    public = judge_listeners([Listener("elastune", "elastune", 13, "192.168.1.20", 8710)])
    assert (public.status, "192.168.1.20:8710" in public.finding) == ("warn", True)


@pytest.mark.parametrize("ip", ["0.0.0.0", "::", "192.168.1.20"])
def test_any_ray_socket_beyond_loopback_is_a_failure(ip: str) -> None:
    mlflow = Listener("mlflow", "mlflow", 12, "0.0.0.0", 5000)
    found = judge_listeners([*LOOPBACK_RAY, mlflow, Listener("ray", "raylet", 11, ip, 7002)])
    assert found.status == "fail"
    assert found.finding.startswith("listening beyond loopback: ray raylet on ")  # Ray's first: it is what fails
    assert "--node-ip-address=127.0.0.1" in found.fix and "RAY_AUTH_MODE=token" in found.fix
    assert "mlflow server --host 127.0.0.1" in found.fix  # and the warning's fix beside it


def test_ray_temp_folder_verdicts() -> None:
    def folder(mode: int, owner: int = 1000, closed_by: str | None = None) -> TempFolder:
        return TempFolder("/tmp/ray", "the default", True, mode, owner, 1000, closed_by)

    assert judge_ray_temp([TempFolder("/tmp/ray", "the default", False, uid=1000)]).status == "ok"
    assert judge_ray_temp([folder(0o1777)]).status == "ok"  # sticky: others cannot replace its files
    assert judge_ray_temp([folder(0o755)]).status == "ok"
    assert judge_ray_temp([folder(0o777, owner=0)]).status == "warn"  # root's, but open to all
    assert judge_ray_temp([folder(0o777, closed_by="/home/me")]).status == "ok"  # nobody else gets in
    shared = judge_ray_temp([folder(0o777)])
    assert shared.status == "warn"
    assert "/tmp/ray (the default) is writable by every user and lacks the sticky bit" in shared.finding
    assert "ray_current_cluster" in shared.finding
    assert "`chmod +t /tmp/ray`" in shared.fix and "RAY_TMPDIR" in shared.fix
    foreign = judge_ray_temp([folder(0o755, owner=1001)])
    assert (foreign.status, "belongs to another user (uid 1001)" in foreign.finding) == ("warn", True)
    assert "chmod +t" not in foreign.fix  # their folder: the sticky bit is theirs to clear


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder under /tmp that other users may enter (pytest's own tmp_path is under a 0700 one)."""
    folder = Path(tempfile.mkdtemp(prefix="elastune-doctor-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_ray_temp_folder_facts_from_the_file_system(open_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ray_temp = open_folder / "ray"
    ray_temp.mkdir()
    ray_temp.chmod(0o777)  # as Ray creates /tmp/ray
    monkeypatch.setenv("RAY_TMPDIR", str(open_folder))
    found = check_ray_temp()  # also any running Ray's --temp-dir: this folder's verdict is read from the text
    assert found.status == "warn", found
    assert f"{ray_temp} (RAY_TMPDIR) is writable by every user and lacks the sticky bit" in found.finding
    assert {"path": str(ray_temp), "source": "RAY_TMPDIR"}.items() <= found.details["folders"][0].items()

    def verdict() -> str:
        return judge_ray_temp([temp_folder(ray_temp, "RAY_TMPDIR")]).status

    ray_temp.chmod(0o1777)
    assert verdict() == "ok"  # the sticky bit: only a file's owner may replace it
    ray_temp.chmod(0o777)
    open_folder.chmod(0o700)  # a folder of one's own above it: nobody else gets in
    assert temp_folder(ray_temp, "RAY_TMPDIR").closed_by == str(open_folder)
    assert verdict() == "ok"


def test_the_fix_keeps_each_command_whole_on_100_columns() -> None:
    findings = [
        judge_ray("127.0.0.1:6379", None, [Node("127.0.0.1", 2, 0)], token=False),
        judge_listeners([Listener("ray", "gcs_server", 10, "0.0.0.0", 6379), Listener("mlflow", "m", 1, "::", 5)]),
        judge_ray_temp([TempFolder("/tmp/ray", "the default", True, 0o777, 0, 1000)]),
        judge_precision({"fp32": 1e-4, "bf16": 0.9e-4, "fp16": 22e-4}, ("avx2",)),
    ]
    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    console.print(doctor_table(findings, 100))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    shown = "\n".join(lines)
    assert "…" not in shown  # nothing cut off
    for finding in findings:
        for command in re.findall(r"`([^`]*)`", finding.fix):
            assert any(f"`{command}`" in line for line in lines), (command, shown)


def test_the_table_escapes_markup_and_drops_escape_sequences() -> None:
    hostile = Finding("ray", "fail", "GCS said [/bold] \x1b]0;pwned\x07\x1b[31mred", "[bold]fix[/bold]")
    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    console.print(doctor_table([hostile], 100))  # a markup error here would raise
    shown = console.export_text()
    assert "\x1b" not in shown and "\x07" not in shown
    assert "GCS said [/bold] ]0;pwned[31mred" in shown and "[bold]fix[/bold]" in shown


def test_store_verdicts() -> None:
    sqlite = "sqlite:////data/mlflow.db"
    assert judge_store(sqlite, None, exists=True, nodes=1).status == "ok"
    assert judge_store(sqlite, None, exists=False, nodes=0).status == "ok"
    shared = judge_store(sqlite, None, exists=True, nodes=3)
    assert shared.status == "warn"
    assert "3 nodes" in shared.finding and "mlflow server" in shared.fix
    assert judge_store("http://10.0.0.5:5000", None, exists=True, nodes=3).status == "ok"
    down = judge_store("http://127.0.0.1:5000", "no MLflow server answers there", exists=True, nodes=0)
    assert (down.status, "mlflow server --host 127.0.0.1" in down.fix) == ("fail", True)


def test_gpu_verdicts() -> None:
    assert judge_gpus(None, [], None).status == "ok"  # a CPU build: none, and nothing wrong
    assert judge_gpus("12.4", [], None).status == "warn"  # a CUDA build that sees no device
    free = {"index": 0, "name": "H100", "free_bytes": 70 * GiB, "total_bytes": 80 * GiB}
    full = {"index": 1, "name": "H100", "free_bytes": 1 * GiB, "total_bytes": 80 * GiB}
    fine = judge_gpus("12.4", [free], 1.0)
    assert fine.status == "ok"
    assert "cuda:0 H100: 70.00 GiB free of 80.00 GiB; Ray declares 1 GPU(s)" in fine.finding
    held = judge_gpus("12.4", [free, full], 2.0)
    assert (held.status, "cuda:1 is nearly full" in held.finding) == ("warn", True)
    assert judge_gpus("12.4", [free], 0.0).status == "warn"  # Ray would give trials no GPU


def test_a_slow_half_precision_is_left_out_of_the_menu() -> None:
    flags = ("avx2", "avx512_bf16")
    fast = judge_precision({"fp32": 1e-4, "bf16": 0.5e-4, "fp16": 1.2e-4}, flags)
    assert fast.status == "ok"
    assert "bf16 0.5x, fp16 1.2x" in fast.finding and "avx512_bf16" in fast.finding
    slow = judge_precision({"fp32": 1e-4, "bf16": 0.9e-4, "fp16": 22e-4}, flags)
    assert slow.status == "warn"
    assert "fp16 is 22.0x slower than fp32" in slow.finding
    assert "leave fp16 out of a sweep's precision menu" in slow.fix
    assert "bf16" not in slow.fix
    broken = judge_precision({"fp32": 1e-4, "bf16": "no kernel", "fp16": 1e-4}, None)
    assert (broken.status, "bf16 cannot run (no kernel)" in broken.finding) == ("warn", True)


def test_home_verdicts(tmp_path: Path) -> None:
    assert judge_home(tmp_path, True, None).status == "ok"
    refused = judge_home(tmp_path, True, f"cannot create a file in {tmp_path} (Permission denied)")
    assert refused.status == "fail"
    assert f"ELASTUNE_HOME={tmp_path}" in refused.finding and "export ELASTUNE_HOME" in refused.fix


# -- the time limit


def test_a_check_past_its_limit_fails_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(doctor.LIMITS_S, "home", 0.05)
    release = threading.Event()

    def stuck() -> Finding:
        release.wait(30)
        return Finding("home", "ok", "late")

    try:
        found = doctor.within("home", stuck)
    finally:
        release.set()
    assert (found.status, found.finding) == ("fail", "no answer within 0.05 s")


def test_a_check_that_breaks_is_a_failed_check() -> None:
    def broken() -> Finding:
        raise OSError("disk on fire")

    found = doctor.within("home", broken)
    assert found.status == "fail"
    assert "OSError: disk on fire" in found.finding


# -- the command


def test_a_new_store_is_checked_without_creating_it(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    # `ports` judges whatever else listens on this machine (another user's Ray): nothing else may fail
    assert set(report["failed"]) <= {"ports"} and code == (1 if report["failed"] else 0)
    checks = {f["check"]: f for f in report["findings"]}
    assert list(checks) == ["ray", "ports", "ray temp", "mlflow", "gpus", "cpu precision", "home"]
    assert checks["mlflow"][
        "finding"
    ] == f"sqlite:///{here / 'mlflow.db'}: no store yet; the first sweep creates it " + ("(its folder is writable)")
    ratios = checks["cpu precision"]["details"]["ratio_to_fp32"]
    assert set(ratios) == {"bf16", "fp16"} and all(r > 0 for r in ratios.values())
    assert list(here.iterdir()) == []  # no store, no home: nothing left behind


def test_an_existing_store_is_written_and_left_as_it_was(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{here / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("elastune")
    before = client.get_experiment(experiment).tags
    assert main(["doctor", "--tracking-uri", uri, "--format", "json"]) in (0, 1)  # 1: see `ports` above
    checks = {f["check"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert checks["mlflow"]["status"] == "ok"
    assert checks["mlflow"]["finding"] == f"{uri}: reachable and writable"
    assert client.get_experiment(experiment).tags == before


def test_the_table_fits_100_columns(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) in (0, 1)  # 1: `ports` judges what else listens here (see above)
    shown = capsys.readouterr().out
    assert "cpu precision" in shown
    assert max(len(line) for line in shown.splitlines()) <= 100


def test_a_store_that_does_not_answer_fails_with_exit_1(
    here: Path, capsys: pytest.CaptureFixture[str], unused_port: int
) -> None:
    assert main(["doctor", "--tracking-uri", f"http://127.0.0.1:{unused_port}", "--format", "json"]) == 1
    said = capsys.readouterr()
    report = json.loads(said.out)
    assert [c for c in report["failed"] if c != "ports"] == ["mlflow"]
    assert "no MLflow server answers there" in report["findings"][3]["finding"]
    assert "check(s) failed:" in said.err and "mlflow" in said.err


def test_a_home_under_a_file_fails_with_its_fix(
    here: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "file").write_text("")
    monkeypatch.setenv("ELASTUNE_HOME", str(here / "file" / "home"))
    assert main(["doctor", "--format", "json"]) == 1
    home = json.loads(capsys.readouterr().out)["findings"][-1]
    assert home["status"] == "fail"
    assert f"{here / 'file'} is a file, not a folder" in home["finding"]
    assert "export ELASTUNE_HOME" in home["fix"]


def test_a_read_only_home_fails_with_its_fix(here: Path) -> None:
    home = here / "home"
    home.mkdir()
    home.chmod(0o500)
    # Root writes through a folder's permissions (CAP_DAC_OVERRIDE): as root, the command runs without
    # that capability, as any other user would.
    without_override = ["--bounding-set=-dac_override", "--inh-caps=-dac_override"]
    prefix = ["setpriv", *without_override] if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: the folder's permissions would not apply")
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "elastune.cli", "doctor", "--format", "json"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        home.chmod(0o700)
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)["findings"][-1]
    assert (found["check"], found["status"]) == ("home", "fail")
    assert f"cannot create a file in {home} (Permission denied)" in found["finding"]
    assert "chmod u+w" in found["fix"]
    assert re.search(r"check\(s\) failed: (ports, )?home", done.stderr)  # ports: what else listens here


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--address", "head.example:port"], {}, "--address='head.example:port': is not HOST:PORT"),
        (["--address", "ray://10.0.0.5:10001"], {}, "--address='ray://10.0.0.5:10001'"),
        (["--address", "127.0.0.1:70000"], {}, "--address='127.0.0.1:70000'"),
        ([], {"RAY_ADDRESS": "auto"}, "--address (from $RAY_ADDRESS)='auto'"),
        (["--tracking-uri", "mlflow.db"], {}, "--tracking-uri='mlflow.db': not a tracking URI"),
        (["--tracking-uri", "http://host:port"], {}, "--tracking-uri='http://host:port': the port is not a number"),
    ],
)
def test_malformed_input_exits_2_naming_the_flag(
    here: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["doctor", *args]) == 2
    said = capsys.readouterr()
    assert expected in said.err, said.err
    assert said.out == ""  # refused before any check ran
    assert list(here.iterdir()) == []


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
