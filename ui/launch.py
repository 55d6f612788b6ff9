"""The job kinds the UI may launch, their arguments, and the entrypoints the server builds from them.

The client never sends an entrypoint, a shell string, a runtime_env or a file path: it names a
registered kind and fills that kind's typed arguments (unknown fields are refused). Sweep specs are
chosen by *name* from the spec folder; the server resolves the path. The argument lists mirror
`python -m elastune.jobs.sweep` and `python -m elastune.jobs.train`.

The models are strict: `"4"` is not an integer here. The browser sends JSON numbers, and a request
that does not match the schema exactly must never turn into a launched job.
"""

from __future__ import annotations

import math
import re
import secrets
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from elastune.errors import ConfigError, InputError, Problem
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "JOB_KINDS",
    "JobRequest",
    "LaunchPlan",
    "LaunchProblems",
    "SweepJob",
    "TrainJob",
    "jsonable",
    "list_specs",
    "new_job_id",
    "plan_launch",
    "problem_dicts",
    "set_problems",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_SWEEP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


class _Args(BaseModel):
    # allow_inf_nan=False: JSON bodies may carry NaN, Infinity or 1e999 (Python's parser accepts them).
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class SweepJob(_Args):
    """Search for the fastest configuration of a spec inside a memory ceiling."""

    kind: Literal["sweep"] = Field("sweep", description="Job kind.")
    spec: str = Field(
        min_length=1,
        max_length=100,
        title="Search space",
        description="A spec from the search_spaces folder, by name (no path).",
    )
    memory_ceiling: str | None = Field(
        None,
        max_length=32,
        title="Memory ceiling",
        description="Peak device memory a trial may use, e.g. 512MiB, 2GiB, 1.5GB. Empty: the spec's own.",
    )
    max_trials: int | None = Field(
        None, ge=1, le=10_000, title="Trial budget", description="Trials to propose. Empty: the spec's."
    )
    max_concurrent: int | None = Field(
        None, ge=1, le=1024, title="Trials at once", description="Trials running together. Empty: the spec's."
    )
    cpus_per_trial: float | None = Field(None, gt=0, le=1024, title="CPUs per trial", description="Empty: the spec's.")
    gpus_per_trial: float | None = Field(
        None, ge=0, le=64, title="GPUs per trial", description="Below 1 shares a GPU (EDO). Empty: the spec's."
    )

    @field_validator("spec")
    @classmethod
    def _a_name_not_a_path(cls, value: str) -> str:
        if "/" in value or "\\" in value or value.startswith(".") or not _NAME.match(value):
            raise ValueError(
                f"{value!r} is not a spec name; choose one by name from the list (letters, digits, _ . -; no paths)"
            )
        return value

    @field_validator("memory_ceiling")
    @classmethod
    def _a_size(cls, value: str | None) -> str | None:
        from elastune.units import parse_bytes

        if value is None or not value.strip():
            return None
        parse_bytes(value)  # raises ValueError that says which forms are accepted
        return value.strip()


