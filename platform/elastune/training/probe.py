"""The one seam between elastune and device memory.

Every read of device memory (CUDA allocator statistics, the process's resident set on CPU) and
every limit put on it goes through a `DeviceProbe`. Tests substitute a virtual device here and
nowhere else, so the rest of the code never knows whether a GPU is present.

What each probe measures:
- CUDA: the caching allocator's peaks since `reset()`: allocated bytes (live tensors) and reserved
  bytes (what the allocator holds from the driver, cache included). Both are reported.
- CPU: the process's resident-memory high-water mark (VmHWM) above the resident set at `reset()`.
  Linux lets a process reset its own high-water mark (`/proc/self/clear_refs`, value 5), so the
  peak is of the measured window only, never of what ran before. The probe also pins glibc's
  malloc to one fixed regime (`pin_heap`), without which the same run's peak is not reproducible.
- Virtual (EDO on a machine without a GPU): a device of configured capacity whose use is this
  process's anonymous resident memory (the CPU figures above without file-backed and shared
  pages). See `VirtualProbe`.

EDO (edo/client.py) also needs per-step peaks and a limit: `ElasticProbe.window_peak` measures
since the last step boundary while `peak()` keeps covering the whole run, and `set_limit` holds the
process to its grant (on CUDA through the allocator's per-process memory fraction).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

__all__ = [
    "CpuProbe",
    "CudaDevice",
    "CudaProbe",
    "DeviceProbe",
    "ElasticProbe",
    "MemoryPeak",
    "VirtualProbe",
    "cuda_devices",
    "probe_for",
]


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


class ElasticProbe(DeviceProbe, Protocol):
    """A probe EDO can hold to a grant (edo/client.py)."""

    # True where the device itself refuses allocations past the limit (CUDA's allocator raises an
    # OutOfMemoryError); False where the client must compare each step's peak with the limit.
    enforces_limit: bool

    def window_peak(self, reset: bool = True) -> int:
        """Highest use since the last reset window (or `reset()`), above the baseline; `reset` starts
        a new window. `peak()` still covers the whole run."""

    def set_limit(self, limit_bytes: int | None) -> None:
        """Hold this process's use of the device to `limit_bytes` (None: no limit)."""

    def limit_bytes(self) -> int | None:
        """The limit set, if any."""

    def trim(self) -> None:
        """Hand memory that is cached but unused back to the device (after a shrink)."""


