"""Which workload a run trains: a built-in name, an installed plugin, or an import path.

`workload:` in a run config is one of
- a name: a built-in (`dlrm`) or a workload an installed package registers under the entry-point
  group `elastune.workloads` (pyproject: `[project.entry-points."elastune.workloads"]
  two_tower = "my_pkg.models:make_workload"`);
- an import path `package.module:factory`, for a workload that is not packaged (the module must be
  importable where the run happens: on every Ray node for a sweep, see docs/workloads.md).

A factory is called as `factory(cfg, options)` and returns a `Workload` (a `Workload` subclass is
its own factory). It may declare its own options as a pydantic model in an `options_model`
attribute (best an `elastune.WorkloadOptions`); `workload_options` in the run config is validated
by it (no model: no options accepted). A key that is not one of the model's fields is refused
whatever the model's own `extra` setting (a typo must never be silently ignored), with a "did you
mean"; every problem of the options is reported at once. An object of the protocol before
`elastune.Workload` still works, for a release, with a DeprecationWarning (workloads/legacy.py).
Every failure to find, build or validate a workload is a `WorkloadError` naming the field and the
fix, which `validate.py` reports as a config problem before anything runs.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, Protocol, cast

from pydantic import BaseModel, ValidationError

from elastune.config import RunConfig, problems_from_validation
from elastune.errors import MISSING, Problem
from elastune.workloads.base import Workload
from elastune.workloads.dlrm import DLRMWorkload
from elastune.workloads.hf import HFWorkload
from elastune.workloads.legacy import REQUIRED, adopt
from elastune.workloads.lm import LMOptions, make_lm
from elastune.workloads.quality import quality_of

__all__ = [
    "ENTRY_POINT_GROUP",
    "WorkloadError",
    "WorkloadFactory",
    "build_workload",
    "option_keys",
    "option_problems",
    "options_model",
    "resolve",
    "workload_names",
]

ENTRY_POINT_GROUP = "elastune.workloads"


class WorkloadFactory(Protocol):
    def __call__(self, cfg: RunConfig, options: Any) -> Workload: ...


class WorkloadError(ValueError):
    """A workload that cannot be found, built or configured; `field` names the config key.
    `problems`: every problem found (options report all of theirs at once), the first one first."""

    def __init__(self, field: str, value: Any, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.field, self.value = field, value
        self.problems = problems or [Problem(field, value, message)]


def _lm(cfg: RunConfig, options: Any) -> Workload:
    if cfg.data.source not in ("synthetic", "text"):
        raise WorkloadError(
            "data.source",
            cfg.data.source,
            "workload lm reads synthetic text or your documents (data.source=text, data.path=FILE.txt or .jsonl); "
            "the Criteo files and a table's columns are workload dlrm's: set data.source=text or synthetic, or "
            "workload=dlrm",
        )
    return make_lm(cfg, options)


_lm.options_model = LMOptions  # type: ignore[attr-defined]

_BUILTIN: dict[str, Callable[..., Workload]] = {"dlrm": DLRMWorkload, "lm": _lm, "hf": HFWorkload}


def workload_names() -> list[str]:
    """The names `workload:` accepts without an import path: built-ins and installed plugins."""
    return sorted({*_BUILTIN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})


def resolve(name: str) -> WorkloadFactory:
    """The factory `name` stands for (see the module docstring)."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise WorkloadError(
                "workload",
                name,
                f"cannot import {module_name!r} ({exc}); install the package that holds it, or put its folder on "
                "PYTHONPATH (for a sweep: on every Ray node, or ship it with `ray job submit --working-dir`)",
            ) from None
        factory = getattr(module, attr, None)
        if factory is None:
            raise WorkloadError("workload", name, f"{module_name!r} has no {attr!r}; give MODULE:FACTORY")
        return _callable(name, factory)
    if name in _BUILTIN:
        return cast(WorkloadFactory, _BUILTIN[name])
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise WorkloadError(
            "workload",
            name,
            f"no workload named {name!r}; installed: {', '.join(workload_names())}; or give an import path "
            "MODULE:FACTORY",
        )
    try:
        factory = found[0].load()
    except Exception as exc:  # a plugin whose own import fails: say which, with its error
        raise WorkloadError(
            "workload", name, f"the plugin {found[0].value!r} failed to load: {type(exc).__name__}: {exc}"
        ) from None
    return _callable(name, factory)


