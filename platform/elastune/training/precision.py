"""Devices and precisions: resolve `device`, refuse what the machine cannot run, build autocast.

fp32 runs everything in float32. bf16 and fp16 run the matmuls under autocast and keep the
weights, the embedding tables and the optimizer in fp32. fp16 also needs a gradient scaler: its
range is narrow, so small gradients would underflow to zero without scaling the loss first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

from elastune.errors import DeviceError
from elastune.training import probe

__all__ = ["autocast_for", "check_precision", "resolve_device"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
