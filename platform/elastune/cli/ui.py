"""`elastune ui`: start the web UI (the `elastune.ui` package, installed from ui/).

The library never imports elastune.ui; this command loads it by name when it runs (importlib), the
one plugin-style exception to that rule, so `import elastune.cli` stays free of FastAPI and the
UI's dependency arrow keeps pointing at the library.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Annotated

import typer

from elastune.errors import InputError

__all__ = ["ui"]


def ui(
    host: Annotated[str, typer.Option(help="Address to bind; anything but loopback needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8710,
    token_file: Annotated[
        Path | None,
        typer.Option(help="File holding the access token every API call must send (Bearer); or $ELASTUNE_UI_TOKEN."),
    ] = None,
    token: Annotated[
        str | None, typer.Option(hidden=True, help="Refused: a token on the command line shows in `ps`.")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Ray's job server (dashboard), e.g. http://HOST:8265; default: $RAY_API_SERVER_ADDRESS or "
            "$RAY_ADDRESS (Ray's job client takes them over any address), else http://127.0.0.1:8265, Ray's own "
            "default. Never looked up (`auto` is refused): Ray's token is sent there."
        ),
    ] = None,
    cluster_address: Annotated[
        str | None,
        typer.Option(
            help="Where the Memory page connects to Ray to ask the EDO broker: the head's GCS address HOST:PORT "
            "(e.g. 127.0.0.1:6379; `ray status` on the head shows it) or ray://HOST:10001 (Ray Client, from outside "
            "the cluster); default: $RAY_ADDRESS unless it is a URL, else --ray-address unless it is a URL, else "
            "127.0.0.1:6379 with the default --ray-address. `auto` is refused: Ray would join whichever cluster it "
            "finds on this machine, another user's included. A cluster there that refuses this client's Ray token "
            "stops the UI at start, with the fix."
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None, typer.Option(help="MLflow store; default $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db.")
    ] = None,
    spec_dir: Annotated[
        Path | None, typer.Option(help="Folder of sweep specs offered by name; default: the repository's.")
    ] = None,
    allow_host: Annotated[
        list[str] | None, typer.Option(help="Extra Host header name to accept, e.g. a DNS name (repeatable).")
    ] = None,
    job_python: Annotated[
        str | None, typer.Option(help="Python the cluster runs jobs with; default: this interpreter.")
    ] = None,
    job_memory_ceiling: Annotated[
        str | None,
        typer.Option(
            help="Predicted peak memory a job launched from the UI may use (2GiB, 1.5GB): a training run over it "
            "is refused, a sweep's trials are held under it; default: the smaller of this machine's memory and "
            "its GPU's."
        ),
    ] = None,
    all_jobs: Annotated[
        bool,
        typer.Option(
            "--all-jobs", help="List, follow and stop every job on the Ray cluster, not only those elastune launched."
        ),
    ] = False,
) -> None:
    """Start the web UI: launch and follow sweeps, compare trials, watch shared device memory."""
    web = importlib.import_module("elastune.ui")
    if token is not None:
        raise InputError(
            "--token: a token on the command line is visible to every user in `ps` and, once the UI talks to "
            "Ray, in `ray job list`; put it in ELASTUNE_UI_TOKEN or a file given with --token-file"
        )
    extra: dict[str, object] = {}
    if spec_dir is not None:
        extra["spec_dir"] = spec_dir.expanduser().resolve()
    if job_python is not None:
        extra["job_python"] = job_python
    # What the user set for Ray's own clients is an address they gave (`auto` among them is refused
    # by check_bind); the job client would take RAY_API_SERVER_ADDRESS / RAY_ADDRESS over a flag anyway.
    from_env = {name: os.environ.get(name, "").strip() for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")}
    ray_address = ray_address or from_env["RAY_API_SERVER_ADDRESS"] or from_env["RAY_ADDRESS"] or None
    if ray_address is not None:
        extra["ray_address"] = ray_address
    if cluster_address is None and from_env["RAY_ADDRESS"] and "://" not in from_env["RAY_ADDRESS"]:
        cluster_address = from_env["RAY_ADDRESS"]
    if job_memory_ceiling is not None:
        extra["job_memory_ceiling"] = _ceiling(job_memory_ceiling)
    settings = web.UISettings(
        host=host,
        port=port,
        token=_read_token(token_file),
        cluster_address=cluster_address,
        tracking_uri=tracking_uri,
        allowed_hosts=tuple(allow_host or ()),
        all_jobs=all_jobs,
        **extra,
    )
    web.check_bind(settings)  # a setting that cannot work is said before Ray is asked anything
    _check_broker_cluster(settings.broker_address())
    web.serve(settings)


def _check_broker_cluster(address: str | None) -> None:
    """Stop with the fix where the cluster the Memory page would join refuses this client's Ray
    token: `ray.init` there would retry for minutes, logging InvalidAuthToken every second, and the
    page would only ever say it is still trying. Anything else (nothing listens yet: the cluster may
    start after the UI) is left to the page, which says it while the UI serves."""
    from elastune.cluster import address_problem, host_port

    if address is None or host_port(address) is None:
        return  # ray:// (Ray Client) or none: nothing to probe before Ray is asked
    problem = address_problem(address)
    if problem is not None and problem.refuses_token:
        raise InputError(f"--cluster-address={address!r}: {problem.what}; {problem.fix}")


def _ceiling(text: str) -> int:
    from elastune.units import parse_bytes

    try:
        return parse_bytes(text)  # a size above 0, or a ValueError that shows the accepted forms
    except ValueError as exc:
        raise InputError(f"--job-memory-ceiling={text!r}: {exc}") from None


def _read_token(token_file: Path | None) -> str | None:
    """The UI's token from --token-file, else $ELASTUNE_UI_TOKEN, which is then removed from this
    process's environment: nothing this process starts (a local Ray, and through it every job)
    inherits it."""
    from_env = os.environ.pop("ELASTUNE_UI_TOKEN", None)
    if token_file is None:
        return (from_env or "").strip() or None
    try:
        text = token_file.expanduser().read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"--token-file={str(token_file)!r}: cannot read it ({exc}); give a readable text file"
        ) from None
    if not text or len(text.splitlines()) > 1:
        raise InputError(f"--token-file={str(token_file)!r}: must hold the token alone on one line")
    return text
