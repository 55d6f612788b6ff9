"""The job kinds the UI may launch, their arguments, and the entrypoints the server builds from them.

The client never sends an entrypoint, a shell string, a runtime_env or a file path: it names a
registered kind and fills that kind's typed arguments (unknown fields are refused). Sweep specs are
chosen by *name* from the spec folder; the server resolves the path. The argument lists mirror
`python -m elastune.jobs.sweep` and `python -m elastune.jobs.train`.

The models are strict: `"4"` is not an integer here. The browser sends JSON numbers, and a request
that does not match the schema exactly must never turn into a launched job. Overrides are YAML read
by elastune.yamlsafe (no anchors, aliases, tags or merge keys), and with the UI's job ceiling a job
is priced before launch (pricing.py).
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

from elastune.errors import InputError, Problem
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ERROR_BODY_BYTES",
    "JOB_KINDS",
    "JobRequest",
    "LaunchPlan",
    "LaunchProblems",
    "SweepJob",
    "TrainJob",
    "error_body",
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


# What a sweep's stored best config is, read back for "Train this": (why it cannot be trained, the
# config); the problems are empty when it can.
SweepConfig = Callable[[str], tuple[list[Problem], Mapping[str, Any] | None]]


def plan_launch(
    job: SweepJob | TrainJob,
    *,
    spec_dir: Path,
    python: str,
    tracking_uri: str | None,
    sweep_config: SweepConfig | None = None,
    job_ceiling: int | None = None,
) -> LaunchPlan:
    """Turn validated arguments into the argv the cluster runs, or raise LaunchProblems.

    `sweep_config(sweep_id)` gives a sweep's best config, or why it cannot be trained (unknown
    sweep, no best trial, a stored config that sets keys a client may not). With `job_ceiling`
    (bytes), the job is priced first (pricing.py): a run predicted over it is refused, and a sweep
    runs with its memory ceiling at most that."""
    if isinstance(job, SweepJob):
        return _plan_sweep(job, spec_dir, python, tracking_uri, job_ceiling)
    return _plan_train(job, python, tracking_uri, sweep_config, job_ceiling)


def _plan_sweep(
    job: SweepJob, spec_dir: Path, python: str, tracking_uri: str | None, job_ceiling: int | None
) -> LaunchPlan:
    specs = list_specs(spec_dir)
    if job.spec not in specs:
        names = ", ".join(specs) or "none (the folder is empty)"
        raise LaunchProblems([Problem("spec", job.spec, f"no such spec in {spec_dir}; choose one of: {names}")])
    ceiling = job.memory_ceiling
    if job_ceiling is not None:
        from elastune.ui.pricing import sweep_ceiling

        flags = {
            "budget.max_trials": job.max_trials,
            "budget.max_concurrent": job.max_concurrent,
            "resources.cpus_per_trial": job.cpus_per_trial,
            "resources.gpus_per_trial": job.gpus_per_trial,
        }
        problems, ceiling = sweep_ceiling(specs[job.spec], job.spec, flags, job.memory_ceiling, job_ceiling)
        if problems:
            raise LaunchProblems(problems)
    argv = [python, "-m", "elastune.jobs.sweep", str(specs[job.spec].resolve())]
    options: Sequence[tuple[str, object]] = (
        ("--memory-ceiling", ceiling),
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
    job: TrainJob, python: str, tracking_uri: str | None, sweep_config: SweepConfig | None, job_ceiling: int | None
) -> LaunchPlan:
    problems = set_problems(job.sets)
    stored: Mapping[str, Any] | None = None
    if job.from_sweep is not None and sweep_config is not None:
        refused, stored = sweep_config(job.from_sweep)
        problems += refused
    if problems:
        raise LaunchProblems(problems)
    if job_ceiling is not None:
        from elastune.ui.pricing import train_problems
        from elastune.untrusted import parse_client_overrides

        nested, _ = parse_client_overrides(job.sets)  # read without a problem by set_problems above
        problems = train_problems(stored or {}, nested, job_ceiling)
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
    values refused as YAML (elastune.yamlsafe: anchors, aliases, tags, merge keys, oversized; no
    further check reads them), keys a client may not set (elastune.untrusted: nothing that names a
    file), then the config's own validation of the pairs not refused."""
    from elastune.untrusted import override_problems, parse_client_overrides
    from elastune.validate import config_problems

    nested, unreadable = parse_client_overrides(sets)
    if unreadable:
        return unreadable
    refused = override_problems(sets)
    named = {p.path for p in refused}
    if refused:
        # The config's validation builds the workload, and a `workload` import path imports its
        # module: what was refused is never validated, only the pairs refused on their own are left out
        nested, _ = parse_client_overrides([item for item in sets if not override_problems([item])])
    _, invalid = config_problems(nested)
    return refused + [Problem(f"sets.{p.path}", p.value, p.message) for p in invalid if f"sets.{p.path}" not in named]