class TrainJob(_Args):
    """Train one configuration: a sweep's best, with optional overrides."""

    kind: Literal["train"] = Field("train", description="Job kind.")
    from_sweep: str | None = Field(
        None,
        max_length=200,
        title="Start from a sweep's best",
        description="A sweep id; its best configuration is trained. Empty: the default config.",
    )
    sets: list[Annotated[str, Field(max_length=500)]] = Field(
        default_factory=list,
        max_length=200,
        title="Overrides",
        description="key=value pairs with dotted keys, e.g. batch.micro=2048.",
    )

    @field_validator("from_sweep")
    @classmethod
    def _an_id(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not _SWEEP_ID.match(value):
            raise ValueError(f"{value!r} is not a sweep id; pick one from the sweep list")
        return value


JobRequest = Annotated[SweepJob | TrainJob, Field(discriminator="kind")]
JOB_KINDS: dict[str, type[_Args]] = {"sweep": SweepJob, "train": TrainJob}


class LaunchProblems(InputError):
    """The request is well-formed but refers to things that do not exist or do not validate."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(frozen=True)
class LaunchPlan:
    kind: str
    argv: list[str]
    metadata: dict[str, str]
    job_id: str  # the Ray submission id, chosen here: a job's files are keyed by it, never by the client

    @property
    def entrypoint(self) -> str:
        # shlex.join quotes every argument: nothing the client chose is ever read by a shell as syntax.
        return shlex.join(self.argv)


def list_specs(spec_dir: Path) -> dict[str, Path]:
    """Spec files directly in the folder, by name (the file name without .yaml / .yml)."""
    if not spec_dir.is_dir():
        return {}
    found: dict[str, Path] = {}
    for path in sorted(spec_dir.iterdir()):
        if path.suffix in (".yaml", ".yml") and path.is_file() and _NAME.match(path.stem):
            found.setdefault(path.stem, path)
    return found


def new_job_id(kind: str) -> str:
    return f"elastune-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def plan_launch(
    job: SweepJob | TrainJob,
    *,
    spec_dir: Path,
    python: str,
    tracking_uri: str | None,
    sweep_problems: Callable[[str], list[Problem]] | None = None,
) -> LaunchPlan:
    """Turn validated arguments into the argv the cluster runs, or raise LaunchProblems.

    `sweep_problems(sweep_id)` says why a sweep's best config cannot be trained (unknown sweep, no
    best trial, a stored config that sets keys a client may not); empty when it can."""
    if isinstance(job, SweepJob):
        return _plan_sweep(job, spec_dir, python, tracking_uri)
    return _plan_train(job, python, tracking_uri, sweep_problems)


def _plan_sweep(job: SweepJob, spec_dir: Path, python: str, tracking_uri: str | None) -> LaunchPlan:
    specs = list_specs(spec_dir)
    if job.spec not in specs:
        names = ", ".join(specs) or "none (the folder is empty)"
        raise LaunchProblems([Problem("spec", job.spec, f"no such spec in {spec_dir}; choose one of: {names}")])
    argv = [python, "-m", "elastune.jobs.sweep", str(specs[job.spec].resolve())]
    options: Sequence[tuple[str, object]] = (
        ("--memory-ceiling", job.memory_ceiling),
        ("--max-trials", job.max_trials),
        ("--max-concurrent", job.max_concurrent),
        ("--cpus-per-trial", job.cpus_per_trial),
        ("--gpus-per-trial", job.gpus_per_trial),
        ("--tracking-uri", tracking_uri),
    )
    for flag, value in options:
        if value is not None:
            argv += [flag, str(value)]
    return LaunchPlan("sweep", argv, {"elastune_kind": "sweep", "elastune_spec": job.spec}, new_job_id("sweep"))


def _plan_train(
    job: TrainJob, python: str, tracking_uri: str | None, sweep_problems: Callable[[str], list[Problem]] | None
) -> LaunchPlan:
    problems = set_problems(job.sets)
    if job.from_sweep is not None and sweep_problems is not None:
        problems += sweep_problems(job.from_sweep)
    if problems:
        raise LaunchProblems(problems)
    # --untrusted: the job checks the overrides and the stored config against the same allowlist
    # again (the store may change after this check) and writes its checkpoint where it chooses.
    argv = [python, "-m", "elastune.jobs.train", "--untrusted"]
    if job.from_sweep is not None:
        argv += ["--from-sweep", job.from_sweep]
    for item in job.sets:
        argv += ["--set", item]
    if tracking_uri is not None:
        argv += ["--tracking-uri", tracking_uri]
    metadata = {"elastune_kind": "train", "elastune_from_sweep": job.from_sweep or ""}
    return LaunchPlan("train", argv, metadata, new_job_id("train"))


def set_problems(sets: Sequence[str]) -> list[Problem]:
    """Problems of `--set` pairs, each named `sets.<key>` so the form shows it beside that field:
    keys a client may not set (elastune.untrusted: nothing that names a file), then the config's
    own validation."""
    from elastune.untrusted import override_problems
    from elastune.validate import load_run_config

    refused = override_problems(sets)
    try:
        load_run_config(None, list(sets))
    except ConfigError as exc:
        named = {p.path for p in refused}
        return refused + [
            Problem(f"sets.{p.path}", p.value, p.message) for p in exc.problems if f"sets.{p.path}" not in named
        ]
    return refused


def problem_dicts(problems: Sequence[Problem]) -> list[dict[str, Any]]:
    from elastune.errors import MISSING

    return [
        {"field": p.path, "value": None if p.value is MISSING else jsonable(p.value), "message": p.message}
        for p in problems
    ]


_ECHO_CHARS = 300  # a value echoed in an error is cut here: the client sent it, it need not come back whole


def jsonable(value: object) -> Any:
    """`value` as something JSON can always encode, for echoing client input in an error body:
    non-finite floats as text ("nan", "inf"; strict JSON has no NaN), lone surrogates escaped
    (UTF-8 cannot encode them), long strings and huge integers cut."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if abs(value) < 10**18 else f"<a {value.bit_length()}-bit number>"  # str() refuses >4300 digits
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Mapping):
        return {_text(str(k)): jsonable(v) for k, v in list(value.items())[:50]}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value[:50]]
    return _text(str(value))


def _text(value: str) -> str:
    cut = value if len(value) <= _ECHO_CHARS else value[: _ECHO_CHARS - 3] + "..."
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")
