"""Ending what a test started outside its own process tree (a `ray start` daemonizes its children)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
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


# A local Ray on 127.0.0.1 in a process of its own: it writes its GCS address to a file, then holds
# the cluster until its stdin closes. What it asks of clients (a token or none) comes from its env.
RAY_DRIVER = """
import sys
from pathlib import Path
import ray
context = ray.init(address="local", num_cpus=1, _node_ip_address="127.0.0.1", include_dashboard=False,
                   _temp_dir=sys.argv[1], log_to_driver=False)
Path(sys.argv[2]).write_text(context.address_info["gcs_address"])
sys.stdin.read()
ray.shutdown()
"""


@contextlib.contextmanager
def ray_driver(folder: Path, env: dict[str, str], wait_until: Callable[..., None]) -> Iterator[str]:
    """The GCS address of a Ray started with `env`, its temp folder under `folder`; on leaving, its
    driver is told to stop, and anything of it still running (its processes name `folder`) killed."""
    address_file = folder / "address"
    driver = subprocess.Popen(
        [sys.executable, "-c", RAY_DRIVER, str(folder / "ray"), str(address_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        wait_until(lambda: address_file.is_file() or driver.poll() is not None, 180, "the Ray driver's start")
        assert driver.poll() is None, driver.stderr.read().decode()[-3000:] if driver.stderr else ""
        yield address_file.read_text().strip()
    finally:
        with contextlib.suppress(OSError):
            assert driver.stdin is not None
            driver.stdin.close()  # the driver shuts its cluster down
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(timeout=60)
        kill_processes_naming(folder)
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
