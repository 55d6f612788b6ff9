"""The cluster commands of docs/clusters.md (the README's tour points there), pasted in order on a
fresh machine (an empty HOME: no ~/.ray/auth_token): the first block starts a Ray head whose job
server and GCS refuse a client without the token and whose every port listens on 127.0.0.1 only;
the second block, from a new shell, runs a sweep on it with `--address` and as a Ray job (`ray job
submit` with the venv's python by its path, as pasted); the UI the first block starts reaches it. A
sweep pointed at the head without the token (or with another) is told so at once (exit 2).

The page's lines run as written, in a folder laid out like the repository (`.venv` links to this
venv, `search_spaces/dlrm_quick.yaml` is a tiny spec so the sweeps take seconds), with these
additions a reader would not make: a free port for every port Ray and the UI would otherwise take
by default (another cluster may hold those on a test machine), `--block` so the head stays in this
test's own process group, and a `RAY_TMPDIR` of its own (Ray's /tmp/ray, where `ray start` records
the cluster for the UI to find), by which the test also finds the head's processes to end them.
The page's `ray stop` is not run: it would end every Ray cluster this user runs on the machine,
other tests' and other people's included; the test kills its own head instead.
"""

from __future__ import annotations

import contextlib
import json
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

from tests.integration.processes import kill_processes_naming
from tests.integration.sweep_specs import tiny_spec, write_spec

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "docs" / "clusters.md"  # the guide that holds the commands
VENV = Path(sys.executable).parent.parent
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def doc_block(path: Path, containing: str) -> list[str]:
    """The commands of the one ```bash block of the page at `path` that contains `containing`:
    continuation lines joined, comments and blank lines dropped. Fails if the block moved or was split."""
    blocks = re.findall(r"```bash\n(.*?)```", path.read_text(), re.S)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"{path.name} should have one bash block with {containing!r}, has {len(found)}"
    joined = found[0].replace("\\\n", " ")
    return [re.sub(r"\s+#[^'\"]*$", "", line).strip() for line in joined.splitlines() if line.strip()]


@pytest.fixture
def head_folder() -> Iterator[Path]:
    """A short folder for Ray's temp dir (its socket paths must stay under 108 bytes); on the way
    out, every process that names it (the head's) and their children are killed."""
    folder = Path(tempfile.mkdtemp(prefix="elastune-rt-", dir="/tmp"))
    try:
        yield folder
    finally:
        kill_processes_naming(folder)
        shutil.rmtree(folder, ignore_errors=True)


