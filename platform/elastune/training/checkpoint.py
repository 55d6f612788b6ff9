"""Save and restore a run mid-way: model, optimizers, scaler, loop position and RNG.

A run restored at step s continues exactly as the uninterrupted run would have: the data
position (samples consumed) and the RNG state come back with the weights.

A checkpoint never runs code. Its payload is plain data (tensors, dicts, lists, numbers,
strings): every state_dict elastune writes (torch's Adam, SGD and Adagrad, the row-wise sparse
optimizers, the strategies' rows and row state, the fbgemm tables, GradScaler) is made of these,
so it is read with `torch.load(weights_only=True)` and no class is allow-listed. A file that needs
anything else (a pickled object whose loading would call a function) is refused, as are files that
are not elastune checkpoints at all.

Plain data is still untrusted, whoever wrote it (checkpoint folders may be shared): what a run
resumes from is bounded like its config (training/checkpoint_bounds.py). Its loop state must be
one a run of this config reaches (0 <= step <= steps, micro x accum = the effective batch, ...),
each number of its type, and no float of the model, optimizers or scaler NaN or inf. Each refusal
names checkpoint.path, the field and its value: exit 2, nothing trained, the file kept as it is.

A checkpoint, and the data artifact beside it, is written by `atomic_write`: to a new private file
in its folder, then renamed over the target. No name someone else could plant (a symlink at
`<path>.tmp`, a user's own file) is ever opened for writing, and the file keeps mode 0600 (the
weights, and a vocabulary of the data's own values, are the user's). A checkpoint.path that is
itself a symlink is refused.

`check_checkpoint` runs before anything is built (training/loop.py): the target of
checkpoint.path must be a file in an existing, writable folder, a file to resume from must be an
elastune checkpoint of this config, and a file that would be overwritten must be one too (or
empty), so a typo cannot replace a file elastune did not write.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from elastune.config import CheckpointConfig
from elastune.errors import ConfigError, InputError, Problem
from elastune.files import atomic_write
from elastune.training.checkpoint_bounds import (
    loop_problems,
    non_finite,
    optimizer_steps,
    scaler_problems,
)
from elastune.training.optim import Optimizers

if TYPE_CHECKING:
    from elastune.data.source import DataArtifact

__all__ = ["LoopState", "check_checkpoint", "load_checkpoint", "save_checkpoint"]

# Config sections that must match for a checkpoint to be resumable: they shape the weights and
# the data stream. Steps, checkpointing and eval may differ.
_MUST_MATCH = ("workload", "workload_options", "data", "model", "embedding", "optimizer", "precision", "seed")
# What save_checkpoint writes; a file without all of these is not an elastune checkpoint.
_KEYS = ("model", "optimizers", "scaler", "loop", "rng", "config")
# What GradScaler.state_dict() holds when it is enabled (fp16); disabled, it is empty.
_SCALER_KEYS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}


@dataclass
class LoopState:
    step: int = 0  # optimizer steps done
    samples: int = 0  # samples consumed = position in the training stream
    micro: int = 1
    accum: int = 1
    oom_retries: int = 0


def check_checkpoint(ckpt: CheckpointConfig, config: dict[str, Any], *, writes: bool) -> None:
    """Refuse, before the model is built, a checkpoint.path the run could not use: not a file, in a
    folder that does not exist or cannot be written (when this process `writes` the checkpoint),
    or an existing file that is not an elastune checkpoint this run may resume from or overwrite.
    Raises ConfigError naming checkpoint.path; reads and writes nothing that stays."""
    path = ckpt.path
    if path is None:
        return
    _check_place(path, writes=writes)
    if not path.is_file():
        return  # a new file: resume starts from scratch, as its description says
    if ckpt.resume:
        # Every problem at once: a file out of this config's bounds (a step past steps) may also
        # have been trained on other data.
        problems: list[Problem] = []
        for check in (
            lambda: _read(path, config, mmap=True),  # mmap: the check reads the structure, not every tensor
            lambda: _check_data_artifact(path, config),
        ):
            try:
                check()
            except ConfigError as exc:
                problems += exc.problems
        if problems:
            raise ConfigError(problems)
    elif writes and not _is_empty(path) and not _is_checkpoint(path):
        raise _problem(
            path,
            "exists and is not an elastune checkpoint; the run would overwrite it at its end. "
            "Point checkpoint.path at a new file (or delete this one if it is not needed)",
        )


def save_checkpoint(
    path: Path,
    *,
    model: nn.Module,
    opts: Optimizers,
    scaler: torch.amp.GradScaler,
    state: LoopState,
    config: dict[str, Any],
) -> None:
    payload = {
        "model": model.state_dict(),
        "optimizers": opts.state_dict(),
        "scaler": scaler.state_dict(),
        "loop": asdict(state),
        "rng": torch.get_rng_state(),
        "config": config,
    }
    # No mkdir: check_checkpoint required the folder to exist (a typo in a path must not create one).
    atomic_write(path, lambda file: torch.save(payload, file))
    _save_data_artifact(path, config)


def _data_artifact(config: dict[str, Any]) -> DataArtifact | None:
    from elastune.data.artifacts import data_artifact

    return data_artifact(config)


def _check_data_artifact(path: Path, config: dict[str, Any]) -> None:
    """A run resumed on a file source must turn the data into the ids the checkpoint's run did (a
    table's vocabulary, a text's tokenizer): the same config can read a file whose contents changed
    since, and then every row id would move."""
    artifact = _data_artifact(config)
    if artifact is None:
        return
    beside = path.with_name(path.name + artifact.suffix)
    if not beside.is_file():
        return
    try:
        saved = artifact.ids(json.loads(beside.read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        saved = None
    if saved is None or saved != artifact.ids(json.loads(artifact.text)):
        raise _problem(
            path,
            f"was trained with the {artifact.name} in {str(beside)!r}, and {artifact.changed}; resume on the data "
            "it was trained on, or point checkpoint.path at a new file",
        )


def _save_data_artifact(path: Path, config: dict[str, Any]) -> None:
    """A file source's data artifact beside the checkpoint (`<checkpoint>.vocab.json`,
    `<checkpoint>.tokenizer.json`): the weights' rows mean nothing without the map to ids that
    trained them (data/clicks.py: DataArtifact)."""
    artifact = _data_artifact(config)
    if artifact is None:
        return
    data = artifact.text.encode("utf-8")
    atomic_write(path.with_name(path.name + artifact.suffix), lambda file: file.write(data))


def load_checkpoint(
    path: Path,
    *,
    model: nn.Module,
    opts: Optimizers,
    scaler: torch.amp.GradScaler,
    config: dict[str, Any],
) -> LoopState:
    # Read again rather than kept from check_checkpoint: the tensors are read here, after the
    # memory baseline, and a file replaced since the check is checked again all the same.
    payload, state = _read(path, config, mmap=False)
    # Checked on the tensors read now (the check before the build maps the file, reading no more
    # than its structure): a NaN or an inf would turn every weight it touches into NaN.
    wrong = [*non_finite(payload), *scaler_problems(payload["scaler"], scaler.state_dict())]
    if wrong:
        raise _problems(path, wrong)
    try:
        model.load_state_dict(payload["model"])
        opts.load_state_dict(payload["optimizers"])
        scaler.load_state_dict(payload["scaler"])
        torch.set_rng_state(payload["rng"])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        raise _problem(
            path, f"does not fit the model this config builds ({_first_line(exc)}); point checkpoint.path at a new file"
        ) from None
    return state


# -- the checks


def _check_place(path: Path, *, writes: bool) -> None:
    if path.is_symlink():
        # Refused even where the run only reads it: every run writes the checkpoint back at its
        # end, and the rename would replace the link, not the file it points at.
        raise _problem(
            path,
            f"is a symbolic link (to {_link_target(path)!r}); elastune neither reads nor writes a checkpoint "
            "through a link: give the path of the file itself",
        )
    if path.is_dir():
        raise _problem(path, "is a folder; give a file in it, e.g. checkpoint.path=" + str(path / "run.ckpt"))
    if path.exists() and not path.is_file():
        raise _problem(path, "is not a regular file; give the path of a file")
    if not writes:
        return
    folder = path.parent
    if not folder.exists():
        tilde = " (a shell expands ~, elastune does not: give the full path)" if str(path).startswith("~") else ""
        raise _problem(
            path,
            f"its folder {str(folder)!r} does not exist{tilde} (elastune does not create folders); "
            "create it first or point checkpoint.path into an existing folder",
        )
    if not folder.is_dir():
        raise _problem(path, f"{str(folder)!r} is not a folder; point checkpoint.path into a folder")
    try:
        # A real write test: as root, os.access says yes where no file can be created (/proc, /sys).
        # The file has no name (O_TMPFILE where the filesystem has it) and is gone when closed.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise _problem(
            path,
            f"cannot create a file in {str(folder)!r} ({exc.strerror or exc}); point checkpoint.path "
            "into a folder this process can write",
        ) from None


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _read(path: Path, config: dict[str, Any], *, mmap: bool) -> tuple[dict[str, Any], LoopState]:
    """The payload of an elastune checkpoint written by a run of this config, and its loop state."""
    payload = _load(path, mmap=mmap)
    missing = [key for key in _KEYS if key not in payload] if isinstance(payload, dict) else list(_KEYS)
    if missing:
        raise _problem(
            path,
            f"is not an elastune checkpoint (it has no {', '.join(missing)}); point checkpoint.path at a "
            "checkpoint elastune wrote, or at a new file to start from scratch",
        )
    wrong = _malformed(payload)
    if wrong:
        raise _problem(path, f"is not an elastune checkpoint (malformed {', '.join(wrong)}); point it at another file")
    differ = [k for k in _MUST_MATCH if payload["config"].get(k) != config.get(k)]
    if differ:
        raise _problem(
            path,
            f"was written by a run with different {', '.join(differ)}; "
            "resume with the same config or point checkpoint.path at a new file",
        )
    state = _loop_state(path, payload["loop"], config)
    wrong = optimizer_steps(payload["optimizers"], state.step)
    if wrong:
        raise _problems(path, wrong)
    return payload, state


def _malformed(payload: dict[str, Any]) -> list[str]:
    """The parts of a payload that are not what save_checkpoint writes. What the model's and the
    optimizers' state dicts hold is checked by their load_state_dict, once the model is built."""
    opts, scaler, rng = payload["optimizers"], payload["scaler"], payload["rng"]
    fine = {
        "model": isinstance(payload["model"], Mapping),
        "optimizers": isinstance(opts, Mapping) and isinstance(opts.get("dense"), Mapping),
        "scaler": isinstance(scaler, Mapping)
        and (not scaler or set(scaler) == _SCALER_KEYS)
        and all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in scaler.values()),
        "loop": isinstance(payload["loop"], Mapping),
        # the CPU generator's state, of the size torch.set_rng_state takes (it checks the contents)
        "rng": isinstance(rng, torch.Tensor)
        and rng.dtype == torch.uint8
        and rng.layout == torch.strided
        and rng.shape == torch.get_rng_state().shape,
        "config": isinstance(payload["config"], Mapping),
    }
    return [key for key, ok in fine.items() if not ok]


