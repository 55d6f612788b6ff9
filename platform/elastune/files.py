"""Writing a file whole or not at all, through no name someone else could have planted.

Checkpoints, the data artifacts beside them and a sweep's local spec are written here: folders
they live in may be shared (a team's checkpoint folder), and a file elastune reads back later
must be the one it wrote.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["atomic_write"]


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Replace `path` by what `write` writes to the binary file it is given, whole or not at all.

    The file written is one this call creates: `mkstemp` opens a new name in path's folder
    exclusively (O_CREAT | O_EXCL: an existing name, a symlink included, is never opened, so never
    followed or clobbered), mode 0600 (no one else can read it half written, or afterwards). On
    any failure it is removed and the error goes on; `path` is left as it was."""
    # The name starts with the target's (a leftover from a killed process says whose it is), cut
    # so that it stays within the file system's 255-byte names.
    fd, name = tempfile.mkstemp(prefix=f"{path.name[:64]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            # The bytes on disk before the rename: the rename may reach the disk first, and a crash
            # between the two would leave `path` naming an empty or partial file.
            os.fsync(file.fileno())
        # Atomic: a reader (a resuming run) sees the old file or the new one, never a torn one; a
        # symlink at `path` is replaced by the file, not written through.
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)  # a failed write (disk full, interrupted) leaves nothing behind
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable: until the folder's entry is on disk, a crash can bring
    back the old file. Best effort: some file systems refuse fsync on a folder, and the rename
    itself has already happened."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
