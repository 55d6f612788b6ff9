"""Several Ray clusters on one machine: what elastune says when it cannot tell which one is meant,
or when the one it would join refuses this client, said once, whole, with the fix.

- Ray's "Found multiple active Ray instances" error, kept whole on one line with the flag to pass;
- `auto` (Ray's pick of any cluster on the machine, another user's included) refused at once,
  naming the clusters Ray sees (`ray.init` would join one and, where it wants another token, log
  InvalidAuthToken every second for minutes); a cluster the UI would join that refuses this
  client's token stops `elastune ui` at start;
- every command that takes a cluster address says, in --help, that HOST:PORT works and what
  `auto` does;
- `elastune doctor`'s fixes are never cut or broken, on a 100-column terminal or a narrower one.

The tests marked integration start a real Ray with token auth, in a process of their own, stopped
(and anything of it killed) when the module ends.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.cli.doctor import print_findings
from elastune.cluster import AUTO_FIX, auto_problem, connection_error_text
from elastune.doctor.findings import Finding, Node, judge_precision, judge_ray
from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]

# Ray 2.60's own text (ray/_private/services.py, canonicalize_bootstrap_address_or_die), for a
# machine with many clusters: long enough that a display cutting it at 200 or 300 characters loses
# its fix.
ADDRESSES = [f"127.0.0.1:{6379 + i}" for i in range(12)]
SEVERAL = (
    f"Found multiple active Ray instances: {set(ADDRESSES)}. Please specify the one to connect to by setting "
    "the `--address` flag or `RAY_ADDRESS` environment variable."
)


def one_line(text: str) -> str:
    """`text` as a reader sees it, whatever the width: rich's wrapping and table borders dropped."""
    return " ".join(text.replace("│", " ").split())


# -- Ray's errors, whole


def test_several_clusters_are_named_with_the_flag_that_picks_one() -> None:
    said = connection_error_text(ConnectionError(SEVERAL), flag="--cluster-address")
    assert "\n" not in said and len(said) > 300  # whole: longer than any cut a display used to make
    assert f"Ray found {len(ADDRESSES)} clusters on this machine" in said
    assert all(address in said for address in ADDRESSES)
    assert said.endswith(
        "pass --cluster-address HOST:PORT naming your cluster's GCS address (`ray status` on its head prints it), "
        "or set RAY_ADDRESS=HOST:PORT"
    )


def test_any_other_ray_error_is_kept_whole_on_one_line() -> None:
    text = "Failed to connect to GCS at 10.0.0.5:6379.\n" + "x" * 400 + "\nStart the cluster with `ray start --head`."
    said = connection_error_text(RuntimeError(text))
    assert "\n" not in said and said.endswith("Start the cluster with `ray start --head`.")
    assert len(connection_error_text("y" * 10_000)) == 2000  # only a runaway text is bounded


# -- `auto`


def test_auto_is_refused_naming_the_clusters_ray_sees_here() -> None:
    problem = auto_problem(["127.0.0.1:6379", "10.0.0.5:6379", "127.0.0.1:6379"])
    assert str(problem) == (
        "--address='auto': `auto` makes Ray join whichever cluster it finds on this machine, another user's "
        "included, and send it this client's Ray token; it finds 2 here (10.0.0.5:6379, 127.0.0.1:6379); "
        f"{AUTO_FIX}"
    )
    assert not problem.refuses_token  # nothing was asked of any of them


