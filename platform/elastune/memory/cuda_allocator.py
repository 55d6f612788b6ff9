"""A model of PyTorch's CUDA caching allocator: the reserved bytes a sequence of allocations and
frees leaves the device holding.

The CUDA prediction is this model's reserved high-water mark over the trace's allocations and frees,
replayed in order (live_bytes.py): what the device holds beyond the live tensors is the allocator's
rounding and fragmentation (cached free blocks too small or in the wrong pool for the next request),
which depends on the order of requests, not only on their sizes.
"""

from __future__ import annotations

__all__ = ["CachingAllocator"]


class CachingAllocator:
    """A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, defaults:
    no max_split_size, no expandable segments), fed with allocations and frees by key.

    Requests round up to 512 B. Requests up to 1 MiB come from a small pool of 2 MiB segments;
    larger ones from a large pool whose segments are 20 MiB for requests under 10 MiB, else the
    request rounded up to 2 MiB. A request takes the smallest cached free block that fits (best
    fit), splitting it when the rest is at least 512 B (small pool) or over 1 MiB (large pool);
    otherwise a new segment is reserved. Freed blocks stay cached and merge with free neighbours;
    segments are never returned (no empty_cache in a run). `reserved` is counted above the probe's
    baseline, at which elastune's warm-up step has left one empty 2 MiB small segment cached.
    """

    _SMALL, _SMALL_SEGMENT, _LARGE_SEGMENT, _MIN_LARGE, _ROUND_LARGE = (
        2**20,
        2 * 2**20,
        20 * 2**20,
        10 * 2**20,
        2 * 2**20,
    )

    def __init__(self) -> None:
        self.reserved = self.peak_reserved = 0
        self.allocated = self.peak_allocated = 0
        self._next_key = -1  # keys for buffers no traced tensor owns
        self._base = 0  # address counter: the best fit breaks ties by address, as the allocator does
        self._free: dict[bool, list[_Block]] = {True: [], False: []}  # small pool? -> free blocks
        self._used: dict[int, _Block] = {}
        self._free[True].append(self._segment(self._SMALL_SEGMENT, small=True))  # the baseline's

    def malloc(self, nbytes: int, key: int | None = None) -> int:
        if key is None:
            key, self._next_key = self._next_key, self._next_key - 1
        if nbytes <= 0:
            return key  # an empty tensor allocates nothing
        size = max(512, -(-nbytes // 512) * 512)
        small = size <= self._SMALL
        pool = self._free[small]
        fits = [b for b in pool if b.size >= size]
        if fits:
            block = min(fits, key=lambda b: (b.size, b.address))
            pool.remove(block)
        else:
            if small:
                segment = self._SMALL_SEGMENT
            elif size < self._MIN_LARGE:
                segment = self._LARGE_SEGMENT
            else:
                segment = -(-size // self._ROUND_LARGE) * self._ROUND_LARGE
            block = self._segment(segment, small)
            self.reserved += segment
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        rest = block.size - size
        if rest >= 512 if small else rest > self._SMALL:
            tail = _Block(block.address + size, rest, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            pool.append(tail)
        block.free = False
        self._used[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return key

    def rekey(self, old: int, new: int) -> None:
        """The block of `old` now belongs to `new` (a result written into its input's memory)."""
        block = self._used.pop(old, None)
        if block is not None:
            self._used[new] = block

    def free(self, key: int) -> None:
        block = self._used.pop(key, None)
        if block is None:
            return
        self.allocated -= block.size
        block.free = True
        pool = self._free[block.small]
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                pool.remove(neighbour)
                if neighbour is block.prev:
                    block.address, block.prev = neighbour.address, neighbour.prev
                    if neighbour.prev is not None:
                        neighbour.prev.next = block
                else:
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
                block.size += neighbour.size
        pool.append(block)

    def _segment(self, size: int, small: bool) -> _Block:
        block = _Block(self._base, size, small)
        self._base += size
        return block


class _Block:
    __slots__ = ("address", "free", "next", "prev", "size", "small")

    def __init__(
        self, address: int, size: int, small: bool, prev: _Block | None = None, next: _Block | None = None
    ) -> None:
        self.address, self.size, self.small = address, size, small
        self.prev, self.next = prev, next
        self.free = True
