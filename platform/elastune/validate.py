"""A run config, whole: pydantic checks each field (config.py), then each component checks what
only it knows, here and nowhere else.

config.py is a leaf: it knows the shape of a run and imports no component. What depends on the
components is asked of them after pydantic: the embedding registry says which strategies this build
has, which update their own rows and what a backend's kernels cannot do; the workload says how many
tables and rows there are. Every entry point that reads a config from outside (a YAML file,
`--set`, a spec's base and values, the web UI) comes through `validate_run_config`; code handed a
config that was already checked (a Ray trial) rebuilds it with `RunConfig.model_validate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from elastune.config import RunConfig, apply_overrides, parse_overrides, problems_from_validation, read_yaml_mapping
from elastune.data.table import check_table_data
from elastune.data.text import MIN_VOCAB, check_text_data
from elastune.embeddings import get_strategy, strategies
from elastune.embeddings.fbgemm import fbgemm_import_error, run_problems
from elastune.embeddings.shared import validate_groups
from elastune.embeddings.sparse_optim import ROW_OPTIMIZERS
from elastune.errors import MISSING, ConfigError, DataError, Problem
from elastune.workloads import WorkloadError, build_workload
from elastune.workloads.hf import HFOptions
from elastune.workloads.lm import LMOptions

__all__ = ["component_problems", "config_problems", "load_run_config", "validate_run_config"]


def load_run_config(path: Path | str | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """Read YAML (or nothing: the embedded defaults), apply `--set` overrides, validate."""
    raw: dict[str, Any] = {}
    source = str(path) if path is not None else None
    if path is not None:
        raw = read_yaml_mapping(Path(path))
    raw = apply_overrides(raw, parse_overrides(overrides))
    return validate_run_config(raw, source=source)


def validate_run_config(raw: Mapping[str, Any], source: str | None = None) -> RunConfig:
    """The RunConfig for `raw`, or one ConfigError with every problem."""
    cfg, problems = config_problems(raw)
    if problems or cfg is None:
        raise ConfigError(problems, source=source)
    return cfg


def config_problems(raw: Mapping[str, Any]) -> tuple[RunConfig | None, list[Problem]]:
    """(the config, []) or (None or the config, its problems): pydantic's first; the components'
    once every field is valid (they read a whole config)."""
    try:
        cfg = RunConfig.model_validate(raw)
    except ValidationError as exc:
        return None, problems_from_validation(exc, RunConfig, raw)
    return cfg, component_problems(cfg)


def component_problems(cfg: RunConfig) -> list[Problem]:
    """What the embedding registry and the workload refuse in a config pydantic accepted."""
    if cfg.data.source == "table":
        # The file, read as the run will read it (the vocabulary pass included, cached for the run):
        # a missing column, a bad value or an empty file is said here, before anything starts.
        try:
            check_table_data(cfg.data, 0 if cfg.data.eval_path else cfg.eval.samples)
        except DataError as exc:
            return [Problem("data.path", MISSING, str(exc))]  # the message names the file
    if cfg.data.source == "text":
        problems = _text_problems(cfg)
        if problems:
            return problems
    try:
        tables = build_workload(cfg).table_sizes  # found, built with its options, a Workload
    except WorkloadError as exc:
        return list(exc.problems)  # every problem of the options at once
    emb = cfg.embedding
    if emb.strategy not in strategies():
        available = ", ".join(strategies())
        message = f"strategy {emb.strategy!r} is not available in this build; available: {available}"
        return [Problem("embedding.strategy", emb.strategy, message)]
    problems = []
    if emb.backend == "fbgemm":
        problems += _fbgemm_problems(cfg)
    if emb.groups is not None:
        try:
            validate_groups(emb.groups, len(tables))
        except ValueError as exc:
            problems.append(Problem("embedding.groups", emb.groups, str(exc)))
    problems += _override_problems(cfg)
    # Whole-run rules: their messages name every field involved.
    if get_strategy(emb.strategy).self_updating and cfg.optimizer.sparse not in ROW_OPTIMIZERS:
        problems.append(
            Problem(
                "config",
                MISSING,
                f"embedding.strategy={emb.strategy} updates its own rows and needs a row-wise sparse optimizer, "
                f"not optimizer.sparse={cfg.optimizer.sparse}; set optimizer.sparse to sgd, adagrad or rowwise_adagrad",
            )
        )
    total = sum(tables)
    if emb.cache_rows is not None and emb.cache_rows > total:
        given = (
            f"data.table_rows={cfg.data.table_rows}"
            if cfg.data.table_rows
            else f"data.rows_scale={cfg.data.rows_scale}"
        )
        problems.append(
            Problem(
                "config",
                MISSING,
                f"embedding.cache_rows={emb.cache_rows} is more than the {total} rows of all tables at "
                f"{given}; set it to at most {total}, or use embedding.cache_ratio (a share of the rows)",
            )
        )
    return problems


def _text_problems(cfg: RunConfig) -> list[Problem]:
    """data.source=text: a workload that reads documents, a vocabulary a byte-level tokenizer can
    have, and the files read as the run will read them: every line checked, the tokenizer trained and
    the documents tokenized, cached for the run (once per file and settings)."""
    readers: dict[str, type[LMOptions] | type[HFOptions]] = {"lm": LMOptions, "hf": HFOptions}
    if cfg.workload not in readers:
        return [
            Problem(
                "data.source",
                "text",
                f"documents are read by workload=lm or hf, not workload={cfg.workload!r}; set workload=lm, or "
                f"give {cfg.workload!r} a source of its own (synthetic, table, ...)",
            )
        ]
    try:
        options = readers[cfg.workload].model_validate(cfg.workload_options)
    except ValidationError:
        return []  # build_workload names the option
    if options.vocab < MIN_VOCAB:
        return [
            Problem(
                "workload_options.vocab",
                options.vocab,
                f"data.source=text trains a byte-level tokenizer, which needs at least {MIN_VOCAB} ids (every byte, "
                f"<pad>, <unk>, <eos>); set workload_options.vocab to {MIN_VOCAB} or more",
            )
        ]
    try:
        eval_samples = 0 if cfg.data.eval_path else cfg.eval.samples
        check_text_data(cfg.data, vocab=options.vocab, context=options.context, eval_samples=eval_samples)
    except DataError as exc:
        return [Problem("data.path", MISSING, str(exc))]  # the message names the file
    return []


def _override_problems(cfg: RunConfig) -> list[Problem]:
    """Each per-table override's strategy: built here, and given the optimizer it needs."""
    emb = cfg.embedding
    problems = []
    if emb.overrides and emb.backend == "fbgemm":
        problems.append(
            Problem(
                "embedding.overrides",
                f"{len(emb.overrides)} override(s)",
                "the fbgemm backend builds all tables as one kernel; drop the overrides or use embedding.backend=torch",
            )
        )
    for i, override in enumerate(emb.overrides):
        strategy = override.fields().get("strategy")
        if strategy is None:
            continue
        where = f"embedding.overrides[{i}].strategy"
        if strategy not in strategies():
            problems.append(
                Problem(where, strategy, f"not available in this build; available: {', '.join(strategies())}")
            )
        elif get_strategy(strategy).self_updating and cfg.optimizer.sparse not in ROW_OPTIMIZERS:
            problems.append(
                Problem(
                    where,
                    strategy,
                    f"updates its own rows and needs a row-wise sparse optimizer, not optimizer.sparse="
                    f"{cfg.optimizer.sparse}; set optimizer.sparse to sgd, adagrad or rowwise_adagrad",
                )
            )
    return problems


def _fbgemm_problems(cfg: RunConfig) -> list[Problem]:
    emb = cfg.embedding
    error = fbgemm_import_error()
    if error is not None:
        fix = "pip install 'elastune[fbgemm]' or use embedding.backend=torch"
        return [Problem("embedding.backend", "fbgemm", f"fbgemm_gpu {error}; {fix}")]
    runs = strategies("fbgemm")
    if emb.strategy not in runs:
        return [
            Problem(
                "embedding.backend",
                "fbgemm",
                f"no fbgemm kernels for embedding.strategy={emb.strategy!r} (the fbgemm backend runs "
                f"{', '.join(runs)}); pick one of those or use embedding.backend=torch",
            )
        ]
    if emb.strategy == "half" and emb.dtype == "bf16":
        return [
            Problem(
                "embedding.backend",
                "fbgemm",
                "fbgemm's CPU kernels store half rows in fp16 only, not embedding.dtype='bf16'; "
                "set embedding.dtype=fp16 or use embedding.backend=torch",
            )
        ]
    return [Problem("config", MISSING, message) for message in run_problems(cfg)]