def _loop_state(path: Path, loop: Mapping[Any, Any], config: Mapping[str, Any]) -> LoopState:
    """The loop state, if a run of `config` could have written it; every field out of bounds at once."""
    batch = config["batch"]
    wrong = loop_problems(loop, steps=config["steps"], micro=batch["micro"], accum=batch["accum"])
    if wrong:
        raise _problems(path, wrong)
    return LoopState(**loop)


def _load(path: Path, *, mmap: bool) -> Any:
    """torch.load with weights_only=True: tensors and plain data only, never a pickled object."""
    if not zipfile.is_zipfile(path):  # torch.save's format; a bare pickle, random bytes, an empty file
        raise _problem(
            path,
            "is not an elastune checkpoint (not a torch checkpoint archive); point checkpoint.path at a "
            "checkpoint elastune wrote, or at a new file to start from scratch",
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # any failure to read it means: not a checkpoint elastune can use
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        reason = (
            f"it holds a pickled Python object ({found.group(1)}) and loading it would run code"
            if found
            else _first_line(exc)
        )
        raise _problem(
            path,
            f"is not an elastune checkpoint, refused unread ({reason}); point checkpoint.path at a "
            "checkpoint elastune wrote, or at a new file to start from scratch",
        ) from None


def _is_checkpoint(path: Path) -> bool:
    try:
        payload = _load(path, mmap=True)
    except InputError:
        return False
    return isinstance(payload, dict) and all(key in payload for key in _KEYS)


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False  # unreadable: not known to be empty, so not overwritten either


def _first_line(exc: BaseException) -> str:
    """The gist of an error: its first line, and the next when the first only introduces it
    (load_state_dict's "Error(s) in loading state_dict for DLRM:")."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    line = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
    return line if len(line) <= 200 else line[:197] + "..."


def _problem(path: Path, message: str) -> ConfigError:
    return _problems(path, [message])


def _problems(path: Path, messages: list[str]) -> ConfigError:
    return ConfigError([Problem("checkpoint.path", str(path), message) for message in messages])
