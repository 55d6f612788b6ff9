"""The facts `elastune doctor` checks, gathered from the machine, the cluster and the store, each
turned into a Finding by its pure judge (findings.py). Nothing here writes anything it does not
remove again; heavy imports (Ray, MLflow, torch, psutil) wait until their check runs."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from elastune.cluster import address_problem, connection_error_text
from elastune.config import elastune_home
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
from elastune.tracking.uri import is_http, server_problem, sqlite_path

__all__ = [
    "check_gpus",
    "check_home",
    "check_ports",
    "check_precision",
    "check_ray",
    "check_ray_temp",
    "check_store",
    "requires_token",
]

GCS_TIMEOUT_S = 3.0
SERVER_TIMEOUT_S = 5.0
# A client without a token in a process of its own (see `requires_token`): importing Ray is most of it.
TOKENLESS_TIMEOUT_S = 8.0


def check_ray(address: str | None) -> Finding:
    """The cluster at `address` (HOST:PORT, already checked for form): reachable, the token, its nodes."""
    token = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    if address is None:
        return judge_ray(None, None, [], token)
    problem = address_problem(address)
    if problem is not None:
        return judge_ray(address, (problem.what, problem.fix), [], token)
    from elastune.compat import cluster_nodes

    try:
        nodes = cluster_nodes(address, timeout_s=GCS_TIMEOUT_S)
    except Exception as exc:  # something listens there, but does not answer as a Ray GCS
        reason = connection_error_text(exc)  # whole: Ray's text ends with its fix
        return judge_ray(
            address,
            (f"something listens there but does not answer as Ray's GCS ({reason})", _GCS_FIX),
            [],
            token,
        )
    found = [Node(n["address"], n["resources"].get("CPU", 0.0), n["resources"].get("GPU", 0.0)) for n in nodes]
    # A client that sent no token and was answered is the answer already; one that sent a token asks again without.
    return judge_ray(address, None, found, token, requires_token(address) if token else False)


# Run in a child: Ray reads RAY_AUTH_MODE once per process, so this one cannot ask both ways. Exit 0:
# the nodes were read without a token; 3: refused for the want of one.
_TOKENLESS = """
import sys
from ray.exceptions import AuthenticationError
from elastune.compat import cluster_nodes
try:
    cluster_nodes(sys.argv[1], timeout_s=float(sys.argv[2]))
except AuthenticationError:
    sys.exit(3)
"""


def requires_token(address: str) -> bool | str:
    """Whether the cluster at `address` refuses a client that sends no token; a string says why
    that could not be told. The child gets no token: auth mode off, no token variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_TOKEN")}
    env["RAY_AUTH_MODE"] = "disabled"
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TOKENLESS, address, str(GCS_TIMEOUT_S)],
            env=env,
            capture_output=True,
            text=True,
            timeout=TOKENLESS_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"a client without a token got no answer within {TOKENLESS_TIMEOUT_S:g} s"
    if done.returncode in (0, 3):
        return done.returncode == 3
    said = done.stderr.strip().splitlines()
    return f"a client without a token failed: {connection_error_text(said[-1]) if said else f'exit {done.returncode}'}"


_GCS_FIX = "give the head's GCS address (HOST:6379 by default, `ray status` on the head shows it)"


def check_ports() -> Finding:
    """Listening TCP sockets of Ray, MLflow and elastune processes on this machine."""
    import psutil

    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:  # macOS lists other processes' sockets to root only
        return Finding(
            "ports", "warn", "this user may not list the machine's sockets", "run `sudo elastune doctor` to see them"
        )
    owners: dict[int, tuple[str, str] | None] = {}
    listeners = set()
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or conn.pid is None:  # no pid: another user's process
            continue
        if conn.pid not in owners:
            try:
                process = psutil.Process(conn.pid)
                name = process.name()
                owner = server_owner(name, process.cmdline())
                owners[conn.pid] = (owner, name) if owner else None
            except psutil.Error:  # gone meanwhile, or not ours to read
                owners[conn.pid] = None
        known = owners[conn.pid]
        if known is not None:
            listeners.add(Listener(known[0], known[1], conn.pid, conn.laddr.ip, conn.laddr.port))
    return judge_listeners(sorted(listeners, key=lambda s: (s.owner, s.process, s.port)))


