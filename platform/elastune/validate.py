"""A run config, whole: pydantic checks each field (config.py), then each component checks what
only it knows, here and nowhere else.

config.py is a leaf: it knows the shape of a run and imports no component. What depends on the
components is asked of them after pydantic (component_checks.py): the embedding registry says which
strategies this build has, which update their own rows and what a backend's kernels cannot do; the
workload says how many tables and rows there are. Those checks import torch, so a caller that only
shows a config (`elastune config show` without --check) may stop at the fields. Every entry point
that reads a config from outside (a YAML file, `--set`, a spec's base and values, the web UI) comes
through `validate_run_config`; code handed a config that was already checked (a Ray trial) rebuilds
it with `RunConfig.model_validate`.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from elastune.config import RunConfig, apply_overrides, parse_overrides, problems_from_validation, read_yaml_mapping
from elastune.dotted import flatten
from elastune.errors import MISSING, ConfigError, Problem

__all__ = [
    "config_problems",
    "data_files_said",
    "load_run_config",
    "read_with_data_files",
    "validate_run_config",
]


def load_run_config(
    path: Path | str | None = None, overrides: Sequence[str] = (), *, components: bool = True
) -> RunConfig:
    """Read YAML (or nothing: the embedded defaults), apply `--set` overrides, validate (the fields,
    then, unless `components` is False, what the components refuse).

    A relative data file (data.path, data.eval_path) in the YAML file is taken from the file's
    folder, so a config and its data move together; one given with --set is taken from the
    working directory, as a shell argument is. The file is the user's own input, free to name files;
    a config read back from a store (a sweep's best) never comes through here."""
    raw: dict[str, Any] = {}
    taken: dict[str, tuple[str, str]] = {}
    if path is not None:
        raw, taken = read_with_data_files(Path(path))
    raw = apply_overrides(raw, parse_overrides(overrides))
    source = str(path) if path is not None else None
    with data_files_said(taken, source):
        return validate_run_config(raw, source=source, components=components)


DATA_FILES = ("path", "eval_path")  # the data.* keys that name a file


def read_with_data_files(config_file: Path, under: str = "") -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    """The YAML file's mapping with each relative data file (in `under`'s data section: "" for a run
    config, "base" for a sweep spec) taken from the file's folder, and what was taken:
    {"data.path": (as written, the path tried)}, keys under `under`."""
    raw = read_yaml_mapping(config_file)
    section = raw.get(under) if under else raw
    data = section.get("data") if isinstance(section, Mapping) else None
    if not isinstance(section, Mapping) or not isinstance(data, Mapping):
        return raw, {}
    folder = config_file.absolute().parent
    data, taken = dict(data), {}
    prefix = f"{under}.data." if under else "data."
    for key in DATA_FILES:
        given = data.get(key)
        if isinstance(given, str) and given.strip() and not Path(given).expanduser().is_absolute():
            data[key] = str(folder / given)
            taken[prefix + key] = (given, data[key])
    section = {**section, "data": data}
    return ({**raw, under: section} if under else section), taken


@contextlib.contextmanager
def data_files_said(taken: Mapping[str, tuple[str, str]], config_file: str | None) -> Iterator[None]:
    """A ConfigError raised inside, with each problem of a data file taken from the config file's
    folder said as written, with the path tried and what it was taken from."""
    try:
        yield
    except ConfigError as exc:
        if not taken or config_file is None:
            raise
        raise ConfigError([_as_given(p, taken, config_file) for p in exc.problems], source=exc.source) from None


def _as_given(problem: Problem, taken: Mapping[str, tuple[str, str]], config_file: str) -> Problem:
    """A problem with a data file taken from the config file's folder, said with the value as
    written, the path tried and what it was taken from."""
    written, tried = taken.get(problem.path, (None, None))
    if written is None or problem.value != tried:
        return problem  # another key, or the file a --set gave instead
    where = f"tried {tried} (a relative path in {config_file} is taken from that file's folder)"
    return Problem(problem.path, written, f"{where}: {problem.message}")


def validate_run_config(raw: Mapping[str, Any], source: str | None = None, *, components: bool = True) -> RunConfig:
    """The RunConfig for `raw`, or one ConfigError with every problem."""
    cfg, problems = config_problems(raw, components=components)
    if problems or cfg is None:
        raise ConfigError(problems, source=source)
    return cfg


def config_problems(raw: Mapping[str, Any], *, components: bool = True) -> tuple[RunConfig | None, list[Problem]]:
    """(the config, []) or (None or the config, its problems): every problem at once. pydantic's
    come first; the components' (unless `components` is False) once every field is valid (they
    read a whole config), or, where pydantic refused values, on the rest (`_beyond_refused`)."""
    checks = _component_problems if components else _no_checks
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as exc:
        return None, _beyond_refused(raw, exc, checks)
    return cfg, checks(cfg)


def _component_problems(cfg: RunConfig) -> list[Problem]:
    from elastune.component_checks import component_problems  # torch, the workload's code

    return component_problems(cfg)


def _no_checks(cfg: RunConfig) -> list[Problem]:
    return []


# Each pass sets aside at least one more value; a config has three levels of rules (a section's,
# the run's, the components'), so a few passes reach the last.
MAX_PASSES = 6
Loc = tuple[str | int, ...]


def _beyond_refused(
    raw: Mapping[str, Any], exc: ValidationError, checks: Callable[[RunConfig], list[Problem]]
) -> list[Problem]:
    """`exc`'s problems, then those that were hidden behind them. pydantic checks a section's rules
    only once its fields are valid, and the run's once every section is, and the components check
    only a valid config: a wrong value would hide an independent problem until it was fixed. So the
    values pydantic refused are set aside (each field's default stands in), and what remains is
    validated again, pass after pass. A problem found once values were set aside is kept only if it
    names none of them (every rule's message names the fields it reads): a default standing in for
    a refused value is never blamed."""
    problems = problems_from_validation(exc, RunConfig, raw)
    current, aside = copy.deepcopy(dict(raw)), []
    errors = exc.errors(include_url=False)
    for _ in range(MAX_PASSES):
        more = [loc for err in errors for loc in _to_set_aside(current, err) if loc not in aside]
        if not more:
            break
        for loc in more:
            _drop(current, loc)
        aside += more
        named = [".".join(map(str, loc)) for loc in aside]
        try:
            cfg = RunConfig.model_validate(current)
        except ValidationError as again:
            errors, found = again.errors(include_url=False), problems_from_validation(again, RunConfig, current)
        else:
            errors, found = [], checks(cfg)
        problems += [p for p in found if p not in problems and not any(_names(p, path) for path in named)]
        if not errors:
            break
    return problems


def _to_set_aside(raw: Mapping[str, Any], err: Mapping[str, Any]) -> list[Loc]:
    """Where in `raw` the value that pydantic error `err` refused sits. A rule of a section or of the
    run (its location holds a mapping, or nothing) reads the fields its message names."""
    loc = tuple(err["loc"])
    value = _at(raw, loc)
    if value is MISSING or isinstance(value, Mapping):
        named: list[Loc] = [tuple(path.split(".")) for path in flatten(raw) if _mentions(str(err["msg"]), path)]
        if named:
            return named
    held = _held_at(raw, loc)
    return [held] if held else []


def _held_at(raw: Any, loc: Loc) -> Loc:
    """The longest start of `loc` that is a key of a mapping in `raw` (a list item, or a key the
    value lacks, is set aside with the field that holds it); () if none is."""
    for end in range(len(loc), 0, -1):
        parent = _at(raw, loc[: end - 1])
        if isinstance(parent, Mapping) and loc[end - 1] in parent:
            return loc[:end]
    return ()


def _at(raw: Any, loc: Loc) -> Any:
    for part in loc:
        in_mapping = isinstance(raw, Mapping) and part in raw
        in_list = isinstance(raw, list) and isinstance(part, int) and 0 <= part < len(raw)
        if not (in_mapping or in_list):
            return MISSING
        raw = raw[part]
    return raw


def _drop(raw: dict[str, Any], loc: Loc) -> None:
    parent = _at(raw, loc[:-1])
    if isinstance(parent, dict):
        parent.pop(loc[-1], None)


def _names(problem: Problem, path: str) -> bool:
    return problem.path == path or _mentions(problem.message, path)


def _mentions(text: str, path: str) -> bool:
    """Whether `text` names the field `path` (`steps`, not inside `warmup_steps`; `embedding.dtype`)."""
    return re.search(rf"(?<![\w.]){re.escape(path)}(?!\w)", text) is not None
