"""What `elastune doctor` makes of the facts it gathered (gather.py): one `Finding` per check, each
with its fix. Pure functions of plain data, so every verdict is tested without a cluster, a store or
a GPU (tests/unit/test_doctor.py)."""

from __future__ import annotations

import ipaddress
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from elastune.units import human_bytes

__all__ = [
    "SLOW_RATIO",
    "Finding",
    "Listener",
    "Node",
    "TempFolder",
    "is_loopback",
    "judge_gpus",
    "judge_home",
    "judge_listeners",
    "judge_precision",
    "judge_ray",
    "judge_ray_temp",
    "judge_store",
    "server_owner",
]

Status = Literal["ok", "warn", "fail"]
# A half precision this many times slower than fp32 per matmul cannot win a sweep on this CPU.
SLOW_RATIO = 1.5
LOW_FREE = 0.1  # a GPU with less than this share free is held by someone else


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    finding: str
    fix: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # the figures behind it, for --format json
    seconds: float | None = None  # how long the check took (doctor.within sets it)


@dataclass(frozen=True)
class Node:
    address: str
    cpus: float
    gpus: float


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket of a Ray, MLflow or elastune process on this machine."""

    owner: str  # "ray", "mlflow" or "elastune"
    process: str
    pid: int
    ip: str
    port: int


@dataclass(frozen=True)
class TempFolder:
    """A folder Ray keeps its files in on this machine: where clients look for the cluster to join
    (`ray_current_cluster`), and its sessions' sockets and logs."""

    path: str
    source: str  # why it is Ray's: "RAY_TMPDIR", "the default", "--temp-dir of a running Ray"
    exists: bool
    mode: int = 0  # st_mode's permission bits (0o7777)
    owner_uid: int = 0
    uid: int = 0  # this user's
    closed_by: str | None = None  # it, or a folder above it, of this user or root that others cannot enter


# What to run for a Ray on this machine that only its users reach, and only with the token.
# Each command short enough to be shown whole in doctor's table on a 100-column terminal.
LOOPBACK_RAY = (
    "`ray stop`, then `export RAY_AUTH_MODE=token RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, "
    "`ray get-auth-token --generate` (once) and `ray start --head --node-ip-address=127.0.0.1`; every client "
    "needs `export RAY_AUTH_MODE=token` and the token"
)


# -- Ray


def judge_ray(
    address: str | None,
    problem: tuple[str, str] | None,
    nodes: list[Node],
    token: bool,
    requires_token: bool | str | None = None,
) -> Finding:
    """`problem` is (what, fix) when a driver could not use the cluster; `token`: this client sends
    Ray's token (RAY_AUTH_MODE=token); `requires_token`: whether the cluster refuses a client that
    sends none (a string: why that could not be told). A client without a token that read the
    cluster's nodes has its answer: it does not."""
    if address is None:
        return Finding(
            "ray",
            "ok",
            "no --address and no $RAY_ADDRESS: a sweep starts its own Ray on 127.0.0.1 (loopback only), "
            "which is fine on one machine",
            "for a cluster, pass --address HOST:6379 or export RAY_ADDRESS",
        )
    if problem is not None:
        return Finding("ray", "fail", f"{address}: {problem[0]}", problem[1])
    if not nodes:
        return Finding(
            "ray", "fail", f"{address}: the cluster has no live node", "start one: `ray start --head` on the head"
        )
    if not token:
        requires_token = False
    cpus, gpus = sum(n.cpus for n in nodes), sum(n.gpus for n in nodes)
    details = {
        "address": address,
        "nodes": len(nodes),
        "cpus": cpus,
        "gpus": gpus,
        "token_auth": token,
        "requires_token": requires_token if isinstance(requires_token, bool) else None,
    }
    found = f"{address}: {len(nodes)} node(s) with {_count(cpus)} CPU(s) and {_count(gpus)} GPU(s)"
    if requires_token is True:
        return Finding("ray", "ok", f"{found}; it requires a token, and takes this client's", details=details)
    if requires_token is False:
        # Loopback is no shelter: every user of the machine reaches 127.0.0.1.
        reach = "every user of this machine" if is_loopback(address.rpartition(":")[0]) else "anyone who reaches it"
        return Finding(
            "ray",
            "fail",
            f"{found}; it takes clients without a token: {reach} can run code there as the user who started it",
            f"restart it with token auth: {LOOPBACK_RAY}; for a multi-node cluster, RAY_AUTH_MODE=token and the "
            "head's token on every node, and a firewall on its ports",
            details,
        )
    return Finding(
        "ray",
        "warn",
        f"{found}; it takes this client's token, but whether it refuses a client without one could not be "
        f"told ({requires_token or 'no answer'})",
        f"`RAY_AUTH_MODE=disabled ray status --address {address}` must be refused; if it is not, restart the "
        f"cluster with token auth: {LOOPBACK_RAY}",
        details,
    )


# -- Listening sockets


