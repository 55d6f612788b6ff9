"""Reaching a Ray cluster at HOST:PORT: what stops a driver from connecting, said with its fix.

`elastune sweep --address` refuses such an address before anything starts (tuning/sweep.py) and
`elastune doctor` reports it as a failed check (doctor/): both ask `address_problem`, so the two
say the same thing. Ray's `auto` is refused, as every elastune command refuses it: Ray would pick
any cluster on this machine, another user's included. Ray imports are lazy.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from elastune.compat import gcs_probe, ray_auto_candidates, ray_dial_host

__all__ = [
    "AUTO_FIX",
    "ClusterProblem",
    "address_problem",
    "auth_problem",
    "auto_problem",
    "connection_error_text",
    "host_port",
]

CONNECT_TIMEOUT_S = 3.0
# What to do instead of Ray's `auto` (`auto_problem`).
AUTO_FIX = (
    "pass --address HOST:PORT naming your own cluster's GCS address (`ray status` on its head prints it), "
    "or set RAY_ADDRESS=HOST:PORT"
)
MAX_ERROR_CHARS = 2000  # a runaway answer is bounded; Ray's own messages, fix included, are far shorter


@dataclass(frozen=True)
class ClusterProblem:
    """Why a driver cannot use the cluster at `address` (`what`), and what to do about it (`fix`);
    `refuses_token`: the cluster refused this client's Ray token (or its lack of one)."""

    address: str
    what: str
    fix: str
    refuses_token: bool = False

    def __str__(self) -> str:
        return f"--address={self.address!r}: {self.what}; {self.fix}"


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a HOST:PORT or [IPv6]:PORT address; None for Ray's other forms (auto,
    ray://, a dashboard URL) and for anything that is not an address at all."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in address or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def address_problem(address: str) -> ClusterProblem | None:
    """Say at once what `ray.init` would take 20 s to minutes of retries to say: nothing listens at
    a HOST:PORT address; Ray would dial this machine's network address for a loopback one where a
    loopback-only cluster does not listen; or the cluster wants Ray's token and this client has none
    (or another); or it is Ray's `auto` (`auto_problem`). None when none of these is the case; other
    address forms (ray://) are left to Ray."""
    if address.strip().lower() == "auto":
        return auto_problem(ray_auto_candidates())
    parsed = host_port(address)
    if parsed is None:
        return None
    host, port = parsed
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return ClusterProblem(
            address,
            f"nothing answers there ({exc.strerror or exc})",
            "give the head's GCS address (HOST:6379 by default, `ray status` on the head shows it), "
            "or leave --address out for a local Ray",
        )
    saved_stderr = os.dup(2)  # Ray's C++ client logs the refusal on fd 2 too: the error says it once
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            try:
                gcs_probe(address)  # a cluster with token auth refuses it at once
            finally:
                os.dup2(saved_stderr, 2)
    except Exception as exc:
        from ray.exceptions import AuthenticationError

        if isinstance(exc, AuthenticationError):
            return auth_problem(address, exc)
        return None  # anything else: ray.init says it in its own words
    finally:
        os.close(saved_stderr)
    dialed = ray_dial_host(host)  # Ray swaps a loopback host for this machine's address
    if dialed != host:
        try:
            socket.create_connection((dialed, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError:
            return ClusterProblem(
                address,
                f"the cluster there listens on loopback only and Ray would dial it at {dialed}:{port}",
                "`export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (as the cluster was started) so Ray keeps 127.0.0.1",
            )
    return None


def auth_problem(address: str, exc: Exception) -> ClusterProblem:
    """The cluster at `address` refused this client's token (or its lack of one): `exc` is Ray's
    AuthenticationError, whose first sentence is kept for reference."""
    mode = os.environ.get("RAY_AUTH_MODE", "disabled")
    which = (
        "this client has token authentication off (RAY_AUTH_MODE is not 'token')"
        if mode != "token"
        else "the token this client sent is not the cluster's"
    )
    return ClusterProblem(
        address,
        f"the Ray cluster there requires token authentication and {which}",
        "`export RAY_AUTH_MODE=token` and give the cluster's token: the head's ~/.ray/auth_token copied to "
        "this machine's ~/.ray/auth_token, or RAY_AUTH_TOKEN_PATH=FILE, or RAY_AUTH_TOKEN "
        f"(`ray get-auth-token` on the head prints it) [Ray: {str(exc).split('.')[0]}]",
        refuses_token=True,
    )


def auto_problem(found: list[str]) -> ClusterProblem:
    """Why Ray's `auto` is refused: it joins whichever cluster it finds on this machine (a raylet
    any user started, or the one Ray's temp folder names, a file any user may write), another
    user's included, and sends it this client's Ray token; a cluster that wants another token has
    `ray.init` log InvalidAuthToken every second for minutes. `found`: the clusters' GCS addresses
    Ray sees here (read from their processes, none contacted), named so the user can pick theirs."""
    live = sorted(set(found))
    what = (
        "`auto` makes Ray join whichever cluster it finds on this machine, another user's included, and send it "
        "this client's Ray token"
    )
    if not live:
        return ClusterProblem(
            "auto",
            f"{what}; it finds none here",
            "start one (`ray start --head --node-ip-address=127.0.0.1`) and pass its GCS address, or leave "
            "--address out for a new local Ray",
        )
    return ClusterProblem("auto", f"{what}; it finds {len(live)} here ({', '.join(live)})", AUTO_FIX)


_SEVERAL = re.compile(r"Found multiple active Ray instances: \{([^}]*)\}")


def connection_error_text(error: BaseException | str, flag: str = "--address") -> str:
    """Ray's error on connecting (or its text) as one whole line: its line breaks joined, never cut
    short of the fix at its end (only a runaway text is bounded). Where Ray found several clusters
    on this machine, its fix names Ray's own flag: the line names `flag`, the option of the command
    that was run, and the GCS address it takes."""
    text = " ".join(str(error).split()) or type(error).__name__
    several = _SEVERAL.search(text)
    if several is not None:
        found = sorted(part.strip(" '\"") for part in several.group(1).split(",") if part.strip(" '\""))
        return (
            f"Ray found {len(found)} clusters on this machine ({', '.join(found)}) and cannot tell which one is "
            f"meant: pass {flag} HOST:PORT naming your cluster's GCS address (`ray status` on its head prints "
            "it), or set RAY_ADDRESS=HOST:PORT"
        )
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
