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

Against a real Ray that wants a token this client lacks: tests/integration/test_cluster_token.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import subprocess
import sys
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