def test_auto_without_a_cluster_says_how_to_start_one() -> None:
    problem = auto_problem([])
    assert "it finds none here" in problem.what and "ray start --head" in problem.fix


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["doctor", "--address", "auto"], "--address='auto': is Ray's discovery, not HOST:PORT: it joins whichever"),
        (["edo", "status", "--address", "auto"], "--address='auto': is Ray's discovery through its temp folder"),
    ],
)
def test_commands_that_refuse_auto_say_what_it_does(
    argv: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(argv) == 2
    said = one_line(capsys.readouterr().err)
    assert expected in said and "another user's included" in said, said


# -- --help


@pytest.mark.parametrize("command", [["ui"], ["sweep"], ["doctor"], ["edo", "status"]])
def test_help_says_a_gcs_host_port_works_and_what_auto_does(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # typer's help panel: fewer wrapped lines to join
    assert main([*command, "--help"]) == 0
    said = one_line(capsys.readouterr().out)
    assert "GCS address HOST:PORT" in said or "GCS, e.g." in said, said
    assert "`auto`" in said and "on this machine, another user's included" in said, said


# -- doctor's fixes, whole


def findings() -> list[Finding]:
    loopback = "`export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (as the cluster was started) so Ray keeps 127.0.0.1"
    return [
        judge_ray("127.0.0.1:6379", ("the cluster there listens on loopback only", loopback), [], token=False),
        judge_ray("127.0.0.1:6379", None, [Node("127.0.0.1", 2, 0)], token=False),  # LOOPBACK_RAY's commands
        judge_precision({"fp32": 1e-4, "bf16": 0.9e-4, "fp16": 22e-4}, ("avx2",)),
    ]


@pytest.mark.parametrize("columns", [100, 80, 60, 40])
def test_doctor_never_cuts_or_breaks_a_fix_command(columns: int) -> None:
    console = Console(width=columns, record=True, file=io.StringIO(), color_system=None)
    print_findings(findings(), console)
    lines = console.export_text().splitlines()
    shown = "\n".join(lines)
    assert "…" not in shown
    commands = [c for f in findings() for c in re.findall(r"`[^`]*`", f.fix)]
    assert "`export RAY_AUTH_MODE=token RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`" in commands  # the widest
    for command in commands:
        assert any(command in line for line in lines), (columns, command, shown)
    if columns == 100:  # every fix fits the table: nothing below it
        assert max(len(line) for line in lines) <= 100 and "fix for" not in shown
    else:  # what did not fit is below the table, a fix a line, whole
        assert f"fix for ray: {findings()[1].fix}" in lines, shown


def test_doctor_on_a_100_column_terminal_keeps_every_command_whole(tmp_path: Path) -> None:
    """The command itself, as a user runs it on a 100-column terminal (a pseudo-terminal: rich sizes
    its output by COLUMNS there), with a cluster address nothing answers at: no line is cut, and no
    command in backticks is broken across lines (a line holds each command's both backticks)."""
    import pty

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    env = {**os.environ, "COLUMNS": "100", "LINES": "50", "ELASTUNE_HOME": str(tmp_path / "home"), "TERM": "dumb"}
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env.pop("RAY_ADDRESS", None)
    leader, follower = pty.openpty()
    doctor = subprocess.Popen(
        [sys.executable, "-m", "elastune.cli", "doctor", "--address", address],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    os.close(follower)
    out = b""
    with contextlib.suppress(OSError):  # EIO once the command has ended and its end is read
        while chunk := os.read(leader, 65536):  # read as it writes: a full pty would block it
            out += chunk
    os.close(leader)
    assert doctor.wait(timeout=300) == 1, doctor.stderr.read().decode() if doctor.stderr else ""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace")).replace("\r", "")
    lines = text.splitlines()
    assert "…" not in text
    assert f"{address}: nothing answers there" in one_line(text), text
    assert all(line.count("`") % 2 == 0 for line in lines), text
    table = [line for line in lines if line[:1] in "┏┃┡│├└"]
    assert table and max(len(line) for line in table) <= 100, text


# -- a real cluster that wants a token this client lacks

TOKEN_CLUSTER = """
import sys
from pathlib import Path
import ray
context = ray.init(address="local", num_cpus=1, _node_ip_address="127.0.0.1", include_dashboard=False,
                   _temp_dir=sys.argv[1], log_to_driver=False)
Path(sys.argv[2]).write_text(context.address_info["gcs_address"])
sys.stdin.read()
ray.shutdown()
"""


def tokenless_env(**extra: str) -> dict[str, str]:
    """This client as a user without the cluster's token runs it: auth off, no token variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    return {**env, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **extra}


@pytest.fixture(scope="module")
def token_cluster() -> Iterator[str]:
    """The GCS address of a Ray on 127.0.0.1 with token auth on, whose token this client lacks."""
    folder = Path(tempfile.mkdtemp(prefix="elastune-token-", dir="/tmp"))  # short: Ray's socket paths
    address_file = folder / "address"
    env = tokenless_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    driver = subprocess.Popen(
        [sys.executable, "-c", TOKEN_CLUSTER, str(folder / "ray"), str(address_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not address_file.is_file() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert driver.poll() is None and address_file.is_file(), driver.stderr.read().decode()[-3000:]
        yield address_file.read_text().strip()
    finally:
        with contextlib.suppress(OSError):
            assert driver.stdin is not None
            driver.stdin.close()  # the driver shuts its cluster down
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(timeout=60)
        from tests.integration.processes import kill_processes_naming

        kill_processes_naming(folder)
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.integration
def test_autos_candidates_are_the_clusters_ray_sees_on_this_machine(token_cluster: str) -> None:
    """compat.ray_auto_candidates, Ray's own discovery: it sees the cluster started here."""
    probe = "from elastune.compat import ray_auto_candidates; print(' '.join(ray_auto_candidates()))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=tokenless_env(), timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert token_cluster in done.stdout.split(), done.stdout


@pytest.mark.integration
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


@pytest.mark.integration
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
