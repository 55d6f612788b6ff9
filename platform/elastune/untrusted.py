"""What a remote client may set in a run config: an allowlist, and the checks that apply it.

Whoever reaches the web UI can launch training jobs on the cluster. A run config has fields that
name files (`checkpoint.path` is read with torch.load and written at the end, `data.path` is opened),
so a client that could set them could read, probe or overwrite any file the cluster can. Here a
client sets only the keys below: none of them names a file, a folder or a command. A config read
back from the tracking store (a sweep's `best_config.yaml`, which anyone who can write to the store
could plant) is held to the same list before anything runs: each key outside it must keep its
default value.

The list is explicit, not derived: a field added to RunConfig later stays closed to clients until
someone decides it is safe (tests/unit/test_ui_hostile.py checks no path-typed field is on it).
A workload's own options (`workload_options.KEY`) are open only for the built-in workloads listed in
CLIENT_OPTIONS, and only while the run trains that workload: a plugin's option of the same name
could name a file, so an option given for any other workload is refused (`limit_problems`,
`stored_config_problems`).

What a client sends is YAML read by elastune.yamlsafe (no anchors, aliases, tags or merge keys;
bounded size and nesting), and a client's run is held to CLIENT_LIMITS, below the config's own
bounds, which are for a person at the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elastune.config import RunConfig, apply_overrides, elastune_home, moved_key_message, parse_overrides
from elastune.dotted import flatten
from elastune.errors import ConfigError, Problem

__all__ = [
    "CLIENT_KEYS",
    "CLIENT_LIMITS",
    "CLIENT_OPTIONS",
    "client_checkpoint",
    "limit_problems",
    "override_problems",
    "parse_client_overrides",
    "read_stored_config",
    "stored_config_problems",
]

# The options a client may set, per built-in workload: none names a file (tests/unit/test_ui_hostile.py
# checks each is a field of that workload's options model, and not path-typed).
CLIENT_OPTIONS: dict[str, frozenset[str]] = {
    "dlrm": frozenset({"bottom_mlp", "top_mlp"}),
    "lm": frozenset(
        {
            "layers",
            "heads",
            "context",
            "vocab",
            "mean_length",
            "padding",
            "bucket_by_length",
            "activation_checkpointing",
            "checkpoint_every",
            "tie_embeddings",
        }
    ),
}

CLIENT_KEYS: frozenset[str] = frozenset(
    {
        "workload",
        "seed",
        "device",
        "precision",
        "threads",
        "steps",
        "warmup_steps",
        "data.rows_scale",
        "data.zipf_alpha",
        "data.pooling",
        "data.seed",
        "data.loader_workers",
        "data.prefetch",
        "data.pin_memory",
        "model.embedding_dim",
        "embedding.strategy",
        "embedding.dtype",
        "embedding.buckets",
        "embedding.compression",
        "embedding.num_hashes",
        "embedding.qr_combine",
        "embedding.mixed_blocks",
        "embedding.mixed_min_dim",
        "embedding.groups",
        "embedding.cache_rows",
        "embedding.cache_ratio",
        "embedding.backend",
        "optimizer.dense",
        "optimizer.sparse",
        "optimizer.lr",
        "optimizer.clip_grad_norm",
        "batch.micro",
        "batch.accum",
        "eval.samples",
        "eval.batch",
    }
    # the built-in workloads' options: open only while the run trains that workload (`limit_problems`)
    | {f"workload_options.{key}" for keys in CLIENT_OPTIONS.values() for key in keys}
)

# The most a client-launched run may ask for, where the config's own bound is a person's choice at
# the command line (steps up to 10**9, eval.samples up to 2**31): a run from the UI is a bounded
# job. Its memory is priced against the UI's ceiling as well (ui/pricing.py).
CLIENT_LIMITS: dict[str, int] = {"steps": 100_000, "eval.samples": 1 << 20, "eval.batch": 1 << 16}

_FIX = "a remote client may set only these run-config keys (none names a file): "


def _refusal(key: str) -> str:
    section = key.split(".", 1)[0]
    same_section = sorted(k for k in CLIENT_KEYS if k.startswith(section + "."))
    hint = ", ".join(same_section) if same_section else ", ".join(sorted(CLIENT_KEYS))
    return f"cannot be set from the UI or another remote client; {_FIX}{hint}"


def override_problems(sets: Sequence[str], field: str = "sets") -> list[Problem]:
    """Problems of `key=value` overrides a client sent: each run-config key outside CLIENT_KEYS, named
    `field.key`.

    A key that names a whole section (`batch={micro: 8}`) is checked key by key, so a section
    cannot smuggle in a closed field. Keys the config does not have, and malformed pairs, are left
    to the config's own validation (which suggests the key meant)."""
    known = set(flatten(RunConfig().to_dict()))
    problems: list[Problem] = []
    given: dict[str, Any] = {}  # every readable pair, merged: the workload and its options may come apart
    for item in sets:
        _, sep, _ = item.partition("=")
        if not sep:
            continue
        try:
            nested = parse_overrides([item], untrusted=True)
        except ConfigError:  # parse_client_overrides reports it
            continue
        given = apply_overrides(given, nested)
        for leaf, value in flatten(nested).items():
            # workload_options has no keys of its own (the workload's model gives them): closed but
            # for the built-ins' listed options, and those only for their own workload
            if (leaf in known or leaf.startswith("workload_options")) and leaf not in CLIENT_KEYS:
                problems.append(Problem(f"{field}.{leaf}", value, _refusal(leaf)))
            elif _names_workload(leaf) and (leaf != "workload" or _imports(value)):
                problems.append(Problem(f"{field}.workload", value, _IMPORT_REFUSAL))
    # a workload named here holds its options to CLIENT_OPTIONS now; one from the config they change,
    # when the run is checked whole (limit_problems)
    workload = given.get("workload")
    if isinstance(workload, str) and not _imports(workload):
        said = {p.path for p in problems}
        for problem in _option_problems(workload, given.get("workload_options")):
            if f"{field}.{problem.path}" not in said:
                problems.append(Problem(f"{field}.{problem.path}", problem.value, problem.message))
    return problems


