"""The JSON API. The pages use exactly these calls, so anything a person does, a script can do.

Errors have one shape: `{"detail": "plain words", "problems": [{"field", "value", "message"}]}`
(problems only on 422). 404 names what was not found, 503 says which service is down and how to
start it.
"""

from __future__ import annotations

from typing import Annotated, Any

from elastune.errors import Problem
from elastune.ui import launch
from elastune.ui.memory import memory_view
from elastune.ui.ray_jobs import JobService
from elastune.ui.settings import UISettings
from elastune.ui.sweeps import StoreUnavailable, SweepReader, UnknownSweep, best_config_yaml, trials_csv
from fastapi import APIRouter, Body, Path, Query, Request, Security
from fastapi.responses import PlainTextResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, Field

__all__ = ["ErrorBody", "router"]

# Declares the bearer token in the OpenAPI schema (so /api/docs has an Authorize button); the check
# itself is GuardMiddleware's (security.py), which runs before any route.
router = APIRouter(prefix="/api", dependencies=[Security(HTTPBearer(auto_error=False, description="The UI's token."))])

JobId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$", description="A Ray submission id.")]
# Any id the store can hold opens (the sweep list shows older ids too): it is only ever compared
# with the stored tag, never put in a path or a query string.
SweepId = Annotated[str, Path(min_length=1, max_length=300, pattern=r"^[^\x00-\x1f\x7f]+$", description="A sweep id.")]


class ProblemOut(BaseModel):
    field: str
    value: Any = None
    message: str


class ErrorBody(BaseModel):
    detail: str
    problems: list[ProblemOut] = Field(default_factory=list)


class JobOut(BaseModel):
    job_id: str
    kind: str
    spec: str | None
    from_sweep: str | None
    status: str
    message: str
    entrypoint: str
    start_time: float | None
    end_time: float | None
    done: bool


class LogChunk(BaseModel):
    job_id: str
    text: str
    offset: int
    skipped_chars: int
    status: str
    done: bool


class StopResult(BaseModel):
    job_id: str
    stopped: bool
    status: str
    message: str


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    words = {
        404: "Not found",
        422: "Invalid input; `problems` lists each field",
        503: "Ray or MLflow is unreachable",
    }
    return {code: {"model": ErrorBody, "description": words[code]} for code in codes}


def _settings(request: Request) -> UISettings:
    settings: UISettings = request.app.state.settings
    return settings


def _jobs(request: Request) -> JobService:
    service: JobService = request.app.state.jobs
    return service


def _sweeps(request: Request) -> SweepReader:
    reader: SweepReader = request.app.state.sweeps
    return reader


# -- about the server


@router.get("/health", summary="Liveness and the configured services")
def health(request: Request) -> dict[str, Any]:
    settings = _settings(request)
    return {
        "status": "ok",
        "ray_address": settings.ray_address,
        "tracking_uri": request.app.state.tracking_uri,
        "spec_dir": str(settings.spec_dir),
        "token_required": bool(settings.token),
        "job_memory_ceiling_bytes": request.app.state.job_ceiling,
        "all_jobs": settings.all_jobs,
    }


@router.get("/job-kinds", summary="The job kinds that can be launched and the JSON schema of their arguments")
def job_kinds(request: Request) -> dict[str, Any]:
    from elastune.config import RunConfig
    from elastune.untrusted import CLIENT_KEYS

    kinds = {}
    for name, model in launch.JOB_KINDS.items():
        kinds[name] = {"title": (model.__doc__ or name).strip(), "schema": model.model_json_schema()}
    return {
        "kinds": kinds,
        "specs": sorted(launch.list_specs(_settings(request).spec_dir)),
        "run_config_schema": RunConfig.model_json_schema(),
        "settable_keys": sorted(CLIENT_KEYS),  # the run-config keys a training job may override from here
    }


@router.get("/specs", summary="Sweep specs in the spec folder, with their budgets and limits")
def specs(request: Request) -> list[dict[str, Any]]:
    return [_spec_summary(name, path) for name, path in launch.list_specs(_settings(request).spec_dir).items()]


def _spec_summary(name: str, path: Any) -> dict[str, Any]:
    from elastune.errors import ConfigError, InputError
    from elastune.tuning.spec import load_sweep_spec

    try:
        spec = load_sweep_spec(path)
    except ConfigError as exc:
        return _invalid_spec(name, str(exc), [str(p) for p in exc.problems])
    except InputError as exc:
        return _invalid_spec(name, str(exc), [str(exc)])
    except Exception as exc:  # a spec a person wrote may break any rule: list it as invalid, never a 500
        line = f"cannot be read as a sweep spec ({type(exc).__name__}: {exc}); fix or remove the file"
        return _invalid_spec(name, line, [line])
    return {
        "name": name,
        "valid": True,
        "error": "",
        "title": spec.name,
        "description": spec.description,
        "parameters": list(spec.parameters),
        "memory_ceiling_bytes": spec.constraints.memory_ceiling,
        "max_trials": spec.budget.max_trials,
        "max_concurrent": spec.budget.max_concurrent,
        "cpus_per_trial": spec.resources.cpus_per_trial,
        "gpus_per_trial": spec.resources.gpus_per_trial,
    }


# -- jobs