class CpuProbe:
    """Resident-set high-water mark of this process, above a baseline (Linux /proc).

    With `anonymous`, only anonymous memory counts (heap, mapped blocks, stacks): the pages of code
    and libraries a run faults in for the first time (file-backed) and shared memory (Ray's object
    store) are left out. They are what a GPU never holds and what the processes of a node share,
    yet a first run touches tens of MiB of them (measured: the file-backed resident set grows by
    ~55 MiB during a first LM run). Linux keeps one high-water mark, of the whole resident set, so
    the anonymous peak is that mark less the file-backed and shared pages resident when the window
    closes; file pages faulted in after the peak within the window make the figure low by as much
    (EDO closes a window every step, bench/estimator.py once per run).
    """

    kind = "cpu_rss_hwm"

    def __init__(self, proc: Path = Path("/proc/self"), *, anonymous: bool = False) -> None:
        self._proc = proc
        self._anonymous = anonymous
        self._resident = "RssAnon" if anonymous else "VmRSS"  # what is resident now, in /proc's status
        self._baseline = 0
        self._resettable = True
        self._run_peak = 0  # the highest of the closed windows (window_peak resets VmHWM)
        pin_heap()

    def reset(self) -> None:
        # Free heap pages an earlier run in this process left resident would otherwise sit in the
        # baseline and serve this run's first allocations unseen (a trial process runs many runs).
        trim_heap()
        self._clear_hwm()
        self._baseline = self._status_kib(self._resident)[0] * 1024
        self._run_peak = 0

    def peak(self) -> MemoryPeak:
        return MemoryPeak(peak_bytes=max(self._run_peak, self.window_peak(reset=False)), kind=self.kind)

    def window_peak(self, reset: bool = True) -> int:
        if not self._resettable:
            raise RuntimeError(
                "cannot reset the resident-memory high-water mark (/proc/self/clear_refs is not "
                "writable here), so a peak of this run alone cannot be measured"
            )
        if self._anonymous:  # one read: the mark and the pages to take off it at one instant
            hwm, file_backed, shared = self._status_kib("VmHWM", "RssFile", "RssShmem")
            high = hwm - file_backed - shared
        else:
            (high,) = self._status_kib("VmHWM")
        window = max(0, high * 1024 - self._baseline)
        if reset:
            self._run_peak = max(self._run_peak, window)
            self._clear_hwm()
        return window

    def _clear_hwm(self) -> None:
        try:
            # Writing 5 resets VmHWM to the current RSS (Linux >= 4.0), so the high-water mark
            # covers only the window we measure.
            (self._proc / "clear_refs").write_text("5")
        except OSError:
            self._resettable = False

    def current_bytes(self) -> int:
        return max(0, self._status_kib(self._resident)[0] * 1024 - self._baseline)

    def total_bytes(self) -> int:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def _status_kib(self, *fields: str) -> list[int]:
        """`fields` of /proc/<pid>/status in KiB, from one read (RssAnon, RssFile and RssShmem
        appeared in Linux 4.5)."""
        found = {}
        for line in (self._proc / "status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in fields:
                found[name] = int(value.split()[0])
        missing = [f for f in fields if f not in found]
        if missing:
            raise RuntimeError(f"{', '.join(missing)} not found in {self._proc / 'status'}")
        return [found[f] for f in fields]


class CudaProbe:
    """The CUDA caching allocator's statistics for one device."""

    kind = "cuda_reserved"

    enforces_limit = True  # past the fraction the allocator frees its cache, retries, then raises OOM

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._base_reserved = 0
        self._base_allocated = 0
        self._run_reserved = 0  # the highest of the closed windows (window_peak resets the stats)
        self._run_allocated = 0
        self._limit: int | None = None

    def reset(self) -> None:
        torch.cuda.synchronize(self.device)  # a CPU-GPU sync: stats must include queued kernels
        torch.cuda.reset_peak_memory_stats(self.device)
        self._base_reserved = torch.cuda.memory_reserved(self.device)
        self._base_allocated = torch.cuda.memory_allocated(self.device)
        self._run_reserved = self._run_allocated = 0
        if self._limit is not None:
            # A limit set before the baseline (an EDO grant acquired before train() warms up the
            # runtime) counted the warm-up's workspaces against the grant: count from the new baseline.
            self.set_limit(self._limit)

    def peak(self) -> MemoryPeak:
        reserved = max(self._run_reserved, self.window_peak(reset=False))
        allocated = max(self._run_allocated, torch.cuda.max_memory_allocated(self.device) - self._base_allocated)
        return MemoryPeak(peak_bytes=reserved, kind=self.kind, allocated_bytes=max(0, allocated))

    def window_peak(self, reset: bool = True) -> int:
        torch.cuda.synchronize(self.device)  # a CPU-GPU sync: the window must include queued kernels
        reserved = max(0, torch.cuda.max_memory_reserved(self.device) - self._base_reserved)
        if reset:
            allocated = torch.cuda.max_memory_allocated(self.device) - self._base_allocated
            self._run_reserved = max(self._run_reserved, reserved)
            self._run_allocated = max(self._run_allocated, allocated)
            torch.cuda.reset_peak_memory_stats(self.device)
        return reserved

    def set_limit(self, limit_bytes: int | None) -> None:
        if limit_bytes is not None and (self._limit is None or limit_bytes < self._limit):
            # Lowering the fraction frees nothing by itself: hand the cached blocks back first, so
            # the reserved bytes the allocator checks against the new limit are only live ones.
            torch.cuda.empty_cache()
        self._limit = limit_bytes
        # The fraction is of the whole device and counts everything this process reserved,
        # including the baseline taken at reset(); the grant covers what the run uses above it.
        # The CUDA context and library workspaces are outside it (the device's reserve covers them).
        total = self.total_bytes()
        fraction = 1.0 if limit_bytes is None else min(1.0, (limit_bytes + self._base_reserved) / total)
        torch.cuda.set_per_process_memory_fraction(fraction, self.device)

    def limit_bytes(self) -> int | None:
        return self._limit

    def trim(self) -> None:
        torch.cuda.empty_cache()  # cached free blocks count as reserved, against the limit

    def current_bytes(self) -> int:
        return max(0, torch.cuda.memory_reserved(self.device) - self._base_reserved)

    def total_bytes(self) -> int:
        return int(torch.cuda.get_device_properties(self.device).total_memory)


class VirtualProbe:
    """A device of `capacity_bytes` that exists only in EDO's books: what stands in for a GPU on a
    machine without one, so EDO's whole protocol runs (and is tested) on CPUs.

    Use is measured, not modelled: this process's anonymous resident memory above its baseline
    (`CpuProbe` with `anonymous`: what a device would hold; the pages of code a first run faults in
    and Ray's shared object store are left out, as a GPU never holds them). One adjustment makes
    the figures follow the memory the trial frees: glibc keeps freed heap blocks resident and
    raises its mmap threshold as large blocks are freed (up to 32 MiB), so a trial that shrinks its
    micro-batch would not see its resident set fall. The probe
    therefore fixes the threshold (mallopt) so that every block of 256 KiB or more is mapped on
    allocation and unmapped on free: after a shrink the next step's peak is the smaller one. Blocks
    under the threshold still churn in the heap (a small, bounded part). On a C library without
    mallopt the figures are still real, only sticky. This is a different regime from `CpuProbe`'s
    (`pin_heap`, which this one overrides): the resident set follows the live tensors within a few
    MiB, step by step, which EDO's control loop needs, at the price of page faults on every large
    allocation (slow on some VMs). The estimator prices each regime (memory/overhead.py).

    The limit is not enforced by the device (there is none): the client compares each step's peak
    with it at the step boundary (`enforces_limit = False`).
    """

    kind = CpuProbe.kind  # the figures are the CPU probe's (its anonymous part)
    enforces_limit = False

    def __init__(self, capacity_bytes: int, proc: Path = Path("/proc/self")) -> None:
        self.capacity_bytes = int(capacity_bytes)
        self._cpu = CpuProbe(proc, anonymous=True)
        self._limit: int | None = None
        _map_large_blocks()

    def reset(self) -> None:
        self._cpu.reset()

    def peak(self) -> MemoryPeak:
        return self._cpu.peak()

    def current_bytes(self) -> int:
        return self._cpu.current_bytes()

    def total_bytes(self) -> int:
        return self.capacity_bytes

    def window_peak(self, reset: bool = True) -> int:
        return self._cpu.window_peak(reset)

    def set_limit(self, limit_bytes: int | None) -> None:
        self._limit = limit_bytes

    def limit_bytes(self) -> int | None:
        return self._limit

    def trim(self) -> None:
        """Nothing is cached: freed large blocks are already unmapped."""


VIRTUAL_MMAP_THRESHOLD = 256 * 1024  # the virtual device maps every block of this size or more
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
HEAP_MMAP_THRESHOLD = 32 * 2**20  # glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
_NEVER_TRIM = 2**31 - 1  # mallopt takes an int


def pin_heap() -> bool:
    """Fix glibc's malloc to one regime for the rest of the process, so that a run's resident peak
    is a reproducible function of what it allocates. Returns False where there is no mallopt.

    By default glibc adapts: its mmap threshold starts at 128 KiB and rises to the size of each
    mmapped block freed (up to 32 MiB), and the heap's free top is trimmed at twice that. Whether a
    20 MiB gradient is mapped or carved from the heap then depends on the order of earlier frees,
    and identical runs measured 98 and 135 MiB (bench/RESULTS.md). Pinned: blocks under 32 MiB
    always come from the heap, which is never trimmed (a steady run reuses it, paying no page
    faults), and larger ones are always mapped and returned on free. Mapping everything over a
    small threshold would be reproducible too, but each fresh mapping pays its page faults: 70 ms
    per 20 MiB block on this kind of VM against 3 ms reused.
    """
    libc = _libc()
    if libc is None:
        return False
    # Setting either parameter also switches off glibc's adaptive threshold.
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM)
    )


