"""SweepSpec: what a sweep searches, under which limits, with which budget. A YAML file in
`search_spaces/`, validated here with the engine's error style (every problem at once, each with
its field path, the value and the fix; exit 2; nothing launched).

```yaml
name: dlrm_quick
base: {steps: 60, data: {rows_scale: 0.002}}        # a RunConfig; the parameters vary it
parameters:
  embedding.strategy: {type: choice, values: [full, half, hashed]}
  optimizer.sparse: {type: choice, values: [sgd, rowwise_adagrad], when: {embedding.strategy: [half]}}
  batch.micro: {type: choice, values: [256, 512, 1024]}
  embedding.compression: {type: float, low: 2, high: 16, log: true, when: {embedding.strategy: [hashed]}}
objective: {metric: samples_per_s, mode: max}
constraints: {memory_ceiling: 1GiB, quality_tolerance: 0.02, effective_batch: 1024}   # or {tokens: N}
budget: {max_trials: 12, max_concurrent: 2, trial_samples: 65536}
search: {algorithm: tpe, seed: 0, scheduler: asha}
resources: {cpus_per_trial: 1, gpus_per_trial: 0, workers_per_trial: 1}
```

A parameter with `when` is only drawn when every named parameter (drawn before it) took one of the
listed values; otherwise the base config's value stands. A parameter is a run-config key, or one of
the base workload's own options, `workload_options.KEY` (checked against its options model, each
candidate value through it).
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from elastune.component_checks import component_problems
from elastune.config import (
    PER_TABLE_FIELDS,
    RunConfig,
    TableMatch,
    apply_overrides,
    moved_key_message,
    parse_overrides,
    problems_from_validation,
)
from elastune.dotted import nest
from elastune.errors import MISSING, ConfigError, Problem
from elastune.tuning.space import ChoiceParam, FloatParam, IntParam, Parameter, candidate_points, point_problem
from elastune.units import MAX_BYTES, parse_bytes
from elastune.validate import config_problems, data_files_said, read_with_data_files
from elastune.workloads import WorkloadError, build_workload
from elastune.workloads.registry import option_keys, options_model, resolve

__all__ = [
    "Budget",
    "ChoiceParam",
    "Constraints",
    "EdoSettings",
    "FloatParam",
    "IntParam",
    "Resources",
    "Search",
    "SweepSpec",
    "TokenBudget",
    "check_spec",
    "load_sweep_spec",
]


_BIG = 10**12  # a bound for a searched int or float: finite, far beyond any real range
MAX_EFFECTIVE_BATCH = 1 << 30  # samples (sequences) per optimizer step
MAX_BATCH_TOKENS = 1 << 40  # a token budget's padded tokens per optimizer step
_SEQUENCES = TypeAdapter(Annotated[int, Field(ge=1, le=MAX_EFFECTIVE_BATCH)])
_WHOLE = re.compile(r"\s*[+-]?[0-9]{1,30}\s*", re.ASCII)


class _Section(BaseModel):
    # Finite numbers only, each bounded: a spec may come from a remote client (the web UI).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Objective(_Section):
    metric: Literal["samples_per_s"] = Field(
        "samples_per_s", description="What the sweep maximizes (ASHA and the sampler use it)."
    )
    mode: Literal["max"] = Field("max", description="max: the higher the better (the only mode).")


def _whole_number(value: Any, what: str) -> Any:
    """`value` for pydantic's int (which takes 64.0 and "64"), but not a bool or a word: YAML reads
    `yes` and `true` as booleans, and pydantic would take them as 1."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a whole number of {what}")
    if isinstance(value, str) and not _WHOLE.fullmatch(value):
        raise ValueError(f"must be a whole number of {what}, in digits without separators or units")
    return value


