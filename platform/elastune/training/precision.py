"""Devices and precisions: resolve `device`, refuse what the machine cannot run, build autocast.

fp32 runs everything in float32. bf16 and fp16 run the matmuls under autocast and keep the
weights, the embedding tables and the optimizer in fp32. fp16 also needs a gradient scaler: its
range is narrow, so small gradients would underflow to zero without scaling the loss first.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import torch

from elastune.errors import DeviceError
from elastune.training import probe

__all__ = ["SPEED_FLAGS", "autocast_for", "check_precision", "cpu_speed_flags", "matmul_seconds", "resolve_device"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# CPU flags that decide which kernels torch runs on a CPU, bf16 and fp16 speed above all: without
# avx512_bf16 / amx_bf16 (avx512_fp16 / amx_fp16) torch emulates the half type in fp32 and converts.
SPEED_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_bf16",
    "amx_fp16",
    "amx_tile",
    "f16c",
)


def resolve_device(name: str) -> torch.device:
    """`auto` is the first GPU if there is one, else the CPU; a GPU that is absent is an error."""
    if name == "auto":
        return torch.device("cuda:0" if probe.cuda_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = probe.cuda_device_count()
        index = device.index or 0
        if index >= count:
            have = f"{count} CUDA device(s)" if count else "no CUDA device"
            raise DeviceError(f"device={name!r}: this machine has {have}; use device=cpu or device=auto")
        device = torch.device("cuda", index)
    return device


def check_precision(precision: str, device: torch.device) -> None:
    """Fail with a clear message, before the model is built, if `device` cannot run `precision`."""
    if precision == "fp32":
        return
    if precision == "bf16" and not probe.cuda_supports_bf16(device):
        raise DeviceError(
            f"precision='bf16' is not supported on {device} (bf16 needs compute capability 8.0+); "
            "use precision=fp16 or precision=fp32"
        )
    try:
        # A tiny matmul under autocast is the honest test: support varies by build and device.
        with autocast_for(precision, device)():
            x = torch.ones(2, 2, device=device)
            (x @ x).sum().item()
    except RuntimeError as exc:
        raise DeviceError(f"precision={precision!r} cannot run on {device}: {exc}; use precision=fp32") from None


def autocast_for(precision: str, device: torch.device) -> Callable[[], AbstractContextManager[object]]:
    """A factory of the autocast context for one forward pass (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = _DTYPES[precision]
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    # Only fp16 needs scaling; a disabled scaler is a pass-through, which keeps the loop uniform.
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def cpu_speed_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...] | None:
    """Which of SPEED_FLAGS this CPU has (the first core's flags line); None where the file is
    not there to read (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return tuple(sorted(set(value.split()) & set(SPEED_FLAGS)))
    return ()


def matmul_seconds(precision: str, size: int = 128, budget_s: float = 0.25) -> float:
    """Seconds one size x size matmul takes on the CPU in `precision`'s dtype: the fastest of as many
    repeats as fit in `budget_s` (the fastest, because other work on the machine only adds time).
    Raises RuntimeError where this torch has no CPU kernel for the dtype."""
    dtype = _DTYPES.get(precision, torch.float32)
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    threads = torch.get_num_threads()
    # One thread: on a busy machine torch's threads wait on each other for whole time slices, and a
    # 2-thread fp32 matmul measured anywhere from 0.2 to 28 ms; one thread gives the kernel's speed.
    torch.set_num_threads(1)
    try:
        a @ b  # the first call pays for picking and loading the kernel
        best = float("inf")
        deadline = time.perf_counter() + budget_s
        while True:
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
            if start + best >= deadline:
                return best
    finally:
        torch.set_num_threads(threads)
