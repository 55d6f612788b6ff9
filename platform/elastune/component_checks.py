"""What the components refuse in a config pydantic accepted: the embedding registry says which
strategies this build has, which update their own rows and what a backend's kernels cannot do; the
workload, built with its options, says how many tables and rows there are; a data file is read as
the run will read it.

These checks import torch and the workload's own code (a second or more on a small machine), so
validate.py asks them only of a caller that wants a config a run can start from; `elastune config
show` without --check stops at the fields.
"""

from __future__ import annotations

from pydantic import ValidationError

from elastune.config import RunConfig
from elastune.data.table import check_table_data
from elastune.data.text import MIN_VOCAB, check_text_data
from elastune.embeddings import get_strategy, strategies
from elastune.embeddings.fbgemm import fbgemm_import_error, run_problems
from elastune.embeddings.shared import validate_groups
from elastune.embeddings.sparse_optim import ROW_OPTIMIZERS
from elastune.errors import MISSING, DataError, Problem
from elastune.workloads import WorkloadError, build_workload
from elastune.workloads.hf import HFOptions
from elastune.workloads.lm import LMOptions

__all__ = ["component_problems"]


def component_problems(cfg: RunConfig) -> list[Problem]:
    """What the embedding registry and the workload refuse in a config pydantic accepted: every
    problem at once, each check run where what it reads is sound (the tables' sizes need the data
    and the workload; the strategy's rules need a strategy this build has)."""
    problems = []
    if cfg.data.source == "table":
        # The file, read as the run will read it (the vocabulary pass included, cached for the run):
        # a missing column, a bad value or an empty file is said here, before anything starts.
        try:
            check_table_data(cfg.data, 0 if cfg.data.eval_path else cfg.eval.samples)
        except DataError as exc:
            problems.append(Problem("data.path", MISSING, str(exc)))  # the message names the file
    if cfg.data.source == "text":
        problems += _text_problems(cfg)
    tables = None
    if not problems:  # the workload reads the data it is built on
        try:
            tables = build_workload(cfg).table_sizes  # found, built with its options, a Workload
        except WorkloadError as exc:
            problems += exc.problems  # every problem of the options at once
    emb = cfg.embedding
    if emb.strategy not in strategies():
        available = ", ".join(strategies())
        message = f"strategy {emb.strategy!r} is not available in this build; available: {available}"
        return [*problems, Problem("embedding.strategy", emb.strategy, message)]
    if emb.backend == "fbgemm":
        problems += _fbgemm_problems(cfg)
    if emb.groups is not None and tables is not None:
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
    total = sum(tables or ())
    if tables is not None and emb.cache_rows is not None and emb.cache_rows > total:
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
    problems = []
    runs = strategies("fbgemm")
    if emb.strategy not in runs:
        problems.append(
            Problem(
                "embedding.backend",
                "fbgemm",
                f"no fbgemm kernels for embedding.strategy={emb.strategy!r} (the fbgemm backend runs "
                f"{', '.join(runs)}); pick one of those or use embedding.backend=torch",
            )
        )
    elif emb.strategy == "half" and emb.dtype == "bf16":
        problems.append(
            Problem(
                "embedding.backend",
                "fbgemm",
                "fbgemm's CPU kernels store half rows in fp16 only, not embedding.dtype='bf16'; "
                "set embedding.dtype=fp16 or use embedding.backend=torch",
            )
        )
    return problems + [Problem("config", MISSING, message) for message in run_problems(cfg)]
