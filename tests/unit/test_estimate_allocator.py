"""The CUDA caching allocator's model (memory/cuda_allocator.py), fed known allocation and free
sequences. Each expected figure follows from PyTorch's documented rules for its CUDA caching
allocator (c10/cuda/CUDACachingAllocator.cpp, default settings):

- a request rounds up to a multiple of 512 B (kMinBlockSize);
- a rounded request of at most 1 MiB (kSmallSize) is served from the small pool, whose segments are
  2 MiB (kSmallBuffer); a larger one from the large pool, whose new segment is 20 MiB (kLargeBuffer)
  for requests under 10 MiB (kMinLargeAlloc), else the request rounded up to 2 MiB (kRoundLarge);
- a request takes the smallest cached free block of its pool that fits (ties: the lowest address);
- the block is split when what is left is at least 512 B (small pool) or more than 1 MiB (large
  pool); otherwise the request holds the whole block (and counts as allocated in full);
- a freed block stays cached, merges with free neighbours in its segment, and is never returned.

The model's reserved bytes are counted above the probe's baseline, where elastune's warm-up has
left one empty 2 MiB small segment cached: the first 2 MiB of small requests reserve nothing.
"""

from __future__ import annotations

import pytest
from elastune.memory.cuda_allocator import CachingAllocator

KiB, MiB = 2**10, 2**20


class Replay:
    """Named allocations through one model, so a sequence reads as the allocator's calls."""

    def __init__(self) -> None:
        self.model = CachingAllocator()
        self.keys: dict[str, int] = {}

    def malloc(self, name: str, nbytes: int) -> Replay:
        self.keys[name] = self.model.malloc(nbytes)
        return self

    def free(self, *names: str) -> Replay:
        for name in names:
            self.model.free(self.keys.pop(name))
        return self

    @property
    def figures(self) -> tuple[int, int, int]:
        return self.model.reserved, self.model.peak_reserved, self.model.allocated


def test_requests_round_up_to_512_bytes() -> None:
    r = Replay().malloc("a", 1).malloc("b", 513).malloc("c", 512).malloc("empty", 0)
    assert r.figures == (0, 0, 512 + 1024 + 512)  # in the baseline's small segment; empty: nothing


def test_small_requests_pack_into_2_mib_segments() -> None:
    r = Replay()
    for i in range(4):
        r.malloc(f"s{i}", 512 * KiB)
    assert r.figures == (0, 0, 2 * MiB)  # the baseline's segment, filled exactly
    r.malloc("s4", 512 * KiB)
    assert r.figures == (2 * MiB, 2 * MiB, 2 * MiB + 512 * KiB)  # a second small segment


def test_one_mib_is_small_and_one_byte_more_is_large() -> None:
    r = Replay().malloc("a", MiB).malloc("b", MiB)
    assert r.figures == (0, 0, 2 * MiB)  # both small: the baseline's segment
    r.malloc("c", MiB + 1)  # rounds to 1 MiB + 512: the large pool, a 20 MiB segment
    assert r.figures == (20 * MiB, 20 * MiB, 3 * MiB + 512)


def test_small_and_large_pools_do_not_serve_each_other() -> None:
    r = Replay().malloc("large", 1536 * KiB)  # the baseline's free 2 MiB small segment cannot serve it
    assert r.figures == (20 * MiB, 20 * MiB, 1536 * KiB)
    r.free("large").malloc("small", 512 * KiB)  # nor the free 20 MiB large one a small request
    assert r.figures == (20 * MiB, 20 * MiB, 512 * KiB)
    for i in range(4):
        r.malloc(f"s{i}", 512 * KiB)  # three fill the small segment; the fourth needs a new one
    assert r.figures == (22 * MiB, 22 * MiB, 2560 * KiB)


def test_requests_under_10_mib_split_a_20_mib_segment() -> None:
    r = Replay()
    for i in range(6):
        r.malloc(f"m{i}", 3 * MiB)  # 6 x 3 MiB out of one 20 MiB segment, 2 MiB left
    assert r.figures == (20 * MiB, 20 * MiB, 18 * MiB)
    r.malloc("m6", 3 * MiB)  # 2 MiB left does not fit: a second 20 MiB segment
    assert r.figures == (40 * MiB, 40 * MiB, 21 * MiB)


def test_requests_of_10_mib_and_more_get_their_size_rounded_to_2_mib() -> None:
    r = Replay().malloc("ten", 10 * MiB)
    assert r.figures == (10 * MiB, 10 * MiB, 10 * MiB)  # not under 10 MiB: no 20 MiB segment
    r.malloc("eleven", 11 * MiB + 1)
    assert r.figures == (22 * MiB, 22 * MiB, 22 * MiB)  # a 12 MiB segment, its 1 MiB rest not split off


