"""Device memory as EDO sees it: grants and measured use per trial, the reserve, the free part.

`read_broker_status` is the one call to the broker; the app takes any function of the same shape
(`create_app(memory_reader=...)`), so a test can drive the page from a broker it started itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from elastune.cluster import connection_error_text

__all__ = ["MemoryReader", "make_broker_reader", "memory_view"]

MemoryReader = Callable[[float], "dict[str, Any] | None"]

_NO_BROKER = (
    "No EDO broker is running, so no trial shares a device right now. It starts with a sweep whose "
    "trials take a fraction of a GPU (resources.gpus_per_trial below 1, or edo: on in the spec)."
)


def make_broker_reader(address: str | None, wait_s: float = 8.0) -> MemoryReader:
    """A reader that connects this process to the cluster at `address` (UISettings.broker_address)
    on first use and asks the broker actor.

    A page poll must never hang on Ray: connecting and reading run in a helper thread, and a call
    that takes longer than `wait_s` reports "not answering" while the attempt goes on behind it.
    """
    lock = threading.Lock()

    def connect_and_read(timeline_s: float) -> dict[str, Any] | None:
        import ray
        from elastune.edo import broker

        with lock:
            if not ray.is_initialized():
                init_address = _init_address(address)
                if init_address is None:
                    given = "the job server's URL" if address is None else f"--ray-address={address!r}"
                    raise ConnectionError(
                        f"{given} cannot reach the EDO broker (a Ray actor); also start the UI with "
                        "--cluster-address ray://HOST:10001 (the head's Ray Client port) or --cluster-address "
                        "HOST:6379 (its GCS)"
                    )
                ray.init(
                    address=init_address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=False
                )
        status: dict[str, Any] | None = broker.read_status(timeline_s=timeline_s)
        return status

    def read(timeline_s: float) -> dict[str, Any] | None:
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["value"] = connect_and_read(timeline_s)
            except BaseException as exc:  # handed to the caller's thread below
                result["error"] = exc

        worker = threading.Thread(target=run, name="edo-status", daemon=True)
        worker.start()
        worker.join(wait_s)
        if worker.is_alive():
            raise ConnectionError(f"Ray did not answer within {wait_s:.0f} s; still trying")
        if "error" in result:
            raise result["error"]
        value: dict[str, Any] | None = result.get("value")
        return value

    return read


def _init_address(address: str | None) -> str | None:
    """The address ray.init takes, or None when there is none to take (no address, a dashboard
    URL). Never `auto` or `local`: ray.init would look the cluster up in Ray's discovery file,
    which any local user can rewrite (settings.py), and send Ray's token to what it names."""
    if address is None or address.startswith(("http://", "https://")):
        return None
    if address.strip().lower() in ("auto", "local", ""):
        raise ConnectionError(
            f"--cluster-address={address!r} would look the cluster up in Ray's discovery file; give its address"
        )
    return address


def memory_view(reader: MemoryReader, timeline_s: float) -> dict[str, Any]:
    """The page's data: devices with per-trial grants and use, plus the timeline, or why there is none."""
    try:
        status = reader(timeline_s)
    except ImportError:
        return {"available": False, "reason": "This elastune install has no EDO broker module.", **_empty()}
    except ConnectionError as exc:  # Ray's text whole: where it found several clusters, the option to name one
        reason = f"No Ray cluster to ask for device memory: {connection_error_text(exc, '--cluster-address')}"
        return {"available": False, "reason": reason, **_empty()}
    except Exception as exc:  # the broker died mid-call, Ray went away: the page says so and keeps polling
        return {"available": False, "reason": f"Could not read the EDO broker: {exc}", **_empty()}
    if status is None:
        return {"available": False, "reason": _NO_BROKER, **_empty()}
    devices = [_device(d) for d in status.get("devices", [])]
    return {"available": True, "reason": "", "devices": devices, "timeline": list(status.get("timeline", []))}


def _empty() -> dict[str, Any]:
    return {"devices": [], "timeline": []}


def _device(device: dict[str, Any]) -> dict[str, Any]:
    trials = list(device.get("trials", []))
    granted = sum(int(t.get("grant_bytes") or 0) for t in trials)
    used = sum(int(t.get("used_bytes") or 0) for t in trials)
    return {**device, "trials": trials, "granted_bytes": granted, "used_bytes": used}
