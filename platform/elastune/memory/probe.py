"""The one seam between elastune and device memory.

Every read of device memory (CUDA allocator statistics, the process's resident set on CPU) and
every limit put on it goes through a `DeviceProbe`. Tests substitute a virtual device here and
nowhere else, so the rest of the code never knows whether a GPU is present.

What each probe measures (ARCHITECTURE.md, "Memory"):
- CUDA: the caching allocator's peaks since `reset()`: allocated bytes (live tensors) and reserved
  bytes (what the allocator holds from the driver, cache included). Both are reported.
- CPU: the process's resident-memory high-water mark (VmHWM) above the resident set at `reset()`.
  Linux lets a process reset its own high-water mark (`/proc/self/clear_refs`, value 5), so the
  peak is of the measured window only, never of what ran before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

__all__ = ["CpuProbe", "CudaProbe", "DeviceProbe", "MemoryPeak", "probe_for"]


@dataclass(frozen=True)
class MemoryPeak:
    """A measured peak, above the baseline taken at `reset()`."""

    peak_bytes: int  # the figure elastune compares with the estimate and the ceiling
    kind: str  # what `peak_bytes` is: "cuda_reserved" or "cpu_rss_hwm"
    allocated_bytes: int | None = None  # CUDA only: peak of live tensors


class DeviceProbe(Protocol):
    """Reads (and on CUDA limits) one device's memory for the current process."""

    kind: str

    def reset(self) -> None:
        """Take the baseline: later peaks are measured above what is in use now."""

    def peak(self) -> MemoryPeak:
        """Highest use since `reset()`, minus the baseline."""

    def current_bytes(self) -> int:
        """In use now, minus the baseline."""

    def total_bytes(self) -> int:
        """The device's capacity."""


class CpuProbe:
    """Resident-set high-water mark of this process, above a baseline (Linux /proc)."""

    kind = "cpu_rss_hwm"

    def __init__(self, proc: Path = Path("/proc/self")) -> None:
        self._proc = proc
        self._baseline = 0
        self._resettable = True

    def reset(self) -> None:
        try:
            # Writing 5 resets VmHWM to the current RSS (Linux >= 4.0), so the high-water mark
            # covers only the window we measure.
            (self._proc / "clear_refs").write_text("5")
        except OSError:
            self._resettable = False
        self._baseline = self._status_kib("VmRSS") * 1024

    def peak(self) -> MemoryPeak:
        if not self._resettable:
            raise RuntimeError(
                "cannot reset the resident-memory high-water mark (/proc/self/clear_refs is not "
                "writable here), so a peak of this run alone cannot be measured"
            )
        hwm = self._status_kib("VmHWM") * 1024
        return MemoryPeak(peak_bytes=max(0, hwm - self._baseline), kind=self.kind)

    def current_bytes(self) -> int:
        return max(0, self._status_kib("VmRSS") * 1024 - self._baseline)

    def total_bytes(self) -> int:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def _status_kib(self, field: str) -> int:
        for line in (self._proc / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"{field} not found in {self._proc / 'status'}")


class CudaProbe:
    """The CUDA caching allocator's statistics for one device."""

    kind = "cuda_reserved"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._base_reserved = 0
        self._base_allocated = 0

    def reset(self) -> None:
        torch.cuda.synchronize(self.device)  # a CPU-GPU sync: stats must include queued kernels
        torch.cuda.reset_peak_memory_stats(self.device)
        self._base_reserved = torch.cuda.memory_reserved(self.device)
        self._base_allocated = torch.cuda.memory_allocated(self.device)

    def peak(self) -> MemoryPeak:
        torch.cuda.synchronize(self.device)
        reserved = torch.cuda.max_memory_reserved(self.device) - self._base_reserved
        allocated = torch.cuda.max_memory_allocated(self.device) - self._base_allocated
        return MemoryPeak(peak_bytes=max(0, reserved), kind=self.kind, allocated_bytes=max(0, allocated))

    def current_bytes(self) -> int:
        return max(0, torch.cuda.memory_reserved(self.device) - self._base_reserved)

    def total_bytes(self) -> int:
        return int(torch.cuda.get_device_properties(self.device).total_memory)


def probe_for(device: torch.device) -> DeviceProbe:
    """The probe that measures `device` for this process."""
    if device.type == "cuda":
        return CudaProbe(device)
    return CpuProbe()


def cuda_available() -> bool:
    """Whether CUDA can be used; the only `torch.cuda` capability check in elastune."""
    return torch.cuda.is_available()


def cuda_device_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cuda_supports_bf16(device: torch.device) -> bool:
    return bool(torch.cuda.is_bf16_supported()) if device.type == "cuda" else True
