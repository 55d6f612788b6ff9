"""The CPU probe's measurement regime: glibc's malloc pinned so the resident peak is reproducible."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Fresh interpreters: the regime is per process, and pytest's own has long since moved glibc's
# adaptive threshold (a first freed 20 MiB block raises it to 20 MiB, which is why each process
# starts with the 20 MiB block). Each figure: resident bytes left after a block is allocated,
# touched and freed.
SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    from elastune.memory.probe import CpuProbe
    MiB = 2**20
    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    def left_after_free(nbytes):
        before = rss()
        block = torch.ones(nbytes // 4)
        del block
        return rss() - before
    if sys.argv[1] == "pinned":
        CpuProbe()
    print(json.dumps([left_after_free(20 * MiB), left_after_free(40 * MiB)]))
    """
)
MiB = 2**20


def _left_after_free(mode: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
def test_pinned_heap_keeps_blocks_under_32_mib_in_the_heap_and_maps_larger_ones() -> None:
    default_20, _ = _left_after_free("default")
    pinned_20, pinned_40 = _left_after_free("pinned")
    # glibc's default maps a first 20 MiB block (its threshold starts at 128 KiB), unmapped on free.
    assert default_20 < 4 * MiB
    # Pinned, a block under 32 MiB comes from the heap, whose freed top stays resident for reuse...
    assert pinned_20 > 16 * MiB
    # ... and a larger one is mapped and handed back on free.
    assert pinned_40 < 4 * MiB
