"""The README's Web UI commands, pasted in order on a fresh machine (an empty HOME: no
~/.ray/auth_token): they start a Ray head whose job server and GCS refuse a client without the
token, and the UI they start reaches it. A sweep pointed at that head without the token is told so
at once (exit 2), not after half a minute of retries.

The README's lines run as written, with two kinds of additions a reader would not make: free ports
for every port Ray and the UI would otherwise take by default (another cluster may hold those on a
test machine), and a `--temp-dir` of its own, by which this test finds the head's processes to end
them. The README's closing `ray stop` is not run: it would end every Ray cluster on the machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.sweep_specs import tiny_spec, write_spec

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def readme_block(containing: str) -> list[str]:
    """The non-empty lines of the README's one ```bash block that contains `containing`."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"README.md should have one bash block with {containing!r}, has {len(found)}"
    return [line for line in found[0].splitlines() if line.strip()]


@pytest.fixture
def head_folder() -> Iterator[Path]:
    """A short folder for Ray's temp dir (its socket paths must stay under 108 bytes); on the way
    out, every process that names it (the head's) and their children are killed."""
    folder = Path(tempfile.mkdtemp(prefix="elastune-rt-", dir="/tmp"))
    try:
        yield folder
    finally:
        family: list[psutil.Process] = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(str(folder) in part for part in proc.info["cmdline"] or []):
                    family += [proc, *proc.children(recursive=True)]
        for proc in family:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(family, timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def test_the_readme_starts_a_token_auth_cluster_that_the_ui_reaches(
    head_folder: Path, tmp_path: Path, free_port: Callable[[], int], wait_until: Callable[..., None]
) -> None:
    lines = readme_block("ray start --head")
    (ui_line,) = [line for line in lines if "elastune ui" in line]
    assert lines[-1] == ui_line, "the UI runs last: it stays in the foreground"
    gcs, dashboard, ui = free_port(), free_port(), free_port()
    ports = {"port": gcs, "dashboard-port": dashboard, "ray-client-server-port": free_port()}
    ports |= {"dashboard-agent-listen-port": free_port(), "runtime-env-agent-port": free_port()}
    ports |= {"metrics-export-port": free_port(), "dashboard-agent-grpc-port": free_port()}
    extra = " ".join(f"--{name}={port}" for name, port in ports.items())
    script = []
    for line in lines[:-1]:
        command = line.split("#", 1)[0].rstrip().replace(".venv/bin/", f"{VENV_BIN}/")
        if "ray start --head" in command:
            command += f" {extra} --temp-dir={head_folder} --disable-usage-stats"
        script.append(command)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "ELASTUNE_", "MLFLOW_"))}
    env |= {"HOME": str(home), "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"}
    started = subprocess.run(
        ["bash", "-euc", "\n".join([*script, "env | grep ^RAY_AUTH_MODE= > exported"])],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]

    token_file = home / ".ray" / "auth_token"
    assert token_file.is_file() and token_file.stat().st_mode & 0o077 == 0  # created, readable by its owner only
    token = token_file.read_text().strip()
    assert token and (tmp_path / "exported").read_text().strip() == "RAY_AUTH_MODE=token"
    jobs = f"http://127.0.0.1:{dashboard}/api/jobs/"
    assert _status(jobs) == 401  # without the token the job server runs nothing
    assert _status(jobs, token) == 200
    assert _listeners(head_folder, dashboard) == {"127.0.0.1"}  # the job server: loopback only

    # A sweep aimed at the head without the token: told at once, nothing written or started.
    empty = tmp_path / "client"
    empty.mkdir()
    spec = write_spec(tmp_path / "tiny.yaml", tiny_spec())
    began = time.monotonic()
    refused = subprocess.run(
        [str(VENV_BIN / "elastune"), "sweep", str(spec), "--address", f"127.0.0.1:{gcs}"],
        cwd=empty, env={**env, "ELASTUNE_HOME": str(empty / "home")}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "requires token authentication" in refused.stderr and "RAY_AUTH_MODE=token" in refused.stderr
    assert time.monotonic() - began < 30 and list(empty.iterdir()) == []

    # The README's last line: the UI, in the same shell (RAY_AUTH_MODE=token, the token in ~/.ray).
    ui_command = ui_line.split("#", 1)[0].rstrip().replace(".venv/bin/", f"{VENV_BIN}/")
    ui_command += f" --port {ui} --ray-address http://127.0.0.1:{dashboard}"
    server = subprocess.Popen(
        ["bash", "-c", f"export RAY_AUTH_MODE=token\nexec {ui_command}"], cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: server.poll() is not None or _status(f"http://127.0.0.1:{ui}/api/health") == 200,
                   60, "the UI")  # fmt: skip
        assert _status(f"http://127.0.0.1:{ui}/api/jobs") == 200  # the UI lists the head's jobs with Ray's token
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


def _status(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def _listeners(folder: Path, port: int) -> set[str]:
    """The addresses the head's processes listen on at `port`."""
    found = set()
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(str(folder) in part for part in proc.info["cmdline"] or []):
                found |= {
                    c.laddr.ip for c in proc.net_connections("inet") if c.status == "LISTEN" and c.laddr.port == port
                }
    return found