def _option_problems(workload: str, options: Any) -> list[Problem]:
    """Each option (`workload_options.KEY`) a client gives outside CLIENT_OPTIONS[workload]; for a
    workload not listed there, every option."""
    if not isinstance(options, Mapping):  # `workload_options=3`: the config's own validation says so
        return []
    allowed = CLIENT_OPTIONS.get(workload, frozenset())
    if workload in CLIENT_OPTIONS:
        why = f"not an option a remote client may set for workload {workload!r}; open: {', '.join(sorted(allowed))}"
    else:
        why = (
            f"workload {workload!r} has no options a remote client may set (a workload's option could name a "
            "file); launch it from the command line"
        )
    return [
        Problem(f"workload_options.{leaf}", value, why)
        for leaf, value in flatten(options).items()
        if leaf not in allowed
    ]


def parse_client_overrides(sets: Sequence[str], field: str = "sets") -> tuple[dict[str, Any], list[Problem]]:
    """A remote client's `key=value` pairs as nested overrides, each value read by elastune.yamlsafe
    (an anchor, alias, tag or merge key, or an oversized value, refused before it is expanded), and
    the problems of the pairs that could not be read, named `field.key`."""
    try:
        return parse_overrides(sets, untrusted=True), []
    except ConfigError as exc:
        return {}, [Problem(f"{field}.{p.path}", p.value, p.message) for p in exc.problems]


def limit_problems(cfg: RunConfig) -> list[Problem]:
    """Keys of `cfg` over CLIENT_LIMITS, and options it gives outside CLIENT_OPTIONS of its workload
    (a client's run is checked whole here, after its overrides meet the config they change: the
    workload may come from one and the options from the other), named by their run-config key
    (the caller says where the value came from)."""
    values = flatten(cfg.to_dict())
    problems = _option_problems(cfg.workload, cfg.workload_options)
    for key, most in CLIENT_LIMITS.items():
        value = values.get(key)
        if isinstance(value, int) and value > most:
            problems.append(
                Problem(
                    key,
                    value,
                    f"must be ≤ {most:,} for a run launched from the UI or another remote client; "
                    "run a bigger one from the command line",
                )
            )
    return problems