def server_owner(name: str, cmdline: list[str]) -> str | None:
    """Which of Ray, MLflow or elastune a process belongs to, by its name and command line."""
    text = " ".join(cmdline).lower()
    if name in ("gcs_server", "raylet") or name.startswith("ray::") or "/ray/" in text:
        return "ray"
    if "mlflow" in text:
        return "mlflow"
    if "elastune" in name or any(part.rsplit("/", 1)[-1] == "elastune" for part in cmdline) or "elastune." in text:
        return "elastune"
    return None


def judge_listeners(listeners: list[Listener]) -> Finding:
    """A Ray socket beyond loopback fails: some of Ray's ports take no token even with token auth on
    (metrics, object transfers), so a Ray on one machine keeps to 127.0.0.1. An MLflow or elastune
    one is a warning: it may sit behind a proxy or (the UI) require a token of its own."""
    exposed = [s for s in listeners if not is_loopback(s.ip)]
    details = {"listening": [f"{s.owner} {s.process} (pid {s.pid}) {_where(s.ip, s.port)}" for s in listeners]}
    if not listeners:
        return Finding("ports", "ok", "no Ray, MLflow or elastune process listens on this machine", details=details)
    if not exposed:
        owners = sorted({s.owner for s in listeners})
        return Finding(
            "ports", "ok", f"{len(listeners)} socket(s) of {', '.join(owners)}, all on loopback", details=details
        )
    # Ray's first: they are what fails
    shown = sorted({(s.owner != "ray", f"{s.owner} {s.process} on {_where(s.ip, s.port)}") for s in exposed})
    listed = [text for _, text in shown]
    more = f" and {len(listed) - 4} more" if len(listed) > 4 else ""
    fixes = []
    if any(s.owner == "ray" for s in exposed):
        fixes.append(
            f"start Ray on loopback with token auth: {LOOPBACK_RAY}; a multi-node cluster cannot keep to "
            "loopback: firewall its ports to its nodes"
        )
    if any(s.owner != "ray" for s in exposed):
        fixes.append(
            "bind MLflow and the UI to 127.0.0.1 (`mlflow server --host 127.0.0.1`, `elastune ui --host "
            "127.0.0.1`), or put an authenticating proxy in front of MLflow"
        )
    status: Status = "fail" if any(s.owner == "ray" for s in exposed) else "warn"
    return Finding(
        "ports", status, f"listening beyond loopback: {'; '.join(listed[:4])}{more}", "; ".join(fixes), details
    )


def _where(ip: str, port: int) -> str:
    shown = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    return f"{shown} (every interface)" if ip in ("0.0.0.0", "::") else shown


# -- Ray's temp folder


def judge_ray_temp(folders: list[TempFolder]) -> Finding:
    """A folder that every user may write to without the sticky bit, or that another user owns,
    lets them replace what Ray keeps there: above all `ray_current_cluster`, which names the
    cluster a client without an address joins (and sends its token to)."""
    details = {
        "folders": [
            {
                "path": f.path,
                "source": f.source,
                "exists": f.exists,
                "mode": oct(f.mode),
                "owner_uid": f.owner_uid,
                "closed_by": f.closed_by,
            }
            for f in folders
        ]
    }
    shared, foreign = [], []
    for f in folders:
        if not f.exists:
            continue
        # a folder closed to others (by this user or root) keeps them out, whatever the mode inside
        if f.mode & stat.S_IWOTH and not f.mode & stat.S_ISVTX and f.closed_by is None:
            shared.append(f)
        if f.owner_uid not in (f.uid, 0):  # its owner may change its mode at will
            foreign.append(f)
    problems = [f"{f.path} ({f.source}) is writable by every user and lacks the sticky bit" for f in shared]
    problems += [f"{f.path} ({f.source}) belongs to another user (uid {f.owner_uid})" for f in foreign]
    if not problems:
        there = [
            f"{f.path} ({f.source})" + (f", inside {f.closed_by}, closed to other users" if f.closed_by else "")
            for f in folders
            if f.exists
        ]
        said = f"{'; '.join(there)}: no other user can replace its files" if there else "no Ray temp folder yet"
        return Finding("ray temp", "ok", said, details=details)
    sticky = f"; or at least set the sticky bit (`chmod +t {' '.join(f.path for f in shared)}`)" if shared else ""
    return Finding(
        "ray temp",
        "warn",
        f"{'; '.join(problems)}: another user can replace what Ray keeps there, such as `ray_current_cluster`, "
        "which names the cluster a client without an address joins and sends its token to",
        "give Ray a folder of your own: `mkdir -m 700 ~/.ray-tmp` and `export RAY_TMPDIR=~/.ray-tmp` for "
        f"`ray start` and every client{sticky}; and always pass --address",
        details,
    )


# -- MLflow store


