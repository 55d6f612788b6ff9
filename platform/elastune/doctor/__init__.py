"""`elastune doctor`: what to know before a sweep, each finding with its fix.

Checks, in order: the Ray cluster (reachable, its token, whether it refuses a client without one,
its nodes), sockets of Ray, MLflow and elastune listening beyond loopback, who may write to Ray's
temp folders, the MLflow store (reachable, writable, and a file store on a multi-node cluster),
GPUs (torch's and Ray's), half precision on this CPU, and ELASTUNE_HOME.
gather.py reads the facts, findings.py judges them; `run_doctor` holds each check to a time limit,
so an address that never answers costs seconds, not a hang.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from elastune.cluster import host_port
from elastune.doctor import gather
from elastune.doctor.findings import Finding
from elastune.errors import InputError, Problem
from elastune.tracking.uri import resolve_tracking_uri

__all__ = ["LIMITS_S", "Finding", "cluster_address", "run_doctor", "within"]

# Seconds each check may take. The store's and the GPUs' include importing MLflow and torch
# (several seconds on a busy 2-core machine); Ray's covers a 3 s connect, a 3 s GCS query and a
# client without a token asking again from a process of its own (gather.TOKENLESS_TIMEOUT_S).
LIMITS_S = {
    "ray": 15.0,
    "ports": 10.0,
    "ray temp": 10.0,
    "mlflow": 45.0,
    "gpus": 45.0,
    "cpu precision": 20.0,
    "home": 5.0,
}
_SLOW_FIX = {
    "ray": "something accepts connections there but does not answer as Ray's GCS: give the head's GCS address "
    "(HOST:6379 by default, `ray status` on the head shows it)",
    "mlflow": "check that the store answers (`curl URI/health` for a server) and is not locked by another writer",
    "gpus": "`nvidia-smi` hanging too means the driver is stuck: see its logs",
}


def run_doctor(address: str | None, tracking_uri: str | None) -> list[Finding]:
    """Every check's finding, in order. Raises InputError (nothing checked) for a malformed
    --address or --tracking-uri."""
    address = cluster_address(address)
    uri = resolve_tracking_uri(tracking_uri)
    ray = within("ray", lambda: gather.check_ray(address))
    findings = [ray, within("ports", gather.check_ports), within("ray temp", gather.check_ray_temp)]
    nodes = int(ray.details.get("nodes", 0))  # 0: no cluster given, or none reached
    findings.append(within("mlflow", lambda: gather.check_store(uri, nodes)))
    findings.append(within("gpus", lambda: gather.check_gpus(ray.details.get("gpus"))))
    findings.append(within("cpu precision", gather.check_precision))
    findings.append(within("home", gather.check_home))
    return findings


def cluster_address(address: str | None) -> str | None:
    """--address, else $RAY_ADDRESS, checked for form: HOST:PORT (the head's GCS); None: neither given."""
    source = "--address"
    if not address:
        address = os.environ.get("RAY_ADDRESS") or None
        source = "--address (from $RAY_ADDRESS)"
    if address is None:
        return None
    address = address.strip()
    if host_port(address) is None:
        # `auto` is named for what it does: the check would be of a cluster Ray picked, maybe another user's
        what = (
            "is Ray's discovery, not HOST:PORT: it joins whichever Ray cluster it finds on this machine, another "
            "user's included"
            if address.lower() == "auto"
            else "is not HOST:PORT"
        )
        fix = (
            "give the head's GCS address, e.g. 127.0.0.1:6379 (`ray status` on the head shows it), or leave it "
            "out to check for a local Ray"
        )
        raise InputError(str(Problem(source, address, f"{what}; {fix}")))
    return address


def within(check: str, run: Callable[[], Finding]) -> Finding:
    """`run()`'s finding, or a failure once LIMITS_S[check] has passed. The check goes on in a daemon
    thread, which the process abandons when it exits."""
    box: list[Finding | BaseException] = []

    def target() -> None:
        try:
            box.append(run())
        except Exception as exc:  # a check that breaks is a failed check, not a crashed doctor
            box.append(exc)

    thread = threading.Thread(target=target, name=f"doctor-{check}", daemon=True)
    stderr = os.dup(2)
    started = time.monotonic()
    thread.start()
    limit = LIMITS_S[check]
    thread.join(limit)
    took = round(time.monotonic() - started, 2)
    if not box:
        # The Ray probe points fd 2 at /dev/null while it runs (cluster.py): one abandoned mid-way
        # would leave this process's error output there.
        os.dup2(stderr, 2)
    os.close(stderr)
    if not box:
        fix = _SLOW_FIX.get(check, "the machine may be overloaded: run doctor again when it is quieter")
        return Finding(check, "fail", f"no answer within {limit:g} s", fix, seconds=took)
    result = box[0]
    if isinstance(result, BaseException):
        failed = f"the check itself failed: {type(result).__name__}: {result}"
        return Finding(check, "fail", failed, "report it with this line", seconds=took)
    return replace(result, seconds=took)
