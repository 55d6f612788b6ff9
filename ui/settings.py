"""What the UI server is told at start-up, and the start-up rules that keep it safe.

Anyone who can reach the UI can launch jobs on the Ray cluster, which run code. So the server binds
to 127.0.0.1 unless told otherwise, refuses any other address without a token, and only answers
requests whose Host header names it (a DNS-rebinding page cannot borrow the user's browser).

The UI sends Ray's token to the cluster it talks to, so it only ever talks to an address the user
gave (a flag, or RAY_ADDRESS / RAY_API_SERVER_ADDRESS, which `elastune ui` takes as given), or to
Ray's own defaults on loopback (the job server at 127.0.0.1:8265, the GCS at 127.0.0.1:6379). It
never discovers a cluster: Ray's `auto` reads `ray_current_cluster` in Ray's temp folder (/tmp/ray,
writable by every local user), where anyone could point it at a dashboard of their own and receive
the token. `auto` is refused, and so is an environment variable that would silently replace the
job server the UI was given (Ray's job client prefers them to the address it is handed).
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from elastune.errors import InputError

__all__ = [
    "DEFAULT_GCS",
    "DEFAULT_JOB_SERVER",
    "UISettings",
    "check_bind",
    "default_spec_dir",
    "is_loopback",
    "ray_address_override",
    "ray_auth_token",
]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
DEFAULT_JOB_SERVER = "http://127.0.0.1:8265"  # Ray's default dashboard / job server, on loopback
DEFAULT_GCS = "127.0.0.1:6379"  # Ray's default GCS port: what `ray start --head` on this machine listens on
# Addresses that make Ray look a cluster up (its discovery file, or a new local one): never the UI's.
_DISCOVERY = frozenset({"auto", "local", ""})
# Environment variables Ray's job client takes *instead of* the address it is given.
_RAY_ENV_ADDRESSES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")


@dataclass(frozen=True)
class UISettings:
    host: str = "127.0.0.1"
    port: int = 8710
    token: str | None = None  # when set, every /api call needs `Authorization: Bearer TOKEN`
    ray_address: str = DEFAULT_JOB_SERVER  # the job server's URL, or a ray.init address (HOST:6379, ray://)
    # What ray.init takes to reach the EDO broker (ray://HOST:10001, HOST:6379): a job server's URL
    # cannot. None: ray_address when it is such an address, Ray's default GCS when ray_address is
    # Ray's default job server (one local cluster), else none (the Memory page says what to pass).
    cluster_address: str | None = None
    tracking_uri: str | None = None  # MLflow; None: elastune's default store
    spec_dir: Path = field(default_factory=lambda: default_spec_dir())
    allowed_hosts: tuple[str, ...] = ()  # Host header values accepted besides the loopback names and `host`
    # The interpreter the cluster runs jobs with. A bare `python` on a Ray node is whatever its PATH
    # finds (often not the venv elastune is in), so a local cluster gets this process's interpreter.
    job_python: str = field(default_factory=lambda: sys.executable)
    # Peak memory (bytes) a job launched from here may be predicted to use (ui/pricing.py); None:
    # the smaller of this machine's memory and its GPU's (pricing.default_job_ceiling).
    job_memory_ceiling: int | None = None
    all_jobs: bool = False  # list and act on every job on the cluster, not only those this UI launched

    def broker_address(self) -> str | None:
        """The address the Memory page's reader connects with (memory.make_broker_reader); None:
        none was given that can reach the broker."""
        if self.cluster_address is not None:
            return self.cluster_address
        if not _is_url(self.ray_address):
            return self.ray_address  # a ray.init address serves both
        if self.ray_address.rstrip("/") == DEFAULT_JOB_SERVER:
            return DEFAULT_GCS  # Ray's defaults for one local cluster, both on loopback
        return None  # another job server's URL: its GCS is not ours to guess

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
    for flag, address in (("--ray-address", settings.ray_address), ("--cluster-address", settings.cluster_address)):
        if address is not None and address.strip().lower() in _DISCOVERY:
            raise InputError(
                f"{flag}={address!r} (given, or taken from RAY_ADDRESS) makes Ray look the cluster up in its "
                "discovery file (ray_current_cluster in /tmp/ray, which any local user can rewrite, and the UI would "
                "send Ray's token there); give the address itself, e.g. "
                f"{DEFAULT_JOB_SERVER if flag == '--ray-address' else DEFAULT_GCS}"
            )
    if settings.cluster_address is not None and _is_url(settings.cluster_address):
        raise InputError(
            f"--cluster-address={settings.cluster_address!r} is a URL, which cannot reach the EDO broker (a Ray "
            f"actor); give ray://HOST:10001 (the head's Ray Client port) or HOST:6379 (its GCS, e.g. {DEFAULT_GCS})"
        )
    override = ray_address_override(settings.ray_address)
    if override is not None:
        raise InputError(override)
    if settings.job_memory_ceiling is not None and settings.job_memory_ceiling <= 0:
        raise InputError(f"--job-memory-ceiling={settings.job_memory_ceiling}: must be above 0, e.g. 8GiB")
    if not 0 < settings.port < 65536:
        raise InputError(f"--port={settings.port}: must be between 1 and 65535")


def ray_address_override(address: str) -> str | None:
    """Why Ray's job client would talk to another address than `address`, or None when nothing
    overrides it: the client takes RAY_API_SERVER_ADDRESS, else RAY_ADDRESS, from the environment
    over the address it is given (`elastune ui` takes them as its --ray-address when none is given)."""
    for name in _RAY_ENV_ADDRESSES:
        value = os.environ.get(name)
        if not value:
            continue
        if value.strip().rstrip("/") == address.strip().rstrip("/"):
            return None
        return (
            f"{name}={value[:200]!r} is set, and Ray's job client would use it instead of the UI's job server "
            f"{address!r} (sending Ray's token there); unset {name} for `elastune ui`, or pass that address "
            "with --ray-address"
        )
    return None


def _is_url(address: str) -> bool:
    return address.startswith(("http://", "https://"))


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