class TokenBudget(_Section):
    """`constraints.effective_batch: {tokens: N}`: an optimizer step of N padded tokens, rows x
    context, as nanoGPT counts `tokens_per_iter` (accumulation x batch x block size). A sequence
    workload (an LM) takes N / context sequences per step, each one row of at most the context:
    static padding makes exactly N tokens, dynamic padding and packing fewer, so N bounds the step
    with every padding mode. A workload without a context length has no token budget."""

    tokens: int = Field(
        ge=1, le=MAX_BATCH_TOKENS, description="Padded tokens per optimizer step: a multiple of the context."
    )

    @field_validator("tokens", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        return _whole_number(value, "tokens (e.g. 65536)")


class Constraints(_Section):
    memory_ceiling: int | None = Field(
        None,
        ge=1,
        le=MAX_BYTES,
        description="Peak memory a trial may use (512MiB, 2GiB, 1.5GB or bytes); none = no ceiling.",
    )
    quality_tolerance: float | None = Field(
        0.02,
        ge=0,
        le=1,
        description="The workload's quality metric (DLRM: eval log loss; its own for any other) no worse than the "
        "reference's by more than this share of the reference's value, in the metric's direction; none = off.",
    )
    reference: dict[str, Any] = Field(
        default_factory=dict, description="Dotted overrides of `base` that make the reference config."
    )
    reference_over_ceiling: Literal["refuse", "allow"] = Field(
        "refuse",
        description="A reference predicted over memory_ceiling: refuse the sweep at preflight (default), or allow "
        "it (the reference then runs over the ceiling every trial is held to).",
    )
    effective_batch: int | TokenBudget | None = Field(
        None,
        description="Fix micro x accum to this many samples (an LM's sequences), or to {tokens: N}: N padded "
        "tokens per step (rows x context), N / context sequences; only splits of it are searched (accum is derived).",
    )

    @field_validator("memory_ceiling", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_bytes(value)

    @field_validator("effective_batch", mode="before")
    @classmethod
    def _batch(cls, value: Any) -> Any:
        # Either form validated alone, so a mistake in one is not reported as a mismatch of the other
        # too: a mapping's errors land at effective_batch.tokens (or its stray key), a number's here.
        if value is None or isinstance(value, TokenBudget):
            return value
        if isinstance(value, Mapping):
            return TokenBudget.model_validate(value)
        return _SEQUENCES.validate_python(_whole_number(value, "samples (e.g. 64; an LM's sequences) or {tokens: N}"))


class Budget(_Section):
    max_trials: int = Field(12, ge=1, le=10_000, description="Proposals, screened-out ones included.")
    max_concurrent: int = Field(2, ge=1, le=1024, description="Trials running at once.")
    trial_steps: int | None = Field(
        None, ge=2, le=10**9, description="Optimizer steps per trial (or give trial_samples)."
    )
    trial_samples: int | None = Field(
        None, ge=1, le=10**15, description="Training samples per trial; default base.steps x base's effective batch."
    )
    time_limit_s: float | None = Field(
        None, gt=0, le=365 * 86400, description="Stop launching after this many seconds."
    )


class Confirm(_Section):
    """The confirmation stage: at the end of a sweep the fastest feasible configs are measured again,
    each round the reference first and then each of them, one at a time (A B C A B C ...), and
    ranked by the median of their per-round ratios to the reference, which cancels what the machine
    did to a whole round. The sweep's best is the confirmed one."""

    top: int = Field(3, ge=0, le=20, description="Feasible configs re-measured (0: no confirmation stage).")
    rounds: int = Field(3, ge=1, le=20, description="Rounds; each runs the reference and every config once.")


class Search(_Section):
    algorithm: Literal["tpe", "random", "grid"] = Field(
        "tpe",
        description="tpe: Optuna's TPE (multivariate), every second proposal after its startup an untried config "
        "nearest the best so far where the space is discrete (up to 10,000 points); random; grid: every point of the "
        "space, in order.",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="The sampler's seed: the same spec and seed propose the same.")
    scheduler: Literal["asha", "none"] = Field("asha", description="asha stops slow trials at throughput rungs.")
    grace_fraction: float = Field(
        0.3, gt=0, le=1, description="asha: share of a trial's steps before it can be stopped."
    )
    reduction_factor: float = Field(
        2.0, ge=1.5, le=8, description="asha: a rung keeps the best 1/reduction_factor of the trials reaching it."
    )


class Resources(_Section):
    """What one trial runs on. The CPU and GPU figures are per worker: a trial of N workers takes
    N x cpus_per_trial CPUs and N x gpus_per_trial GPUs (tuning/worker_group.py)."""

    cpus_per_trial: float = Field(1.0, gt=0, le=1024, description="CPUs per worker of a trial.")
    gpus_per_trial: float = Field(
        0.0, ge=0, le=64, description="GPUs per worker; below 1 shares a GPU (one worker per trial only)."
    )
    workers_per_trial: int = Field(
        1,
        ge=1,
        le=1024,
        description="Data-parallel workers per trial. 1: the trial trains in its own process. N > 1: a Ray Train "
        "worker group of N torch DDP workers, each with the per-worker CPUs/GPUs; the effective batch is "
        "micro x accum x N; only configs with dense gradients (optimizer.sparse=adam, torch backend) qualify.",
    )


class EdoSettings(_Section):
    """EDO (memory/): co-located trials share a device's memory through the broker's grants."""

    mode: Literal["auto", "on", "off"] = Field("auto", description="auto: on when gpus_per_trial is below 1.")
    virtual_capacity: int | None = Field(
        None,
        ge=1,
        le=MAX_BYTES,
        description="On CPUs, the capacity of each node's virtual device (e.g. 2GiB); "
        "default: the memory ceiling x max_concurrent. GPUs report their own capacity.",
    )
    reserve: int = Field(
        0, ge=0, le=MAX_BYTES, description="Bytes of each device never granted (CUDA contexts live outside the grants)."
    )
    acquire_timeout_s: float = Field(
        300.0, gt=0, le=7 * 86400, description="How long a trial waits for its first grant."
    )

    @field_validator("virtual_capacity", "reserve", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return value if value is None or value == 0 else parse_bytes(value)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)


class SweepSpec(_Section):
    name: str = Field(
        "sweep",
        description="Names the sweep (its id is NAME-DATE-TIME-HEX) and its state folder: letters, digits, "
        "'_', '.', '-', starting with a letter or digit, at most 64 characters.",
    )
    description: str = Field("", description="Free text, shown with the sweep.")
    base: dict[str, Any] = Field(default_factory=dict, description="A RunConfig (partial) the parameters vary.")
    parameters: dict[str, Parameter] = Field(
        min_length=1, description="The searched keys: a dotted run-config key -> a choice, int or float range."
    )
    objective: Objective = Field(default_factory=lambda: Objective())
    constraints: Constraints = Field(default_factory=lambda: Constraints())
    budget: Budget = Field(default_factory=lambda: Budget())
    confirm: Confirm = Field(default_factory=lambda: Confirm())
    search: Search = Field(default_factory=lambda: Search())
    resources: Resources = Field(default_factory=lambda: Resources())
    edo: EdoSettings = Field(default_factory=lambda: EdoSettings())

    @field_validator("name")
    @classmethod
    def _name_is_an_identifier(cls, value: str) -> str:
        # The name becomes a folder under $ELASTUNE_HOME/sweeps: '../x' or '/x' would write elsewhere.
        if not _NAME.fullmatch(value):
            raise ValueError(
                "must be letters, digits, '_', '.' or '-', starting with a letter or digit, at most 64 "
                "characters (it names the sweep's folder), e.g. dlrm_quick"
            )
        return value

    # -- derived: how one proposal becomes a RunConfig

    def point_problem(self, params: Mapping[str, Any]) -> str | None:
        """Why `params` are not a point of this spec's space (tuning/space.py); None if they are."""
        return point_problem(self.parameters, params)

    def base_config(self) -> RunConfig:
        return RunConfig.model_validate(self.base)

    def trial_config(self, params: Mapping[str, Any]) -> RunConfig:
        """The base config with `params` (dotted keys) applied, steps set by the budget. With N
        workers per trial the config is one worker's: the step's batch is micro x accum x N."""
        raw = apply_overrides(self.base, nest(params))
        if "threads" not in raw:  # measure with the threads the trial's CPUs give it, and record them
            raw["threads"] = self.trial_threads()
        cfg = RunConfig.model_validate(raw)
        workers = self.resources.workers_per_trial
        effective = self.effective_sequences()
        if effective is not None:
            raw = apply_overrides(raw, {"batch": {"accum": effective // (cfg.batch.micro * workers)}})
        steps = self._steps_for(cfg, effective or cfg.batch.effective * workers)
        return RunConfig.model_validate(apply_overrides(raw, steps))

    def effective_sequences(self) -> int | None:
        """`constraints.effective_batch` in samples (an LM's sequences): as given, or a token budget
        divided by the base workload's context (None: not fixed). Raises ConfigError where the
        budget does not convert, which validation has said already."""
        budget = self.constraints.effective_batch
        if not isinstance(budget, TokenBudget):
            return budget
        problems = _token_problems(self, budget)
        if problems:
            raise ConfigError(problems)
        return budget.tokens // (self.sequence_context() or 1)

    def sequence_context(self) -> int | None:
        """Tokens per row of the base config's workload (its optional `context`: an LM's context
        length), the unit a token budget is counted in; None for a workload without one (DLRM).
        Every trial has the base's context: with a token budget, check_spec refuses a searched
        option that changes it (`_context_problems`)."""
        return _context_of(json.dumps(self.base, sort_keys=True, default=str))

    def trial_threads(self) -> int:
        """torch's intra-op threads in a trial: its CPUs (at least one). Ray sets $OMP_NUM_THREADS to
        them too, but only where a trial asks for whole CPUs; the config says it for every trial, so
        `elastune train --from-sweep` reruns the best config as it was measured."""
        return max(1, int(self.resources.cpus_per_trial))

    def reference_config(self) -> RunConfig:
        return self.trial_config(self.constraints.reference)

    def trial_device(self, cfg: RunConfig) -> str:
        """The device a trial of `cfg` trains on, which is what the estimator must price; the
        sweep's driver need not have it (a CPU head node drives GPU trials). `auto` is a GPU when
        the spec gives each trial one (Ray makes it the trial's cuda:0), else the CPU."""
        if cfg.device != "auto":
            return cfg.device
        return "cuda" if self.resources.gpus_per_trial > 0 else "cpu"

    def _steps_for(self, cfg: RunConfig, effective: int) -> dict[str, Any]:
        if self.budget.trial_steps is not None:
            steps = self.budget.trial_steps
        else:
            base = self.base_config()
            samples = self.budget.trial_samples or base.steps * base.batch.effective * self.resources.workers_per_trial
            steps = max(2, math.ceil(samples / effective))
        # Warm-up stays a small share of the trial so short trials still measure most steps.
        return {"steps": steps, "warmup_steps": min(cfg.warmup_steps, max(1, steps // 5))}

    @property
    def uses_edo(self) -> bool:
        return self.edo.mode == "on" or (self.edo.mode == "auto" and 0 < self.resources.gpus_per_trial < 1)

    def virtual_capacity(self) -> int | None:
        """The virtual device's capacity on CPU nodes (None: no ceiling to derive it from)."""
        if self.edo.virtual_capacity is not None:
            return self.edo.virtual_capacity
        ceiling = self.constraints.memory_ceiling
        return ceiling * self.budget.max_concurrent if ceiling else None


# ---------------------------------------------------------------------------------------------
# Loading and the checks pydantic cannot express (they need RunConfig and each other).


def load_sweep_spec(path: Path | str, overrides: Sequence[str] = ()) -> SweepSpec:
    """Read a spec file, apply `--set`-style overrides (`budget.max_trials=4`), validate all of it.

    A relative data file in the file's base (base.data.path, base.data.eval_path) is taken from the
    file's folder, as in a run config, so a spec and its data move together and every trial reads
    the same file wherever it runs; one given with --set is taken from the working directory."""
    raw, taken = read_with_data_files(Path(path), under="base")
    raw = apply_overrides(raw, parse_overrides(overrides))
    with data_files_said(taken, str(path)):
        return validate_sweep_spec(raw, source=str(path))


def validate_sweep_spec(raw: Mapping[str, Any], source: str | None = None) -> SweepSpec:
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, SweepSpec, raw), source=source) from None
    problems = check_spec(spec)
    if problems:
        raise ConfigError(problems, source=source)
    return spec


# Run-config fields a sweep may set in `base` but never search: the tuner ranks by speed inside a
# quality tolerance, and these trade quality for nothing it measures.
NOT_SEARCHED = {
    "optimizer.clip_grad_norm": "gradient clipping changes what the model learns, not how fast it trains; "
    "set it in base (or leave it off) so every trial and the reference train alike",
}


def check_spec(spec: SweepSpec) -> list[Problem]:
    """Every cross-field problem: keys that are not RunConfig fields, values RunConfig refuses,
    conditions on parameters that do not exist, batch splits that do not divide, grid on floats."""
    problems = _base_problems(spec)
    if problems:
        return problems  # every other check builds on a valid base
    names = list(spec.parameters)
    for index, (name, param) in enumerate(spec.parameters.items()):
        where = f"parameters.{name}"
        unknown = _unknown_field(spec, name)
        if unknown:
            problems.append(Problem(where, MISSING, unknown))
            continue
        if name in NOT_SEARCHED:
            problems.append(Problem(where, MISSING, NOT_SEARCHED[name]))
            continue
        problems += _range_problems(where, param)
        problems += _value_problems(spec, where, name, param)
        problems += _condition_problems(spec, where, param, names[:index])
    problems += _batch_problems(spec)
    problems += _context_problems(spec)
    problems += _parallel_problems(spec)
    if not problems:
        problems += _combination_problems(spec)
    if spec.budget.trial_steps is not None and spec.budget.trial_samples is not None:
        problems.append(Problem("budget", MISSING, "set budget.trial_steps or budget.trial_samples, not both"))
    if spec.search.algorithm == "grid":
        for name, param in spec.parameters.items():
            if isinstance(param, FloatParam) and param.step is None:
                problems.append(
                    Problem(f"parameters.{name}", MISSING, "grid search needs discrete values; give a step or a choice")
                )
    if spec.edo.mode == "on" and spec.resources.gpus_per_trial == 0 and spec.virtual_capacity() is None:
        problems.append(
            Problem(
                "edo.virtual_capacity", MISSING, "EDO on CPUs needs a device size: set it or constraints.memory_ceiling"
            )
        )
    for key in spec.constraints.reference:
        unknown = _unknown_field(spec, key)
        if unknown:
            problems.append(Problem(f"constraints.reference.{key}", MISSING, unknown))
    return problems


def _base_problems(spec: SweepSpec) -> list[Problem]:
    _, problems = config_problems(spec.base)
    return [Problem(f"base.{p.path}", p.value, p.message) for p in problems]


def _unknown_override_field(parts: list[str]) -> str | None:
    """`embedding.overrides.N.FIELD` or `embedding.overrides.N.match.name|min_rows` (the list must
    have item N in the base: checked when the config is built)."""
    if len(parts) >= 2 and parts[0].isdigit():
        if len(parts) == 2 and parts[1] in PER_TABLE_FIELDS:
            return None
        if len(parts) == 3 and parts[1] == "match" and parts[2] in TableMatch.model_fields:
            return None
    return (
        "an override is addressed as embedding.overrides.N.FIELD (FIELD one of "
        f"{', '.join(sorted(PER_TABLE_FIELDS))}) or embedding.overrides.N.match.name / .min_rows"
    )


def _unknown_field(spec: SweepSpec, dotted: str) -> str | None:
    """None when `dotted` names a RunConfig field or an option of the base's workload
    (`workload_options.KEY`), else the message (with a 'did you mean', or where a key moved)."""
    moved = moved_key_message(dotted)
    if moved is not None:
        return moved
    parts = dotted.split(".")
    if parts[:2] == ["embedding", "overrides"]:
        return _unknown_override_field(parts[2:])
    if parts[0] == "workload_options" and len(parts) > 1:
        workload = spec.base_config().workload
        try:
            model = options_model(resolve(workload), workload)
        except WorkloadError as exc:  # the base was built once already: only a plugin that changed since
            return str(exc)
        if model is None:
            return (
                f"workload {workload!r} takes no options; search a run-config key, or set base.workload to one "
                "that has this option"
            )
        return _unknown_in(model, parts[1:], ["workload_options"], f"not an option of workload {workload!r}")
    return _unknown_in(RunConfig, parts, [], "not a run config key")


def _unknown_in(model: type[BaseModel], parts: list[str], prefix: list[str], what: str) -> str | None:
    """None when `parts` walk `model`'s fields (sections by their own fields) to a leaf, else why not."""
    current: Any = model
    for depth, part in enumerate(parts):
        # a workload's options are given by name or alias (pydantic's own rule); RunConfig by name
        fields = option_keys(current) if prefix else list(current.model_fields)
        if part not in fields:
            here = [*prefix, *parts[:depth]]
            candidates = [".".join([*here, f]) for f in fields]
            close = difflib.get_close_matches(".".join([*prefix, *parts]), candidates, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return f"{what}; {hint}valid keys here: {', '.join(sorted(fields))}"
        named = current.model_fields.get(part)
        field = named or next(f for f in current.model_fields.values() if f.alias == part)
        annotation = field.annotation
        is_section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        path = ".".join([*prefix, *parts[: depth + 1]])
        if depth < len(parts) - 1:
            if not is_section:
                return f"{path} has no sub-keys"
            current = annotation
        elif is_section:
            return f"{path} is a section; name one of its keys, e.g. {path}.{next(iter(annotation.model_fields))}"
    return None


def _range_problems(where: str, param: Parameter) -> list[Problem]:
    if isinstance(param, ChoiceParam):
        return []
    out = []
    if param.low > param.high:
        out.append(Problem(f"{where}.low", param.low, f"must be ≤ high ({param.high}); swap them"))
    if param.log and param.low <= 0:
        out.append(Problem(f"{where}.low", param.low, "a log scale needs low > 0"))
    return out


def _value_problems(spec: SweepSpec, where: str, name: str, param: Parameter) -> list[Problem]:
    """Each candidate (each choice, or both ends of a range) must make a valid RunConfig."""
    if isinstance(param, ChoiceParam):
        candidates = list(enumerate(param.values))
        label = "values[{}]"
    else:
        candidates = [(0, param.low), (1, param.high)]
        label = "{}"
    out = []
    for index, value in candidates:
        raw = apply_overrides(spec.base, nest({name: value}))
        _, problems = config_problems(raw)
        for problem in (p for p in problems if p.path == name):
            field = label.format(index if isinstance(param, ChoiceParam) else ("low", "high")[index])
            out.append(Problem(f"{where}.{field}", value, problem.message))
    return out


def _condition_problems(spec: SweepSpec, where: str, param: Parameter, earlier: list[str]) -> list[Problem]:
    out = []
    for key, allowed in (param.when or {}).items():
        if key not in spec.parameters:
            close = difflib.get_close_matches(key, list(spec.parameters), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            out.append(
                Problem(f"{where}.when.{key}", MISSING, f"no parameter {key!r} in this spec; {hint}name one above it")
            )
        elif key not in earlier:
            out.append(Problem(f"{where}.when.{key}", MISSING, f"{key} must be listed before the parameter it gates"))
        else:
            gate = spec.parameters[key]
            if isinstance(gate, ChoiceParam):
                stray = [v for v in allowed if v not in gate.values]
                if stray:
                    out.append(
                        Problem(f"{where}.when.{key}", stray, f"{key} never takes these; its values: {gate.values}")
                    )
    return out


def _combination_problems(spec: SweepSpec, limit: int = 3) -> list[Problem]:
    """Values valid one at a time can still clash (optimizer.sparse=adam with strategy=half): try
    the space's corner combinations and name the first few that are not a valid run config."""
    out: list[Problem] = []
    for params in candidate_points(spec.parameters):
        try:
            problems = component_problems(spec.trial_config(params))
        except ValidationError as exc:
            raw = apply_overrides(spec.base, nest(params))
            problems = problems_from_validation(exc, RunConfig, raw)
        if problems:
            reasons = "; ".join(str(p) for p in problems)
            out.append(
                Problem(
                    "parameters",
                    params,
                    f"this combination is not a valid run config ({reasons}); "
                    "add a `when` condition so the clashing values are never drawn together",
                )
            )
            if len(out) >= limit:
                break
    return out


@functools.lru_cache(maxsize=16)
def _context_of(base: str) -> int | None:
    """The context of the workload a base config (as JSON: a cache key) builds; asked once per base,
    since every proposal's config is checked against the budget."""
    context = getattr(build_workload(RunConfig.model_validate(json.loads(base))), "context", None)
    return context if isinstance(context, int) and not isinstance(context, bool) and context > 0 else None


def _context_problems(spec: SweepSpec) -> list[Problem]:
    """With a token budget every trial must have the base's context (the budget is N / context
    sequences, one split for the whole sweep): a searched option whose value changes it is refused."""
    budget, context = spec.constraints.effective_batch, spec.sequence_context()
    if not isinstance(budget, TokenBudget) or context is None:
        return []
    out = []
    for name, param in spec.parameters.items():
        if name.split(".")[0] != "workload_options":
            continue
        candidates = (
            [(f"values[{i}]", v) for i, v in enumerate(param.values)]
            if isinstance(param, ChoiceParam)
            else [("low", param.low), ("high", param.high)]
        )
        for label, value in candidates:
            raw = apply_overrides(spec.base, nest({name: value}))
            try:
                other = _context_of(json.dumps(raw, sort_keys=True, default=str))
            except (WorkloadError, ValidationError):
                continue  # an invalid value: _value_problems says why
            if other != context:
                out.append(
                    Problem(
                        f"parameters.{name}.{label}",
                        value,
                        f"gives a context of {other} tokens, and constraints.effective_batch.tokens counts rows of "
                        f"the base's {context}; with a token budget keep the context fixed in base (drop this "
                        "value), or give constraints.effective_batch as a number of sequences",
                    )
                )
    return out


def _token_problems(spec: SweepSpec, budget: TokenBudget) -> list[Problem]:
    """A token budget needs a workload with a context, and must be a whole number of its rows."""
    where, tokens = "constraints.effective_batch.tokens", budget.tokens
    context = spec.sequence_context()
    if context is None:
        return [
            Problem(
                where,
                tokens,
                f"a token budget needs a sequence workload (one with a context length, e.g. workload: lm); "
                f"workload {spec.base_config().workload!r} counts its batch in samples: give "
                "constraints.effective_batch as a number of samples instead",
            )
        ]
    rows, spare = divmod(tokens, context)
    if spare:
        fits = [n for n in (rows, rows + 1) if 1 <= n <= MAX_EFFECTIVE_BATCH]
        use = " or ".join(f"{n * context} ({n} sequence{'s' if n > 1 else ''})" for n in fits)
        return [Problem(where, tokens, f"not a multiple of the context ({context} tokens); use {use}")]
    if rows > MAX_EFFECTIVE_BATCH:
        return [
            Problem(
                where,
                tokens,
                f"is {rows:,} sequences of the {context}-token context, more than the {MAX_EFFECTIVE_BATCH} "
                f"a step may take; use at most {MAX_EFFECTIVE_BATCH * context}",
            )
        ]
    return []


def _batch_problems(spec: SweepSpec) -> list[Problem]:
    budget = spec.constraints.effective_batch
    if budget is None:
        return []
    out = []
    if "batch.accum" in spec.parameters:
        out.append(
            Problem(
                "parameters.batch.accum",
                MISSING,
                "with constraints.effective_batch set, accumulation is derived (effective / micro); drop it",
            )
        )
    if isinstance(budget, TokenBudget):
        problems = _token_problems(spec, budget)
        if problems:
            return [*out, *problems]
        effective = spec.effective_sequences() or 0
        context = spec.sequence_context() or 1
        where, given, unit = "constraints.effective_batch.tokens", budget.tokens, context
        named = f"constraints.effective_batch.tokens={budget.tokens} ({effective} sequences of {context} tokens)"
    else:
        effective = budget
        where, given, unit = "constraints.effective_batch", budget, 1
        named = f"constraints.effective_batch={effective}"
    workers = spec.resources.workers_per_trial
    share, spread = divmod(effective, workers)  # each data-parallel worker's part of a step
    if spread:
        return [
            *out,
            Problem(
                where,
                given,
                f"must split evenly over resources.workers_per_trial={workers} workers; "
                f"use a multiple of {workers * unit}, e.g. {(effective - spread + workers) * unit}",
            ),
        ]
    micro = spec.parameters.get("batch.micro")
    candidates = micro.values if isinstance(micro, ChoiceParam) else [spec.base_config().batch.micro]
    bad = [m for m in candidates if not isinstance(m, int) or m <= 0 or share % m]
    if bad:
        what = (
            named
            if workers == 1
            else f"each worker's share of {named} ({share} = {effective} / workers_per_trial {workers})"
        )
        out.append(
            Problem(
                "parameters.batch.micro" if micro is not None else "base.batch.micro",
                bad,
                f"must divide {what}; use divisors such as {_divisors(share)}",
            )
        )
    if micro is not None and not isinstance(micro, ChoiceParam):
        out.append(
            Problem(
                "parameters.batch.micro", MISSING, "with effective_batch set, give batch.micro as a choice of divisors"
            )
        )
    return out


def _parallel_problems(spec: SweepSpec) -> list[Problem]:
    """workers_per_trial > 1 runs torch DDP, which averages the gradients autograd leaves in the
    parameters' .grad and nothing else. Refused, each with the field, the value and the fix:
    embedding rows updated elsewhere (a strategy's own row update, FBGEMM's update inside backward)
    or trained from sparse row gradients; fractional GPUs (nccl runs one rank per device); EDO (it
    shares one device among single-process trials)."""
    res = spec.resources
    workers = res.workers_per_trial
    if workers == 1:
        return []
    fix = f"or set resources.workers_per_trial: 1 (it is {workers})"
    out = []
    if res.gpus_per_trial not in (0, 1):
        out.append(
            Problem(
                "resources.gpus_per_trial",
                res.gpus_per_trial,
                f"with workers_per_trial={workers}, each data-parallel worker drives one whole GPU (nccl runs "
                f"one rank per device); set it to 1 (GPUs) or 0 (CPUs), {fix}",
            )
        )
    if spec.edo.mode == "on":
        out.append(
            Problem("edo.mode", "on", f"EDO shares a device among single-process trials; set edo.mode: off, {fix}")
        )
    from elastune.embeddings import get_strategy, strategies

    ddp_safe = ", ".join(name for name in strategies() if not get_strategy(name).self_updating)
    for where, value, reason in _gradient_refusals(spec):
        out.append(
            Problem(
                where,
                value,
                f"{reason}, so DDP cannot average it over {workers} workers; data-parallel trials need "
                f"optimizer.sparse=adam with a torch-backend strategy ({ddp_safe}): "
                f"drop this value, {fix}",
            )
        )
    return out


def _gradient_refusals(spec: SweepSpec) -> list[tuple[str, Any, str]]:
    """(field path, value, why) for each value DDP cannot train with: in the parameters, and in
    the base wherever a proposal can keep the base's value (no parameter, or a conditional one)."""
    from elastune.embeddings import get_strategy, strategies

    def why(key: str, value: Any) -> str | None:
        if key == "embedding.backend" and value != "torch":
            return "FBGEMM's kernels update the tables inside backward"
        if key == "embedding.strategy" and value in strategies() and get_strategy(value).self_updating:
            return "this strategy updates its own rows outside autograd"
        if key == "optimizer.sparse" and value != "adam":
            return "a row-wise optimizer trains from sparse row gradients"
        return None

    base = spec.base_config()
    found = []
    for key in ("embedding.strategy", "embedding.backend", "optimizer.sparse"):
        param = spec.parameters.get(key)
        if param is None or param.when:
            section, field = key.split(".")
            value = getattr(getattr(base, section), field)
            reason = why(key, value)
            if reason:
                found.append((f"base.{key}", value, reason))
        if isinstance(param, ChoiceParam):
            for index, value in enumerate(param.values):
                reason = why(key, value)
                if reason:
                    found.append((f"parameters.{key}.values[{index}]", value, reason))
        if key in spec.constraints.reference:
            value = spec.constraints.reference[key]
            reason = why(key, value)
            if reason:
                found.append((f"constraints.reference.{key}", value, reason))
    return found


def _divisors(n: int) -> list[int]:
    powers = [d for d in (2**k for k in range(4, 20)) if d <= n and n % d == 0][-4:]
    return powers or [d for d in range(1, n + 1) if n % d == 0][-4:]  # an odd share has no power of 2
