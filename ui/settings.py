"""What the UI server is told at start-up, and the start-up rules that keep it safe.

Anyone who can reach the UI can launch jobs on the Ray cluster, which run code. So the server binds
to 127.0.0.1 unless told otherwise, refuses any other address without a token, and only answers
requests whose Host header names it (a DNS-rebinding page cannot borrow the user's browser).
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from elastune.errors import InputError

__all__ = ["UISettings", "check_bind", "default_spec_dir", "is_loopback", "ray_auth_token"]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class UISettings:
    host: str = "127.0.0.1"
    port: int = 8710
    token: str | None = None  # when set, every /api call needs `Authorization: Bearer TOKEN`
    ray_address: str | None = None  # dashboard URL (http://127.0.0.1:8265) or a ray.init address; None: local
    # What ray.init takes to reach the EDO broker (ray://HOST:10001, HOST:6379, auto): a job server's
    # URL cannot. None: ray_address when it is such an address, else the local cluster's.
    cluster_address: str | None = None
    tracking_uri: str | None = None  # MLflow; None: elastune's default store
    spec_dir: Path = field(default_factory=lambda: default_spec_dir())
    allowed_hosts: tuple[str, ...] = ()  # Host header values accepted besides the loopback names and `host`
    # The interpreter the cluster runs jobs with. A bare `python` on a Ray node is whatever its PATH
    # finds (often not the venv elastune is in), so a local cluster gets this process's interpreter.
    job_python: str = field(default_factory=lambda: sys.executable)

    def broker_address(self) -> str | None:
        """The address the Memory page's reader connects with (memory.make_broker_reader)."""
        return self.cluster_address or self.ray_address

    def host_allowlist(self) -> frozenset[str]:
        """Host header names (without port) this server answers to."""
        names = {*_LOOPBACK_NAMES, self.host, *self.allowed_hosts}
        names.discard("0.0.0.0")  # a wildcard bind address is never a name a browser sends
        names.discard("::")
        return frozenset(n.lower().strip("[]") for n in names)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def check_bind(settings: UISettings) -> None:
    """Refuse to serve beyond this machine without a token, or a start-up setting that cannot work
    (raises InputError, exit code 2)."""
    if not is_loopback(settings.host) and not settings.token:
        raise InputError(
            f"--host={settings.host!r} is reachable from other machines, and anyone who reaches the UI can "
            "launch jobs on your Ray cluster; set a token in ELASTUNE_UI_TOKEN (or a file given with --token-file), "
            "or bind to 127.0.0.1"
        )
    if settings.token is not None and len(settings.token) < 16:
        raise InputError(
            "the UI's token is shorter than 16 characters; use a long random one, e.g. `openssl rand -hex 24`"
        )
    if settings.cluster_address is not None and settings.cluster_address.startswith(("http://", "https://")):
        raise InputError(
            f"--cluster-address={settings.cluster_address!r} is a URL, which cannot reach the EDO broker (a Ray "
            "actor); give ray://HOST:10001 (the head's Ray Client port) or auto (the local cluster)"
        )
    if not 0 < settings.port < 65536:
        raise InputError(f"--port={settings.port}: must be between 1 and 65535")


def default_spec_dir() -> Path:
    """The repository's search_spaces/ next to the installed source, else the working directory's."""
    import elastune

    beside_source = Path(elastune.__file__).resolve().parents[2] / "search_spaces"
    return beside_source if beside_source.is_dir() else Path.cwd() / "search_spaces"


def ray_auth_token() -> str | None:
    """Ray's cluster token (Ray >= 2.52 token auth), found where Ray itself looks for it.

    Order as in Ray: RAY_AUTH_TOKEN, then the file RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token (what
    `ray get-auth-token` prints). Sent as a bearer header to the job server; a cluster without token
    auth ignores it.
    """
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    candidates = [Path(path)] if path else [Path.home() / ".ray" / "auth_token"]
    for candidate in candidates:
        try:
            text = candidate.expanduser().read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return None