# Ray's temp folder as Ray computes it for a process started here (ray._common.utils'
# get_default_ray_temp_dir, Ray 2.60): $RAY_TMPDIR/ray, else $TMPDIR/ray on Linux, else /tmp/ray.
def default_ray_temp() -> tuple[Path, str]:
    if "RAY_TMPDIR" in os.environ:
        return Path(os.environ["RAY_TMPDIR"]) / "ray", "RAY_TMPDIR"
    if sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        return Path(os.environ["TMPDIR"]) / "ray", "TMPDIR"
    return Path("/tmp/ray"), "the default"


_TEMP_DIR = re.compile(r"--temp[-_]dir[= ](\S+)")


def check_ray_temp() -> Finding:
    """Ray's default temp folder here, and the temp folders of the Ray processes running here
    (their `--temp-dir`): who may write to each."""
    import psutil

    default, source = default_ray_temp()
    folders: dict[str, str] = {str(default): source}
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if server_owner(process.info["name"] or "", cmdline) != "ray":
            continue
        for found in _TEMP_DIR.findall(" ".join(cmdline)):
            folders.setdefault(os.path.normpath(found), "--temp-dir of a running Ray")
    return judge_ray_temp([temp_folder(Path(path), why) for path, why in folders.items()])


def temp_folder(path: Path, source: str) -> TempFolder:
    try:
        info = path.stat()
    except OSError:
        return TempFolder(str(path), source, exists=False, uid=os.getuid())
    closed_by = None
    for folder in (path, *path.parents):  # other users need o+x on every folder on the way in
        try:
            above = folder.stat()
        except OSError:
            break
        if not above.st_mode & stat.S_IXOTH and above.st_uid in (os.getuid(), 0):
            closed_by = str(folder)
            break
    return TempFolder(
        str(path), source, True, stat.S_IMODE(info.st_mode), info.st_uid, os.getuid(), closed_by=closed_by
    )


def check_store(uri: str, nodes: int) -> Finding:
    """Write and remove a tag in the MLflow store at the resolved `uri`; a SQLite file that is not
    there yet is not created: its folder must be writable, as the first sweep will create it."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        return judge_store(uri, unwritable(path.parent), exists=False, nodes=nodes)
    if is_http(uri):
        problem = server_problem(uri, SERVER_TIMEOUT_S)
        if problem is not None:
            return judge_store(uri, problem, exists=True, nodes=nodes)
    from elastune.tracking.mlflow import check_writable

    try:
        check_writable(uri)
    except Exception as exc:  # MLflow's errors name the cause (read-only, a schema to migrate, a 403)
        text = str(exc).strip()
        reason = text.splitlines()[0][:300] if text else type(exc).__name__
        return judge_store(uri, f"cannot write to it ({reason})", exists=True, nodes=nodes)
    return judge_store(uri, None, exists=True, nodes=nodes)


def check_gpus(ray_gpus: float | None) -> Finding:
    """GPUs torch sees here (through the device seam, training/probe.py) against Ray's count."""
    import torch

    from elastune.training.probe import cuda_devices

    return judge_gpus(torch.version.cuda, [asdict(d) for d in cuda_devices()], ray_gpus)


def check_precision() -> Finding:
    """One small matmul timed in fp32, bf16 and fp16 on this CPU: about a second in all."""
    from elastune.training.precision import cpu_speed_flags, matmul_seconds

    seconds: dict[str, float | str] = {}
    for precision in ("fp32", "bf16", "fp16"):
        try:
            seconds[precision] = matmul_seconds(precision)
        except RuntimeError as exc:  # no CPU kernel for the dtype in this torch build
            seconds[precision] = str(exc).splitlines()[0][:200]
    return judge_precision(seconds, cpu_speed_flags())


def check_home() -> Finding:
    home = elastune_home()
    return judge_home(home, "ELASTUNE_HOME" in os.environ, unwritable(home))


def unwritable(folder: Path) -> str | None:
    """Why no file can be created in `folder` (or, where it does not exist yet, in the nearest folder
    above it, which is where it would be created); None when one can. A file is made and removed:
    asking os.access would be wrong for root and on read-only mounts."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return f"cannot create a file in {existing} ({exc.strerror or exc})"
    return None
