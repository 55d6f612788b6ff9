"""The FastAPI app: JSON API under /api, four pages, static files, and `serve` for `elastune ui`.

The pages are HTML shells; their scripts read the same JSON API a script would (issue 6, point 5).
The API's docs page (/api/docs) is Swagger UI served from this server, never from a CDN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elastune.ui import api, launch
from elastune.ui.memory import MemoryReader, make_broker_reader
from elastune.ui.pricing import default_job_ceiling
from elastune.ui.ray_jobs import ClusterError, ClusterUnavailable, JobService, UnknownJob
from elastune.ui.security import GuardMiddleware
from elastune.ui.settings import UISettings, check_bind
from elastune.ui.sweeps import StoreUnavailable, SweepReader, UnknownSweep
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

__all__ = ["check_port_free", "create_app", "serve"]

HERE = Path(__file__).resolve().parent
PAGES = {"jobs": "Jobs", "sweeps": "Sweeps", "memory": "Memory"}


def create_app(settings: UISettings | None = None, memory_reader: MemoryReader | None = None) -> FastAPI:
    settings = settings or UISettings()
    app = FastAPI(
        title="elastune UI",
        version=_version(),
        description="Launch and follow sweeps and training jobs; compare trials; watch shared device memory.",
        docs_url=None,  # served by _add_docs, with its scripts from this server
        redoc_url=None,
    )
    # Resolved once (absolute, so a job running in Ray's working directory writes to the same store
    # this UI reads); a malformed URI stops start-up with the fix in the message.
    from elastune.tracking.mlflow import resolve_tracking_uri

    tracking_uri = resolve_tracking_uri(settings.tracking_uri)
    app.state.settings = settings
    app.state.tracking_uri = tracking_uri
    app.state.jobs = JobService(settings.ray_address, all_jobs=settings.all_jobs)
    app.state.sweeps = SweepReader(tracking_uri)
    app.state.job_ceiling = settings.job_memory_ceiling or default_job_ceiling()
    app.state.memory_reader = memory_reader or make_broker_reader(settings.broker_address())
    app.add_middleware(GuardMiddleware, allowed_hosts=settings.host_allowlist(), token=settings.token)
    _add_error_handlers(app)
    app.include_router(api.router)
    _add_docs(app)
    _add_pages(app)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("elastune")
    except PackageNotFoundError:
        return "0"


def _error(status: int, detail: str, problems: list[dict[str, Any]] | None = None) -> JSONResponse:
    # Everything in an error body may echo client input (NaN, 1e999, a lone surrogate, a 5000-digit
    # number, 200 long overrides): error_body makes it encodable and at most 4 KB, so an error is
    # never itself a 500, nor bigger than what a client can make the server write.
    return JSONResponse(launch.error_body(detail, problems or []), status_code=status)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [_problem(e) for e in exc.errors()]
        return _error(422, f"Invalid input: {len(problems)} problem(s)", problems)

    @app.exception_handler(launch.LaunchProblems)
    async def refused(_: Request, exc: launch.LaunchProblems) -> JSONResponse:
        problems = launch.problem_dicts(exc.problems)
        return _error(422, f"Invalid input: {len(problems)} problem(s)", problems)

    @app.exception_handler(UnknownJob)
    async def no_job(_: Request, exc: UnknownJob) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(UnknownSweep)
    async def no_sweep(_: Request, exc: UnknownSweep) -> JSONResponse:
        return _error(404, str(exc))

    @app.exception_handler(ClusterUnavailable)
    @app.exception_handler(StoreUnavailable)
    async def down(_: Request, exc: Exception) -> JSONResponse:
        return _error(503, str(exc))

    @app.exception_handler(ClusterError)
    async def cluster_said_no(_: Request, exc: ClusterError) -> JSONResponse:
        return _error(502, str(exc))


def _problem(err: Any) -> dict[str, Any]:
    """One pydantic error as {field, value, message}: the field without the transport prefix."""
    kind = str(err.get("type", ""))
    loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
    if loc and loc[0] in launch.JOB_KINDS:
        loc = loc[1:]  # the discriminated union's tag, not a field the user filled
    field = "kind" if kind.startswith("union_tag") else ".".join(loc) or "request"
    if kind == "extra_forbidden":
        message = (
            "unknown field; a job is launched from its kind and that kind's listed fields only "
            "(never an entrypoint, runtime_env, shell command or file path)"
        )
    elif kind.startswith("union_tag"):
        message = f"must be one of the registered job kinds: {', '.join(launch.JOB_KINDS)}"
    elif kind == "value_error":
        message = str((err.get("ctx") or {}).get("error", err.get("msg", "")))
    else:
        message = str(err.get("msg", "")).replace("Input should be", "must be")
    value = err.get("input")
    if kind.startswith("union_tag") and isinstance(value, dict):
        value = value.get("kind")
    shown = None if kind in ("missing", "extra_forbidden") or isinstance(value, dict) else launch.jsonable(value)
    return {"field": field, "value": shown, "message": message}


# Swagger UI's two files, from an installed package's fixed folder (fastapi-swagger ships the
# swagger-ui-dist release): the docs page loads nothing from anywhere but this server.
DOCS_ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css"}


def swagger_assets_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("fastapi_swagger") / "resources"))


def _add_docs(app: FastAPI) -> None:
    folder = swagger_assets_dir()

    @app.get("/api/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg",
            # The token typed into Authorize lives as long as the tab, never in localStorage, where
            # any script of this origin, later, could read it. No validator badge either: it would
            # send the schema's URL to validator.swagger.io.
            swagger_ui_parameters={"persistAuthorization": False, "validatorUrl": None},
        )

    for name, media_type in DOCS_ASSETS.items():
        app.add_api_route(
            f"/docs-assets/{name}", _fixed_file(folder / name, media_type), methods=["GET"], include_in_schema=False
        )


def _fixed_file(path: Path, media_type: str) -> Any:
    """A route answering with the file at `path`, a closure without parameters: nothing in the
    request takes part in choosing the file (a default argument would be a query parameter)."""

    def asset() -> FileResponse:
        return FileResponse(path, media_type=media_type)

    return asset


def _add_pages(app: FastAPI) -> None:
    templates = Jinja2Templates(directory=HERE / "templates")

    def page(request: Request, name: str, title: str, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(
            request, f"{name}.html", {"title": title, "active": name, "pages": PAGES, **context}
        )

    @app.get("/", include_in_schema=False)
    def home() -> Response:
        return RedirectResponse("/jobs")

    @app.get("/jobs", include_in_schema=False, response_class=HTMLResponse)
    def jobs_page(request: Request) -> HTMLResponse:
        return page(request, "jobs", "Jobs")

    @app.get("/sweeps", include_in_schema=False, response_class=HTMLResponse)
    def sweeps_page(request: Request) -> HTMLResponse:
        return page(request, "sweeps", "Sweeps")

    @app.get("/sweeps/{sweep_id}", include_in_schema=False, response_class=HTMLResponse)
    def sweep_page(request: Request, sweep_id: str) -> HTMLResponse:
        return page(request, "sweep", "Sweep", sweep_id=sweep_id, active_override="sweeps")

    @app.get("/memory", include_in_schema=False, response_class=HTMLResponse)
    def memory_page(request: Request) -> HTMLResponse:
        return page(request, "memory", "Device memory")


def serve(settings: UISettings) -> None:
    """Check the bind rules, then run the server until interrupted (`elastune ui`)."""
    import uvicorn

    check_bind(settings)
    check_port_free(settings)
    app = create_app(settings)
    shown = f"http://{settings.host if ':' not in settings.host else f'[{settings.host}]'}:{settings.port}/"
    print(f"elastune UI on {shown}" + ("  (token required: open it and paste the token)" if settings.token else ""))
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level="warning", server_header=False, proxy_headers=False
    )


def check_port_free(settings: UISettings) -> None:
    """Refuse a port something else already listens on, before saying where the UI is (exit 2)."""
    import socket

    from elastune.errors import InputError

    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            probe.bind((settings.host, settings.port))
        except OSError as exc:
            raise InputError(
                f"--port={settings.port}: cannot listen on {settings.host}:{settings.port} ({exc.strerror or exc}); "
                "another program (perhaps another `elastune ui`) has it: stop that one or pick another --port"
            ) from None