def test_the_guide_starts_a_token_auth_loopback_cluster_that_its_commands_use(
    head_folder: Path, tmp_path: Path, free_port: Callable[[], int], wait_until: Callable[..., None]
) -> None:
    head_lines = doc_block(CLUSTERS, "ray get-auth-token --generate")  # the page's other `ray start`s do not make one
    client_lines = doc_block(CLUSTERS, "ray job submit --address http://127.0.0.1:8265")
    assert any("ray start --head" in line for line in head_lines)
    (submit,) = [line for line in client_lines if "ray job submit" in line]
    assert re.search(r'--\s+"\$PWD/\.venv/bin/python" -m elastune\.jobs\.sweep ', submit), "the venv's python, by path"
    (ui_line,) = [line for line in head_lines if "elastune ui" in line]
    assert head_lines[-1] == ui_line, "the UI runs last: it stays in the foreground"
    assert client_lines[-1] == ".venv/bin/ray stop", "the client block ends the cluster last"

    repo = tmp_path / "repo"  # laid out like a checkout: the page's relative paths hold
    (repo / "search_spaces").mkdir(parents=True)
    (repo / ".venv").symlink_to(VENV)
    write_spec(repo / "search_spaces" / "dlrm_quick.yaml", tiny_spec(budget={"max_trials": 1, "max_concurrent": 1}))
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "ELASTUNE_", "MLFLOW_"))}
    env |= {"HOME": str(home), "PATH": f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    env |= {"DASHBOARD_METRIC_PORT": str(free_port()), "AUTOSCALER_METRIC_PORT": str(free_port())}
    env |= {"RAY_TMPDIR": str(head_folder)}  # Ray's /tmp/ray, where the UI finds the cluster, of its own
    gcs, dashboard, ui = free_port(), free_port(), free_port()
    ports = {"port": gcs, "dashboard-port": dashboard, "ray-client-server-port": free_port()}
    ports |= {"dashboard-agent-listen-port": free_port(), "runtime-env-agent-port": free_port()}
    ports |= {"metrics-export-port": free_port(), "dashboard-agent-grpc-port": free_port()}
    extra = " ".join(f"--{name}={port}" for name, port in ports.items())

    script = list(head_lines[:-1])
    (start,) = [i for i, line in enumerate(script) if "ray start --head" in line]
    script[start] = f"exec {script[start]} {extra} --disable-usage-stats --block"
    log = tmp_path / "head.log"
    with log.open("w") as out:
        head = subprocess.Popen(
            ["bash", "-euc", "\n".join(script[: start + 1])], cwd=repo, env=env,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        jobs = f"http://127.0.0.1:{dashboard}/api/jobs/"
        wait_until(lambda: head.poll() is not None or _status(jobs) == 401, 90, "the head's job server")
        assert head.poll() is None, log.read_text()[-3000:]

        token_file = home / ".ray" / "auth_token"
        assert token_file.is_file() and token_file.stat().st_mode & 0o077 == 0  # created, owner-only
        token = token_file.read_text().strip()
        assert token and _status(jobs, token) == 200  # 401 without the token (above), 200 with it
        listening = _listening(head.pid)
        assert gcs in {port for _, port in listening} and dashboard in {port for _, port in listening}
        assert {ip for ip, _ in listening} <= LOOPBACK, listening  # GCS, raylet, agents: loopback only

        # Point 9: a sweep aimed at the head without the token, with another, or with the token but
        # without the loopback setting (Ray would dial this machine's network address): told at once.
        spec = write_spec(tmp_path / "tiny.yaml", tiny_spec())
        cases = [
            ({}, ["requires token authentication", "export RAY_AUTH_MODE=token", "ray get-auth-token"]),
            ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32}, ["token this client sent is not the cluster's"]),
            ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}, ["export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"]),
        ]
        for number, (case, says) in enumerate(cases):
            client = tmp_path / f"client-{number}"
            client.mkdir()
            began = time.monotonic()
            refused = subprocess.run(
                [str(VENV / "bin" / "elastune"), "sweep", str(spec), "--address", f"127.0.0.1:{gcs}"],
                cwd=client, env={**env, **case, "HOME": str(client), "ELASTUNE_HOME": str(client / "el")},
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            took = time.monotonic() - began
            assert refused.returncode == 2, refused.stderr[-3000:]
            lines = [line for line in refused.stderr.splitlines() if line.strip()]
            assert len(lines) == 1, refused.stderr  # one line: no retries, no Ray log
            assert lines[0].startswith(f"error: --address='127.0.0.1:{gcs}': ")
            assert all(part in lines[0] for part in says), lines[0]
            # the one line above is what fails on old code (Ray retried 25 s, 20 lines); 20 s allows a loaded machine
            assert took < 20 and list(client.iterdir()) == [], (number, took, list(client.iterdir()))  # nothing written

        # The second block, in a new shell: a sweep with --address, then the same as a Ray job.
        client_script = [_on_ports(line, gcs, dashboard) for line in client_lines[:-1]]  # not `ray stop`
        ran = subprocess.run(
            ["bash", "-euc", "\n".join(client_script)], cwd=repo, env=env, capture_output=True, text=True, timeout=240
        )
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        assert re.search(r"Job '\S+' succeeded", ran.stdout), ran.stdout[-3000:]
        assert (repo / "mlflow.db").is_file()
        listening = _listening(head.pid)
        assert {ip for ip, _ in listening} <= LOOPBACK, listening  # workers and the job's driver too

        # The first block's last line: the UI, in the same shell (RAY_AUTH_MODE=token, the token in ~/.ray).
        # The page's cluster serves jobs at Ray's default http://127.0.0.1:8265, the UI's default; this
        # test's cluster takes other ports (it must not collide), so the UI is told where, never left to
        # find a cluster through Ray's shared discovery file.
        ui_command = f"{ui_line} --port {ui} --ray-address http://127.0.0.1:{dashboard}"
        exports = "\n".join(line for line in script[:start] if line.startswith("export "))
        server = subprocess.Popen(
            ["bash", "-euc", f"{exports}\nexec {ui_command}"], cwd=repo, env=env,
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
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)


def _on_ports(line: str, gcs: int, dashboard: int) -> str:
    """A line of the page with Ray's default ports swapped for this test's."""
    return line.replace("127.0.0.1:6379", f"127.0.0.1:{gcs}").replace("127.0.0.1:8265", f"127.0.0.1:{dashboard}")


def _status(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0


def _listening(group: int) -> set[tuple[str, int]]:
    """The (address, port) pairs that the processes of process group `group` listen on."""
    found: set[tuple[str, int]] = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(proc.pid) == group:
                for conn in proc.net_connections("inet"):
                    if conn.status == psutil.CONN_LISTEN:
                        found.add((conn.laddr.ip, conn.laddr.port))
    return found


def test_a_sweep_without_address_starts_a_ray_that_listens_on_loopback_only(head_folder: Path, tmp_path: Path) -> None:
    """docs/clusters.md: with no `--address`, a sweep starts "a new local Ray whose every port listens
    on 127.0.0.1". Ray would swap 127.0.0.1 for the machine's network address and listen on every
    interface; the sweep keeps it."""
    probe = (
        "import json, psutil, ray\n"
        "from elastune.tuning.sweep import SweepOptions, connect_ray\n"
        "connect_ray(SweepOptions(local_cpus=1))\n"
        "ray.get(ray.remote(lambda: 1).remote())\n"  # a worker too
        "found = set()\n"
        "for proc in psutil.Process().children(recursive=True):\n"
        "    try:\n"
        "        found |= {c.laddr.ip for c in proc.net_connections('inet') if c.status == psutil.CONN_LISTEN}\n"
        "    except psutil.Error:\n"
        "        pass\n"
        "print(json.dumps(sorted(found)))\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "ELASTUNE_"))}
    env |= {"HOME": str(tmp_path), "RAY_TMPDIR": str(head_folder)}
    ran = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    listening = set(json.loads(ran.stdout.strip().splitlines()[-1]))
    assert listening and listening <= LOOPBACK, listening
