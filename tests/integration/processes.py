"""Ending what a test started outside its own process tree (a `ray start` daemonizes its children)."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import psutil


def kill_processes_naming(folder: Path) -> None:
    """SIGKILL every process whose command line names `folder` (a Ray started with its temp dir
    there), and their children, and wait for them to go."""
    family: list[psutil.Process] = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(str(folder) in part for part in proc.info["cmdline"] or []):
                family += [proc, *proc.children(recursive=True)]
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(family, timeout=30)
