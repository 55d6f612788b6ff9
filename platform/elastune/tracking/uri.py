"""Where the MLflow store is: resolving and checking `--tracking-uri` (no mlflow import needed).

`tracking/mlflow.py` re-exports `resolve_tracking_uri` and `mlflow_run_url`; import them from there.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from elastune.errors import InputError, Problem

__all__ = [
    "artifact_location",
    "check_server",
    "is_http",
    "mlflow_run_url",
    "resolve_tracking_uri",
    "server_problem",
    "sqlite_path",
]

_FORMS = (
    "use sqlite:///PATH/mlflow.db (a local store), http://HOST:PORT (an `mlflow server`, for "
    "multi-node sweeps) or file:///PATH"
)
_DATABASES = ("postgresql", "mysql", "mssql")  # SQLAlchemy URLs MLflow stores also accept


def resolve_tracking_uri(uri: str | None = None) -> str:
    """explicit > $MLFLOW_TRACKING_URI > sqlite:///<cwd>/mlflow.db; relative SQLite paths made absolute.

    Absolute, because Ray workers and a resumed driver need not share the cwd of the first run.
    """
    source = "--tracking-uri"
    if not uri:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or None
        source = "--tracking-uri (from $MLFLOW_TRACKING_URI)"
    if uri is None:
        return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"
    uri = uri.strip()
    scheme = urlparse(uri).scheme.lower()
    if scheme == "sqlite":
        path = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else ""
        if not path or path == ":memory:":
            raise _bad(source, uri, "a SQLite store needs a file: sqlite:///PATH/mlflow.db")
        return f"sqlite:///{Path(path).expanduser().resolve()}"
    if scheme in ("http", "https") or scheme.split("+")[0] in _DATABASES:
        try:
            parsed = urlparse(uri)
            parsed.port  # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError:
            raise _bad(source, uri, f"the port is not a number; {_FORMS}") from None
        if not parsed.hostname:
            raise _bad(source, uri, f"no host; {_FORMS}")
        return uri.rstrip("/")
    if scheme == "file" and urlparse(uri).path:
        return uri
    hint = f"; for a SQLite file write sqlite:///{Path(uri).expanduser().resolve()}" if uri.endswith(".db") else ""
    raise _bad(source, uri, f"not a tracking URI; {_FORMS}{hint}")


def mlflow_run_url(tracking_uri: str | None, run_id: str) -> str | None:
    """The run's page in the MLflow UI (its hash router has a direct /runs/<id> route); None off-server.

    `tracking_uri` is resolved like everywhere else (None: $MLFLOW_TRACKING_URI or the default store);
    a link is a convenience, so a URI that does not resolve gives None rather than an error.
    """
    try:
        uri = resolve_tracking_uri(tracking_uri)
    except InputError:
        return None
    return f"{uri}/#/runs/{run_id}" if is_http(uri) else None


def is_http(uri: str) -> bool:
    return urlparse(uri).scheme.lower() in ("http", "https")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a resolved sqlite:/// URI; None for any other store."""
    return Path(uri[len("sqlite:///") :]) if uri.lower().startswith("sqlite:///") else None


def artifact_location(uri: str) -> str | None:
    """SQLite: <db folder>/mlartifacts, not ./mlruns of whatever the cwd is. Servers choose their own."""
    path = sqlite_path(uri)
    return (path.parent / "mlartifacts").as_uri() if path is not None else None


def check_server(uri: str, timeout_s: float = 10.0) -> None:
    """An http(s) store must answer /health: fail in seconds with the fix, not after MLflow's retries."""
    problem = server_problem(uri, timeout_s)
    if problem is not None:
        raise _bad(
            "--tracking-uri",
            uri,
            f"{problem}; start one (mlflow server --host 127.0.0.1 --port 5000) "
            "or point --tracking-uri at a running one",
        )


def server_problem(uri: str, timeout_s: float = 10.0) -> str | None:
    """Why nothing answers /health at an http(s) store's `uri`; None when something does."""
    try:
        urllib.request.urlopen(f"{uri}/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        pass  # something answered (a proxy, an auth layer): let MLflow report the details
    except (urllib.error.URLError, OSError) as exc:
        return f"no MLflow server answers there ({getattr(exc, 'reason', exc)})"
    return None


def _bad(source: str, uri: str, message: str) -> InputError:
    return InputError(str(Problem(source, uri, message)))