def build_workload(cfg: RunConfig) -> Workload:
    """The run's workload, built by its factory with its validated options."""
    factory = resolve(cfg.workload)
    options = _options(factory, cfg)
    try:
        workload = factory(cfg, options)
    except WorkloadError:
        raise
    except Exception as exc:
        raise WorkloadError(
            "workload", cfg.workload, f"its factory raised {type(exc).__name__}: {exc}; fix the workload or its options"
        ) from exc
    adopted = adopt(workload)
    if adopted is None:
        missing = [m for m in REQUIRED if not hasattr(workload, m)]
        raise WorkloadError(
            "workload",
            cfg.workload,
            f"its factory returned {type(workload).__name__}, not an elastune.Workload (an old-protocol object "
            f"would need: {', '.join(missing)}); subclass elastune.Workload, see docs/workloads.md",
        )
    try:
        quality_of(adopted)
    except TypeError as exc:
        raise WorkloadError("workload", cfg.workload, str(exc)) from None
    return adopted


def options_model(factory: WorkloadFactory, workload: str) -> type[BaseModel] | None:
    """The pydantic model the `workload_options` of `factory` (named `workload` in the config) are
    validated by; None: it takes none."""
    model = getattr(factory, "options_model", None)
    if model is None or (isinstance(model, type) and issubclass(model, BaseModel)):
        return model
    raise WorkloadError(
        "workload",
        workload,
        f"its options_model is {model!r}, not a pydantic model class; subclass elastune.WorkloadOptions",
    )


def option_keys(model: type[BaseModel]) -> list[str]:
    """The keys `workload_options` may give: each field's name, and its alias where it has one."""
    return sorted({key for name, field in model.model_fields.items() for key in (name, field.alias) if key})


def option_problems(model: type[BaseModel], given: Mapping[str, Any], workload: str) -> list[Problem]:
    """Every problem of `given` as options of `model`, each named `workload_options.KEY`: keys the
    model has no field for (refused whatever its `extra` says: a typo would otherwise be dropped or
    kept unread), then what the model itself refuses in the rest."""
    keys = option_keys(model)
    problems = []
    for key in (k for k in given if k not in keys):
        close = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.5)
        hint = f"did you mean 'workload_options.{close[0]}'? " if close else ""
        problems.append(
            Problem(
                f"workload_options.{key}",
                MISSING,
                f"not an option of workload {workload!r}; {hint}valid keys: {', '.join(keys) or 'none'}",
            )
        )
    known = {k: v for k, v in given.items() if k in keys}
    try:
        model.model_validate(known)
    except ValidationError as exc:
        named = problems_from_validation(exc, model, known, prefix="workload_options")
        problems += [Problem(p.path, p.value, f"{p.message} (options of workload {workload!r})") for p in named]
    return problems


def _options(factory: WorkloadFactory, cfg: RunConfig) -> BaseModel | None:
    model = options_model(factory, cfg.workload)
    given = cfg.workload_options
    if model is None:
        if given:
            raise WorkloadError(
                "workload_options", given, f"workload {cfg.workload!r} takes no options; drop workload_options"
            )
        return None
    problems = option_problems(model, given, cfg.workload)
    if problems:
        first = problems[0]
        raise WorkloadError(first.path, first.value, "; ".join(map(str, problems)), problems)
    return model.model_validate(given)


def _callable(name: str, factory: Any) -> WorkloadFactory:
    if not callable(factory):
        raise WorkloadError("workload", name, f"{name!r} is a {type(factory).__name__}, not a factory to call")
    return cast(WorkloadFactory, factory)