def problem_dicts(problems: Sequence[Problem]) -> list[dict[str, Any]]:
    from elastune.errors import MISSING

    return [
        {"field": p.path, "value": None if p.value is MISSING else jsonable(p.value), "message": p.message}
        for p in problems
    ]


_ECHO_CHARS = 300  # a value echoed in an error is cut here: the client sent it, it need not come back whole
_ECHO_DEPTH = 4  # nesting echoed; deeper is summarised (a value that contains itself ends here too)
ERROR_BODY_BYTES = 4096  # the most an error body is, whatever the request held


def jsonable(value: object, _depth: int = 0) -> Any:
    """`value` as something JSON can always encode, for echoing client input in an error body:
    non-finite floats as text ("nan", "inf"; strict JSON has no NaN), lone surrogates escaped
    (UTF-8 cannot encode them), long strings and huge integers cut, deep nesting summarised."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if abs(value) < 10**18 else f"<a {value.bit_length()}-bit number>"  # str() refuses >4300 digits
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Mapping | list | tuple) and _depth >= _ECHO_DEPTH:
        return _summary(value)
    if isinstance(value, Mapping):
        return {_text(str(k)): jsonable(v, _depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list | tuple):
        return [jsonable(v, _depth + 1) for v in value[:50]]
    return _text(str(value))


def error_body(detail: str, problems: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """`{"detail", "problems"}` as JSON can always encode it (jsonable), in at most
    ERROR_BODY_BYTES: when the whole is longer, each echoed value is summarised, then the problems
    that do not fit are left out and counted in a last one (the client fixes these and sends again)."""
    body: dict[str, Any] = jsonable({"detail": detail, "problems": list(problems)})
    if _size(body) <= ERROR_BODY_BYTES and len(body["problems"]) == len(problems):  # jsonable keeps 50
        return body
    shown = [{**problem, "value": _short(problem.get("value"))} for problem in body["problems"]]
    room = ERROR_BODY_BYTES - _size({"detail": body["detail"], "problems": []}) - 200  # 200: the count's line
    kept = []
    for problem in shown:
        room -= _size(problem) + 1
        if room < 0:
            break
        kept.append(problem)
    if len(kept) < len(problems):
        left_out = len(problems) - len(kept)
        note = (
            f"{left_out} more problem(s) not shown (an error body is at most {ERROR_BODY_BYTES} bytes); fix these first"
        )
        kept.append({"field": "problems", "value": left_out, "message": note})
    return {"detail": body["detail"], "problems": kept}


def _size(value: Any) -> int:
    import json

    return len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8"))


def _short(value: Any) -> Any:
    """An echoed value in a few dozen characters."""
    if isinstance(value, str):
        return value if len(value) <= 60 else value[:57] + "..."
    if isinstance(value, Mapping | list | tuple):
        return _summary(value)
    return value


def _summary(value: Mapping[Any, Any] | list[Any] | tuple[Any, ...]) -> str:
    kind = "mapping" if isinstance(value, Mapping) else "list"
    return f"<a {kind} of {len(value)} item(s), not echoed>"


def _text(value: str) -> str:
    cut = value if len(value) <= _ECHO_CHARS else value[: _ECHO_CHARS - 3] + "..."
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")