def trim_heap() -> None:
    """Hand the heap's free pages back to the system, so the resident set falls to what is live."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


@functools.cache  # find_library runs ldconfig: once per process
def _libc() -> ctypes.CDLL | None:
    path = ctypes.util.find_library("c")
    libc = ctypes.CDLL(path) if path else None
    return libc if libc is not None and hasattr(libc, "mallopt") else None


def _map_large_blocks() -> None:
    libc = _libc()
    if libc is None:
        return
    # A fixed threshold also switches off glibc's adaptive one; trimming at the same size returns
    # the heap's free top to the system instead of keeping it resident.
    libc.mallopt(_M_MMAP_THRESHOLD, VIRTUAL_MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, VIRTUAL_MMAP_THRESHOLD)


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


@dataclass(frozen=True)
class CudaDevice:
    """One visible CUDA device as the driver sees it now."""

    index: int
    name: str
    free_bytes: int  # free on the device, other processes' use taken out (cudaMemGetInfo)
    total_bytes: int


def cuda_devices() -> list[CudaDevice]:
    """Every CUDA device this process can see, with its free memory; empty without CUDA."""
    devices = []
    for index in range(cuda_device_count()):
        free, total = torch.cuda.mem_get_info(index)  # creates a CUDA context on the device
        devices.append(CudaDevice(index, torch.cuda.get_device_name(index), int(free), int(total)))
    return devices