def test_a_large_block_is_split_only_when_more_than_1_mib_is_left() -> None:
    r = Replay().malloc("a", 9 * MiB)  # 20 MiB segment: 11 MiB left, split off
    r.malloc("b", 10 * MiB + 512 * KiB)  # takes the 11 MiB block: 512 KiB left, not split
    assert r.figures == (20 * MiB, 20 * MiB, 20 * MiB)  # b holds all 11 MiB
    r.free("b").malloc("c", 9 * MiB + 1 * KiB)  # 11 MiB - (9 MiB + 1 KiB) is more than 1 MiB: split
    r.malloc("d", 1536 * KiB)  # so the rest serves this one
    assert r.figures == (20 * MiB, 20 * MiB, 9 * MiB + (9 * MiB + KiB) + (2 * MiB - KiB))


def test_a_small_block_is_split_when_512_bytes_are_left() -> None:
    # The baseline's 2 MiB small segment down to its last 512 B: each split leaves at least 512 B.
    r = Replay().malloc("a", MiB).malloc("b", MiB - 512).malloc("c", 512)
    assert r.figures == (0, 0, 2 * MiB)


def test_best_fit_takes_the_smallest_cached_block_that_fits() -> None:
    # One 20 MiB segment cut into 6 | 2 | 4 | 8 MiB, then the 6 and the 4 freed (not adjacent).
    r = Replay().malloc("x1", 6 * MiB).malloc("x2", 2 * MiB).malloc("x3", 4 * MiB).malloc("x4", 8 * MiB)
    r.free("x1", "x3")
    assert r.figures == (20 * MiB, 20 * MiB, 10 * MiB)
    # 3 MiB takes the 4 MiB hole (1 MiB left: not split), 5 MiB the 6 MiB one: nothing new reserved.
    # Taking the first hole that fits (the 6 MiB one, lower) would leave no room for the 5 MiB.
    r.malloc("y1", 3 * MiB).malloc("y2", 5 * MiB)
    assert r.figures == (20 * MiB, 20 * MiB, 20 * MiB)


def test_best_fit_breaks_ties_by_address() -> None:
    # One 20 MiB segment cut into 4 | 4 | 4 | 8 MiB; the first and third freed: two 4 MiB holes.
    r = Replay().malloc("h1", 4 * MiB).malloc("u", 4 * MiB).malloc("h2", 4 * MiB).malloc("x", 8 * MiB)
    r.free("h1", "h2")
    r.malloc("c", 3 * MiB)  # equal fits: the lower address, h1's hole (1 MiB left: not split)
    r.free("x")  # merges with h2's hole, still free: 12 MiB
    r.malloc("d", 11 * MiB)  # fits the merged block; had c taken h2's hole, a 12 MiB segment more
    assert r.figures == (20 * MiB, 20 * MiB, 4 * MiB + 4 * MiB + 12 * MiB)


def test_freed_neighbours_merge_and_serve_a_larger_request() -> None:
    r = Replay().malloc("a", 6 * MiB).malloc("b", 6 * MiB).malloc("c", 6 * MiB)  # 2 MiB tail free
    r.free("a", "b")  # one free 12 MiB block
    r.malloc("d", 11 * MiB)  # fits only merged (1 MiB left: not split): no new segment
    assert r.figures == (20 * MiB, 20 * MiB, 18 * MiB)
    r.free("c", "d")  # the whole segment free again, one block
    r.malloc("e", 19 * MiB)
    assert r.figures == (20 * MiB, 20 * MiB, 20 * MiB)


def test_segments_are_never_returned_and_the_peak_is_the_high_water_mark() -> None:
    r = Replay().malloc("a", 30 * MiB).malloc("b", 12 * MiB)
    r.free("a", "b")
    assert r.figures == (42 * MiB, 42 * MiB, 0)  # cached, not returned
    r.malloc("c", 40 * MiB)  # neither cached segment holds 40 MiB: a third one
    assert r.figures == (82 * MiB, 82 * MiB, 40 * MiB)
    r.free("c").malloc("d", 25 * MiB)  # best fit: the 30 MiB segment (5 MiB left, split)
    r.malloc("e", 35 * MiB)  # the 40 MiB segment
    assert r.figures == (82 * MiB, 82 * MiB, 60 * MiB)


@pytest.mark.parametrize("nbytes", [1, 511, 512, 513, 64 * KiB + 1, MiB - 1])
def test_a_freed_small_block_is_reused_by_the_same_request(nbytes: int) -> None:
    r = Replay().malloc("a", nbytes)
    before = r.figures
    r.free("a").malloc("b", nbytes)
    assert r.figures == before
