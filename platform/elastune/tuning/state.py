"""A sweep's local state folder, `$ELASTUNE_HOME/sweeps/SWEEP_ID`: the one thing a resume trusts.

Tune keeps its experiment there (restoring it unpickles `tuner.pkl` and the trials' saved state)
and elastune keeps the spec the sweep started with (`spec.json`). The MLflow store is not trusted:
a team and its jobs write it, so anyone with write access could plant a record. A resume therefore
takes nothing from the store that names a folder, a cluster or a file to read: the folder is the
one the sweep id given on the command line names, the spec is the local copy, and before Tune
reads the folder, it and everything in it must be this user's own, writable by nobody else, and
no symlink (`trusted_state`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from elastune.errors import InputError, Problem
from elastune.files import atomic_write
from elastune.tuning.spec import SweepSpec, validate_sweep_spec

__all__ = [
    "SPEC_FILE",
    "check_sweep_id",
    "create_state",
    "private_files",
    "read_local_spec",
    "trusted_spec",
    "trusted_state",
    "write_local_spec",
]

SPEC_FILE = "spec.json"
_MAX_SPEC_BYTES = 4 * 1024 * 1024  # a spec is a few KiB; anything near this was not written by elastune
# What new_sweep_id makes of a valid spec name; a sweep id also names its state folder.
_SWEEP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)


def check_sweep_id(sweep_id: str, home: Path, field: str = "--resume") -> Path:
    """The state folder `sweep_id` names under `home`; InputError (exit 2) for anything that is not
    a sweep id (a path, `..`, odd characters)."""
    state = home / sweep_id
    if not _SWEEP_ID.fullmatch(sweep_id) or ".." in sweep_id or state.parent != home:
        raise InputError(
            str(
                Problem(
                    field,
                    sweep_id,
                    "is not a sweep id (letters, digits, '_', '.', '-'; e.g. dlrm_quick-20261124-101500-ab12); "
                    "`elastune sweeps` lists the sweeps",
                )
            )
        )
    return state


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files and folders this process (and a local Ray it starts, whose processes inherit it) creates
    while a sweep runs are its user's alone (umask 077): a resume refuses a state folder anyone else
    could write, so the sweep must not leave one behind, whatever the user's umask."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def create_state(home: Path, sweep_id: str, spec: SweepSpec) -> Path:
    """Make the sweep's state folder (private) and keep the spec in it; the folder must be new."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_entry(home, home)
    state = check_sweep_id(sweep_id, home, field="sweep_id")
    state.mkdir(mode=0o700)
    write_local_spec(state, spec)
    return state


def write_local_spec(state: Path, spec: SweepSpec) -> None:
    """`spec.json` in the state folder, written whole or not at all (elastune/files.py)."""
    # not sorted: the order of `parameters` is meaningful (a gate comes before what it gates)
    text = json.dumps(spec.model_dump(mode="json"), indent=1).encode()
    atomic_write(state / SPEC_FILE, lambda out: out.write(text))


def read_local_spec(state: Path) -> SweepSpec | None:
    """The spec the sweep started with, from its (already checked) state folder; None when the
    folder has none (an older elastune kept the spec in the store only)."""
    path = state / SPEC_FILE
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        raw = handle.read(_MAX_SPEC_BYTES + 1)
    if len(raw) > _MAX_SPEC_BYTES:
        raise InputError(str(Problem(str(path), f"{len(raw):,}+ bytes", "is not a spec elastune wrote; delete it")))
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InputError(str(Problem(str(path), "unreadable", f"is not JSON ({exc}); delete it"))) from None
    return validate_sweep_spec(data, source=str(path))


def trusted_spec(home: Path, state: Path, field: str = "--from-sweep") -> SweepSpec | None:
    """The spec a sweep kept in its state folder, if the folder exists and it, `home` and the spec
    file are this user's alone (as `trusted_state` checks); None where there is no such folder
    (the sweep ran on another machine, or under another ELASTUNE_HOME)."""
    if not os.path.lexists(state):
        return None
    for entry in (home, state, state / SPEC_FILE):
        if os.path.lexists(entry):
            _check_entry(entry, state, field)
    return read_local_spec(state)


def trusted_state(home: Path, state: Path) -> None:
    """Refuse (InputError, exit 2, naming the file) a state folder Tune must not read: `home` and
    the folder, and everything under it, must be owned by this user, writable by nobody else (no
    group or world write bit) and not symlinks. Called before anything in the folder is read."""
    _check_entry(home, home)
    _check_entry(state, state)
    for folder, dirs, files in os.walk(state, followlinks=False):
        for name in [*dirs, *files]:
            _check_entry(Path(folder) / name, state)


def _check_entry(path: Path, root: Path, field: str = "--resume") -> None:
    info = os.lstat(path)
    why = None
    if stat.S_ISLNK(info.st_mode):
        why = f"is a symlink (to {os.readlink(path)!r}); a sweep's state holds none"
    elif info.st_uid != os.getuid():
        why = f"is owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "others" if info.st_mode & stat.S_IWOTH else "its group"
        why = f"is writable by {who} (mode {info.st_mode & 0o777:o})"
    if why is not None:
        raise InputError(
            str(
                Problem(
                    field,
                    str(path),
                    f"{why}: elastune reads (a resume unpickles) what this folder holds, so it must be yours alone; "
                    f"if you trust it, fix it (`chmod -R go-w {root}`, remove the link) and resume again, "
                    "else start a new sweep",
                )
            )
        )
