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


def test_a_tie_between_segments_goes_to_the_one_reserved_first() -> None:
    # Two 20 MiB segments, each ending up with a free 1.5 MiB block: the first one's at its end,
    # the second one's at its start. A 1.5 MiB request takes the first segment's (reserved first:
    # the lower address), so the second segment's block merges back whole when its neighbour is
    # freed, and a 20 MiB request then fits without a new segment.
    r = Replay().malloc("x", 18 * MiB + 512 * KiB)  # a 20 MiB segment: 1.5 MiB left, split off
    r.malloc("h", 1536 * KiB)  # takes that rest
    r.malloc("y1", 1536 * KiB).malloc("y2", 18 * MiB + 512 * KiB)  # a second 20 MiB segment, filled
    r.free("h", "y1")  # two free 1.5 MiB blocks
    r.malloc("c", 1536 * KiB)  # h's
    r.free("y2")  # merges with y1's block: the whole second segment free
    r.malloc("d", 20 * MiB)
    assert r.figures == (40 * MiB, 40 * MiB, 20 * MiB + 18 * MiB + 512 * KiB + 1536 * KiB)


def _split_segment() -> Replay:
    """One 20 MiB segment: x (8 MiB, freed) | y (12 MiB); then z (3 MiB) splits x's block, leaving
    a free 5 MiB block between z and y."""
    return Replay().malloc("x", 8 * MiB).malloc("y", 12 * MiB).free("x").malloc("z", 3 * MiB)


def test_the_rest_of_a_split_block_merges_with_the_block_after_it() -> None:
    r = _split_segment().free("y")  # y merges with the free 5 MiB before it: 17 MiB
    r.malloc("big", 16 * MiB)  # fits it (1 MiB left: not split): no new segment
    assert r.figures == (20 * MiB, 20 * MiB, 3 * MiB + 17 * MiB)


def test_a_reused_split_rest_merges_with_the_block_after_it_when_freed() -> None:
    r = _split_segment().malloc("w", 5 * MiB)  # takes the 5 MiB rest whole
    r.free("y", "w")  # y first (its neighbours in use), then w: merges with y, 17 MiB
    r.malloc("big", 16 * MiB)
    assert r.figures == (20 * MiB, 20 * MiB, 3 * MiB + 17 * MiB)


def _four_blocks() -> Replay:
    """One 20 MiB segment cut into a | b | c (4 MiB each) | d (8 MiB)."""
    return Replay().malloc("a", 4 * MiB).malloc("b", 4 * MiB).malloc("c", 4 * MiB).malloc("d", 8 * MiB)


@pytest.mark.parametrize(
    ("frees", "then"),
    [
        # c merges into b's block (its predecessor); a then merges with that: 12 MiB free
        (("b", "c", "a"), 11 * MiB),
        # b merges with c (its successor); d then merges with that: 16 MiB free
        (("c", "b", "d"), 15 * MiB),
    ],
)
def test_merged_blocks_stay_linked_to_their_neighbours(frees: tuple[str, ...], then: int) -> None:
    r = _four_blocks().free(*frees).malloc("big", then)  # fits the merged block (1 MiB left, not split)
    assert r.figures[:2] == (20 * MiB, 20 * MiB)


def test_a_merged_block_reused_and_freed_merges_with_its_successor() -> None:
    r = _four_blocks().free("c", "b")  # one free 8 MiB block where b and c were
    r.malloc("e", 8 * MiB)  # takes it whole
    r.free("d", "e")  # d's neighbour is in use; then e merges with d: 16 MiB
    r.malloc("big", 15 * MiB)
    assert r.figures[:2] == (20 * MiB, 20 * MiB)


def test_the_peak_of_allocated_bytes_is_its_high_water_mark() -> None:
    model = CachingAllocator()
    first, second = model.malloc(MiB), model.malloc(512 * KiB)
    model.free(first)
    assert (model.peak_allocated, model.allocated) == (MiB + 512 * KiB, 512 * KiB)
    model.free(second)
    model.free(second)  # freeing twice, or a key never seen, changes nothing
    model.free(12345)
    assert (model.peak_allocated, model.allocated) == (MiB + 512 * KiB, 0)


def test_buffers_no_tensor_owns_get_keys_no_traced_tensor_has() -> None:
    # Traced tensors are keyed by their storages' addresses (live_bytes.py), never negative.
    model = CachingAllocator()
    model.malloc(512, key=0)
    model.malloc(512, key=1)
    anonymous = [model.malloc(512) for _ in range(3)]
    assert len(set(anonymous)) == 3 and all(key < 0 for key in anonymous)
    model.free(0)
    model.free(1)
    assert model.allocated == 3 * 512  # the anonymous buffers are still held
    for key in anonymous:
        model.free(key)
    assert model.allocated == 0


def test_rekey_hands_a_block_to_a_new_key() -> None:
    model = CachingAllocator()
    model.malloc(1024, key=1)
    model.rekey(1, 2)  # a result written into its input's memory
    model.free(1)  # the old key owns nothing now
    assert model.allocated == 1024
    model.rekey(99, 100)  # a key never seen: nothing to hand over
    model.free(100)
    assert model.allocated == 1024
    model.free(2)
    assert model.allocated == 0
