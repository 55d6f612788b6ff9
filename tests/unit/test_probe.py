"""The CPU probe's measurement regime: glibc's malloc pinned so the resident peak is reproducible."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Fresh interpreters: the regime is per process, and pytest's own has long since moved glibc's
# adaptive threshold. Each figure: resident bytes a block hands back when it is freed (resident
# while held, minus resident after the free), so free space the heap already held, which a block
# may partly reuse, does not enter it. glibc's own default is no control: where its adaptive
# threshold stands when the script starts depends on what the interpreter and torch's import freed
# (CI's machine kept 5 MiB of a freed 20 MiB block, this one none), so the control is the virtual
# device's fixed regime, which maps every block of 256 KiB or more.
SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    from elastune.training.probe import CpuProbe, VirtualProbe
    MiB = 2**20
    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    def handed_back(nbytes):
        block = torch.ones(nbytes // 4)  # written: every page resident
        held = rss()
        del block
        return held - rss()
    if sys.argv[1] == "pinned":
        CpuProbe()
    else:
        VirtualProbe(capacity_bytes=2**30)
    print(json.dumps([handed_back(20 * MiB), handed_back(40 * MiB)]))
    """
)
MiB = 2**20


def _handed_back(mode: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return list(json.loads(done.stdout))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc are Linux's")
def test_pinned_heap_keeps_blocks_under_32_mib_in_the_heap_and_maps_larger_ones() -> None:
    mapped_20, _ = _handed_back("mapped")
    pinned_20, pinned_40 = _handed_back("pinned")
    # The control regime maps a 20 MiB block and unmaps it on free: the measurement can tell.
    assert mapped_20 > 16 * MiB
    # Pinned, a block under 32 MiB comes from the heap, whose freed top stays resident for reuse...
    assert pinned_20 < 4 * MiB
    # ... and a larger one is mapped and handed back on free.
    assert pinned_40 > 36 * MiB


# A first run faults in pages of code and libraries (file-backed), and a Ray worker maps the object
# store (shared memory): the virtual device stands in for a GPU, which holds neither, so it counts
# anonymous memory only, while the default CPU probe counts the whole resident set.
FILE_PAGES = textwrap.dedent(
    """
    import json, mmap, sys, torch
    from elastune.training.probe import CpuProbe, VirtualProbe
    MiB = 2**20
    probe = CpuProbe() if sys.argv[1] == "cpu" else VirtualProbe(capacity_bytes=2**30)
    with open(sys.argv[2], "rb") as f:
        pages = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        probe.reset()
        touched = sum(pages[i] for i in range(0, len(pages), mmap.PAGESIZE))  # 32 MiB of file pages
        file_only = probe.window_peak()
        block = torch.ones(16 * MiB // 4)  # and 16 MiB of anonymous memory
        both = probe.window_peak()
    print(json.dumps([file_only, both]))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
@pytest.mark.parametrize("probe", ["cpu", "virtual"])
def test_the_virtual_device_leaves_file_backed_pages_out(probe: str, tmp_path) -> None:
    data = tmp_path / "pages.bin"
    data.write_bytes(bytes(range(256)) * (32 * MiB // 256))
    done = subprocess.run(
        [sys.executable, "-c", FILE_PAGES, probe, str(data)], capture_output=True, text=True, check=True
    )
    file_only, both = json.loads(done.stdout)
    if probe == "cpu":  # the whole resident set: the file's pages count
        assert file_only > 28 * MiB, file_only
    else:
        assert file_only < 4 * MiB, file_only
        assert 14 * MiB < both < 20 * MiB, both  # the anonymous block is measured, the file is not