def _invalid_spec(name: str, error: str, problems: list[str]) -> dict[str, Any]:
    return {"name": name, "valid": False, "error": launch.jsonable(error), "problems": launch.jsonable(problems)}


@router.get(
    "/jobs",
    summary="Jobs elastune launched on the Ray cluster (every job with --all-jobs), newest first",
    responses=_responses(503),
)
def list_jobs(request: Request) -> list[JobOut]:
    return [JobOut(**j) for j in _jobs(request).list()]


@router.post(
    "/jobs",
    status_code=201,
    summary="Launch a registered job kind (priced first: a job predicted over the UI's memory ceiling is refused)",
    responses=_responses(422, 503),
)
def launch_job(request: Request, job: Annotated[launch.JobRequest, Body()]) -> JobOut:
    # A plain `def`: FastAPI runs it in its thread pool, so pricing the job (a fake-tensor trace,
    # about a second) and talking to Ray never hold up the event loop.
    settings = _settings(request)
    reader = _sweeps(request)
    plan = launch.plan_launch(
        job,
        spec_dir=settings.spec_dir,
        python=settings.job_python,
        tracking_uri=request.app.state.tracking_uri,
        sweep_config=lambda sweep_id: _best_config(reader, sweep_id),
        job_ceiling=request.app.state.job_ceiling,
    )
    jobs = _jobs(request)
    return JobOut(**jobs.get(jobs.submit(plan)))


def _best_config(reader: SweepReader, sweep_id: str) -> tuple[list[Problem], dict[str, Any] | None]:
    """A sweep's best config, or why it cannot be launched from here. The stored config is held to
    the client allowlist: anyone who can write to the store could have planted it."""
    from elastune.untrusted import stored_config_problems

    def problem(message: str) -> tuple[list[Problem], None]:
        return [Problem("from_sweep", sweep_id, message)], None

    try:
        record = reader.load(sweep_id)
    except UnknownSweep:
        return problem("no sweep with this id in the tracking store; pick one from the sweep list")
    except StoreUnavailable as exc:
        return problem(str(exc))
    best = record.best()
    if best is None:
        return problem("this sweep has no trial that finished within its ceiling and quality tolerance yet")
    return stored_config_problems(best.config), best.config


@router.get("/jobs/{job_id}", summary="One job", responses=_responses(404, 503))
def get_job(request: Request, job_id: JobId) -> JobOut:
    return JobOut(**_jobs(request).get(job_id))


@router.get("/jobs/{job_id}/logs", summary="A job's log from `offset` on (poll it)", responses=_responses(404, 503))
def job_logs(
    request: Request,
    job_id: JobId,
    offset: Annotated[int, Query(ge=0, le=2**40, description="Characters already read.")] = 0,
) -> LogChunk:
    return LogChunk(**_jobs(request).logs(job_id, offset))


@router.post("/jobs/{job_id}/stop", summary="Stop a job", responses=_responses(404, 503))
def stop_job(request: Request, job_id: JobId) -> StopResult:
    return StopResult(**_jobs(request).stop(job_id))


# -- sweeps


@router.get("/sweeps", summary="Sweeps in the tracking store, newest first", responses=_responses(503))
def list_sweeps(request: Request) -> list[dict[str, Any]]:
    return _sweeps(request).list()


@router.get(
    "/sweeps/{sweep_id}",
    summary="A sweep with its trials, Pareto front, best trial and MLflow links",
    responses=_responses(404, 503),
)
def get_sweep(request: Request, sweep_id: SweepId) -> dict[str, Any]:
    return _sweeps(request).detail(sweep_id)


@router.get(
    "/sweeps/{sweep_id}/trials.csv",
    summary="The trial table as CSV",
    response_class=PlainTextResponse,
    responses={**_responses(404, 503), 200: {"content": {"text/csv": {}}}},
)
def sweep_csv(request: Request, sweep_id: SweepId) -> PlainTextResponse:
    text = trials_csv(_sweeps(request).load(sweep_id))
    disposition = f'attachment; filename="{_filename(sweep_id)}-trials.csv"'
    return PlainTextResponse(text, media_type="text/csv", headers={"content-disposition": disposition})


@router.get(
    "/sweeps/{sweep_id}/best-config.yaml",
    summary="The best trial's config, ready for `elastune train`",
    response_class=PlainTextResponse,
    responses={**_responses(404, 503), 200: {"content": {"application/yaml": {}}}},
)
def sweep_best_config(request: Request, sweep_id: SweepId) -> PlainTextResponse:
    text = best_config_yaml(_sweeps(request).load(sweep_id))
    if text is None:
        raise UnknownSweep(f"Sweep {sweep_id!r} has no trial that finished within its limits, so no best config yet.")
    disposition = f'attachment; filename="{_filename(sweep_id)}-best.yaml"'
    return PlainTextResponse(text, media_type="application/yaml", headers={"content-disposition": disposition})


def _filename(sweep_id: str) -> str:
    return "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "_" for c in sweep_id)[:80]


# -- memory


@router.get("/memory", summary="EDO: per device, each trial's grant and measured use, reserve, free; a timeline")
def memory(
    request: Request,
    timeline_s: Annotated[float, Query(ge=0, le=3600, description="Seconds of history.")] = 600,
) -> dict[str, Any]:
    return memory_view(request.app.state.memory_reader, timeline_s)