def read_stored_config(path: Path, field: str = "config") -> dict[str, Any]:
    """A run config a remote client's run starts from (a sweep's best_config.yaml from the tracking
    store, which anyone who can write to the store could have planted), read by elastune.yamlsafe
    with its STORED_CONFIG limits, reading no more of the file than they allow."""
    import yaml

    from elastune import yamlsafe

    limits = yamlsafe.STORED_CONFIG
    try:
        with path.open(encoding="utf-8") as file:
            text = file.read(limits.max_chars + 1)
        if len(text) > limits.max_chars:
            raise yamlsafe.UnsafeYAML(f"is longer than {limits.max_chars:,} characters, more than a run config")
        loaded = yamlsafe.load(text, limits)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(field, str(path), f"cannot be read ({exc}); give a readable YAML file")]) from None
    except yamlsafe.UnsafeYAML as exc:
        raise ConfigError([Problem(field, str(path), f"{exc}; a client's run reads plain YAML only")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(field, str(path), f"is not valid YAML ({exc}); fix the syntax")]) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError([Problem(field, str(path), "must be a YAML mapping of keys to values")])
    return loaded


def stored_config_problems(raw: Mapping[str, Any], field: str = "from_sweep") -> list[Problem]:
    """Problems of a config read back from the tracking store: a key outside CLIENT_KEYS whose value
    is not its default (the stored config is a full dump, so closed keys appear at their defaults)."""
    defaults = flatten(RunConfig().to_dict())
    problems = []
    workload = raw.get("workload", defaults["workload"])
    if isinstance(workload, str) and not _imports(workload):
        named = _option_problems(workload, raw.get("workload_options"))
        problems += [Problem(f"{field}.{p.path}", p.value, p.message) for p in named]
    for leaf, value in flatten(raw).items():
        if _names_workload(leaf) and (leaf != "workload" or _imports(value)):
            problems.append(Problem(f"{field}.workload", value, _IMPORT_REFUSAL))
            continue
        if (
            leaf.startswith("workload_options.")
            or leaf in CLIENT_KEYS
            or (leaf in defaults and defaults[leaf] == value)
        ):
            continue  # the options: by _option_problems above
        moved = moved_key_message(leaf)  # a config stored before the key moved into the options
        problems.append(
            Problem(
                f"{field}.{leaf}",
                value,
                f"{moved}; pick a sweep run since"
                if moved
                else "the stored config sets a key a remote client may not (it names a file, or is unknown); "
                "train it from the command line after checking it, or pick another sweep",
            )
        )
    return problems


# An import path would make the run import (execute) whatever module a client names.
_IMPORT_REFUSAL = (
    "a remote client may name an installed workload (a built-in or an elastune.workloads plugin), not an "
    "import path MODULE:FACTORY; launch that one from the command line"
)


def _imports(value: Any) -> bool:
    """Whether a `workload` value is anything but an installed workload's name: an import path, or
    not a string at all."""
    return not isinstance(value, str) or ":" in value


def _names_workload(leaf: str) -> bool:
    """`workload`, or a key under it (`workload={a: 1}` flattens to `workload.a`: not a name either)."""
    return leaf == "workload" or leaf.startswith("workload.")


def client_checkpoint(job_id: str) -> Path:
    """Where a client-launched run writes its checkpoint: chosen here, never by the client.
    `$ELASTUNE_HOME/jobs/JOB_ID/checkpoint.pt`, the folder created (elastune creates no folder
    for a checkpoint.path a user gives)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id).strip(".") or "job"
    folder = elastune_home() / "jobs" / safe[:128]
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "checkpoint.pt"
