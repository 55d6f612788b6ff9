"""The CPU probe's measurement regime: glibc's malloc pinned so the resident peak is reproducible."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Fresh interpreters: the regime is per process, and pytest's own has long since moved glibc's
# adaptive threshold. Each figure: resident bytes left after a block is allocated, touched and
# freed. glibc's own default is no control: where its adaptive threshold stands when the script
# starts depends on what the interpreter and torch's import freed (CI's machine left 5 MiB of a
# freed 20 MiB block, this one none), so the control is the virtual device's fixed regime, which
# maps every block of 256 KiB or more.
SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    from elastune.memory.probe import CpuProbe, VirtualProbe
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
    else:
        VirtualProbe(capacity_bytes=2**30)
    torch.ones(2**20).add_(1)  # torch's lazy set-up (the thread pool's stacks) before measuring
    print(json.dumps([left_after_free(20 * MiB), left_after_free(40 * MiB)]))
    """
)
MiB = 2**20


def _left_after_free(mode: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
def test_pinned_heap_keeps_blocks_under_32_mib_in_the_heap_and_maps_larger_ones() -> None:
    mapped_20, _ = _left_after_free("mapped")
    pinned_20, pinned_40 = _left_after_free("pinned")
    # The control regime maps a 20 MiB block and unmaps it on free: the measurement can tell.
    assert mapped_20 < 4 * MiB
    # Pinned, a block under 32 MiB comes from the heap, whose freed top stays resident for reuse...
    assert pinned_20 > 16 * MiB
    # ... and a larger one is mapped and handed back on free.
    assert pinned_40 < 4 * MiB