def judge_store(uri: str, error: str | None, exists: bool, nodes: int) -> Finding:
    """`error`: why the store could not be written (None: it could); `exists`: a file store's file
    is there (a server's always is); `nodes`: the Ray cluster's node count (0: no cluster given)."""
    local = uri.startswith(("sqlite:", "file:"))
    details = {"tracking_uri": uri, "nodes": nodes}
    if error is not None:
        fix = (
            "start one (`mlflow server --host 127.0.0.1 --port 5000`) or point --tracking-uri at a running one"
            if not local
            else "make the file and its folder writable, or give --tracking-uri another store"
        )
        return Finding("mlflow", "fail", f"{uri}: {error}", fix, details)
    if local and nodes > 1:
        return Finding(
            "mlflow",
            "warn",
            f"{uri} is a file on this machine and the cluster has {nodes} nodes: a driver on another node "
            "(a Ray job lands on any) cannot write to it, nor read what this one wrote",
            "run `mlflow server` where every node reaches it and pass --tracking-uri http://HOST:5000",
            details,
        )
    if not exists:
        return Finding(
            "mlflow", "ok", f"{uri}: no store yet; the first sweep creates it (its folder is writable)", details=details
        )
    return Finding("mlflow", "ok", f"{uri}: reachable and writable", details=details)


# -- GPUs


def judge_gpus(cuda_build: str | None, devices: list[dict[str, Any]], ray_gpus: float | None) -> Finding:
    """`devices`: {"index", "name", "free_bytes", "total_bytes"} per GPU torch sees; `ray_gpus`:
    the GPUs the Ray cluster declares (None: no cluster given)."""
    details = {"cuda": cuda_build, "devices": devices, "ray_gpus": ray_gpus}
    ray = "" if ray_gpus is None else f"; Ray declares {_count(ray_gpus)} GPU(s)"
    if not devices:
        if cuda_build is None:
            return Finding("gpus", "ok", f"none: this torch is a CPU build{ray}", details=details)
        return Finding(
            "gpus",
            "warn",
            f"none visible to torch (a CUDA {cuda_build} build){ray}",
            "`nvidia-smi` should list the GPUs; check CUDA_VISIBLE_DEVICES and the driver",
            details,
        )
    shown = "; ".join(
        f"cuda:{d['index']} {d['name']}: {human_bytes(d['free_bytes'])} free of {human_bytes(d['total_bytes'])}"
        for d in devices
    )
    held = [d for d in devices if d["free_bytes"] < LOW_FREE * d["total_bytes"]]
    if held:
        return Finding(
            "gpus",
            "warn",
            f"{shown}{ray}: cuda:{held[0]['index']} is nearly full before any trial",
            "`nvidia-smi` shows which process holds it: stop it, or hide the GPU with CUDA_VISIBLE_DEVICES",
            details,
        )
    if ray_gpus == 0:
        return Finding(
            "gpus",
            "warn",
            f"{shown}; Ray declares none, so trials get no GPU",
            "start Ray with `ray start --num-gpus=N` (or check CUDA_VISIBLE_DEVICES where it started)",
            details,
        )
    return Finding("gpus", "ok", f"{shown}{ray}", details=details)


# -- Half precision on the CPU


def judge_precision(seconds: dict[str, float | str], flags: tuple[str, ...] | None) -> Finding:
    """`seconds`: per precision, one matmul's time, or the error that stopped it."""
    base = seconds["fp32"]
    assert isinstance(base, float), "fp32 always runs"
    ratios = {p: s / base for p, s in seconds.items() if p != "fp32" and isinstance(s, float)}
    broken = {p: s for p, s in seconds.items() if isinstance(s, str)}
    slow = [p for p, ratio in ratios.items() if ratio > SLOW_RATIO]
    shown = ", ".join(f"{p} {ratio:.1f}x" for p, ratio in ratios.items())
    have = " ".join(flags) if flags else "none of the speed flags" if flags is not None else "unknown"
    found = f"time per matmul against fp32: {shown}; CPU flags: {have}"
    details = {"ratio_to_fp32": ratios, "seconds": seconds, "cpu_flags": flags}
    if not slow and not broken:
        return Finding("cpu precision", "ok", found, details=details)
    cannot = [f"{p} cannot run ({error})" for p, error in broken.items()]
    slower = [f"{p} is {ratios[p]:.1f}x slower than fp32" for p in slow]
    menu = " and ".join([*slow, *broken])
    return Finding(
        "cpu precision",
        "warn",
        f"{'; '.join([*slower, *cannot])} on this CPU ({found})",
        f"for CPU trials, leave {menu} out of a sweep's precision menu on this machine (it cannot win here)",
        details,
    )


# -- ELASTUNE_HOME


def judge_home(home: Path, from_env: bool, error: str | None) -> Finding:
    named = f"ELASTUNE_HOME={home}" if from_env else f"{home} (ELASTUNE_HOME unset)"
    if error is None:
        return Finding("home", "ok", f"{named}: writable", details={"home": str(home)})
    return Finding(
        "home",
        "fail",
        f"{named}: {error}; sweep state (for --resume), UI jobs' checkpoints and data caches go there",
        "make that folder writable (`chmod u+w FOLDER`), or export ELASTUNE_HOME=a folder you can write",
        {"home": str(home)},
    )


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP, `localhost` or a `[v6]` form) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # a host name: it could be anything
        return False
    # A dual-stack socket shows an IPv4 peer as ::ffff:127.0.0.1, which Python 3.11 calls not loopback.
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


def _count(value: float) -> str:
    return f"{value:g}"
