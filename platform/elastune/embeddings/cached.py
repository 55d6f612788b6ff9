"""`cached`: every row in host memory, the most frequently used rows in a cache on the device.

What the literature calls it: a software-managed embedding cache (FBGEMM's UVM caching with an LFU
policy, `EmbeddingLocation.MANAGED_CACHING`; Colossal-AI's frequency-aware cached embedding, which
also warms its cache up from access counts; HugeCTR's embedding cache). Recommendation ids follow a
power law, so a cache of a few percent of the rows serves most lookups.

How: the fp32 table and its row optimizer state live on the host (a CPU tensor, whatever device the
module is on); a cache of `capacity` rows (values and optimizer state together) lives on the
module's device. Lookups read cached rows from the cache and the others from the host. At each
optimizer step the touched rows are updated where they are: in the cache, or on the host for the
ones that missed. Admission is frequency-aware LFU with warm-up: every step counts the accesses of
each row; during the first `warmup_steps` steps nothing is admitted, then the most frequent rows
seen so far fill the cache at once; after that, each step's missed rows are admitted into free
slots, or in place of the least frequently used cached rows when they are used more often. An
evicted row's value and optimizer state are written back to the host. `resize(rows)` changes the
capacity between steps (the elastic optimizer calls it).

The math is that of `full` with the same row optimizer: the host table starts as `full`'s does for
the same seed, and a row's value and state are the same wherever it lives.

Cost: host: rows * (dim + state_width) * 4 bytes, plus 16 bytes per row and 8 per slot of index
(access counts, int64; row -> slot, int32; a scratch for deduplicating a batch's ids, int32;
slot -> row, int64). Device: only the cache,
capacity * (dim + state_width) * 4 bytes. Each step moves the missed rows host -> device (lookup)
and back (update), and the admitted and evicted rows once; the bookkeeping (counts, maps) is on
the host.

Speed: the bookkeeping runs on the host, in passes linear in the batch's ids (no sorting): a
batch's ids are deduplicated with a scatter into a per-row scratch; each forward locates its rows
(cache slot or host) once and the optimizer step reuses that; admission sorts only the candidates
that can win a slot (used more often than the least used cached row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake

from elastune.config import EmbeddingConfig
from elastune.embeddings.base import StrategySpec, register
from elastune.embeddings.full import FullEmbedding
from elastune.embeddings.self_updating import SelfUpdatingEmbedding, _Pending
from elastune.embeddings.sparse_optim import RowUpdate, state_width

__all__ = ["DEFAULT_CACHE_RATIO", "CachedEmbedding", "cache_capacity"]

DEFAULT_CACHE_RATIO = 0.1
DEFAULT_WARMUP_STEPS = 2
_UNSEEN = 2**31 - 1


class _Where(NamedTuple):
    """Where each of n distinct rows lives: positions (0..n) of the cached ones and their slots,
    positions of the others and their host rows. Host tensors, with device copies of what indexes
    device tensors."""

    hit_at: torch.Tensor  # host int64 [h]
    miss_at: torch.Tensor  # host int64 [n - h]
    miss_rows: torch.Tensor  # host int64 [n - h]
    hit_at_dev: torch.Tensor
    miss_at_dev: torch.Tensor
    slots_dev: torch.Tensor  # the cache slots of the hits, in hit_at's order


def cache_capacity(total_rows: int, cfg: EmbeddingConfig) -> int:
    """Rows the cache holds: embedding.cache_rows, else ceil(cache_ratio x all rows) (ratio 0.1)."""
    if cfg.cache_rows is not None:
        return min(cfg.cache_rows, total_rows)
    return min(math.ceil((cfg.cache_ratio or DEFAULT_CACHE_RATIO) * total_rows), total_rows)


class CachedEmbedding(SelfUpdatingEmbedding):
    weight: torch.Tensor  # host fp32 [rows, dim]; stale for cached rows until `flush`
    row_state: torch.Tensor  # host fp32 [rows, state_width]
    counts: torch.Tensor  # host int64 [rows]: accesses so far
    row_to_slot: torch.Tensor  # host int32 [rows]: cache slot of each row, -1 if not cached
    slot_to_row: torch.Tensor  # host int64 [capacity]: row in each slot, -1 if free
    first_seen: torch.Tensor  # host int32 [rows]: `_dedupe`'s scratch
    cache_weight: torch.Tensor  # device fp32 [capacity, dim]
    cache_state: torch.Tensor  # device fp32 [capacity, state_width]
    count_accesses = True
    # Buffers that stay in host memory when the module moves to a device.
    host_buffers = ("weight", "row_state", "counts", "row_to_slot", "slot_to_row", "first_seen")

    def __init__(
        self,
        table_sizes: Sequence[int],
        dim: int,
        capacity: int,
        sparse_optimizer: str = "rowwise_adagrad",
        warmup_steps: int = DEFAULT_WARMUP_STEPS,
    ) -> None:
        super().__init__(table_sizes, dim, sparse_optimizer)
        self.capacity = max(0, min(int(capacity), self.num_rows))
        self.warmup_steps = warmup_steps
        self.hits = 0  # ids served from the cache (every lookup, training and evaluation)
        self.misses = 0  # ids served from the host
        # The host table is built exactly as `full` builds its table, so the same seed gives the
        # same rows (the same random draws, in the same order, on a tensor of the same shape).
        host = FullEmbedding(self.table_sizes, dim).bag.weight.detach()
        self.register_buffer("weight", host)
        self.register_buffer("row_state", torch.zeros(self.num_rows, self.state_width))
        self.register_buffer("counts", torch.zeros(self.num_rows, dtype=torch.int64))
        self.register_buffer("row_to_slot", torch.full((self.num_rows,), -1, dtype=torch.int32), persistent=False)
        self.register_buffer("slot_to_row", torch.full((self.capacity,), -1, dtype=torch.int64), persistent=False)
        self.register_buffer("cache_weight", torch.zeros(self.capacity, dim), persistent=False)
        self.register_buffer("cache_state", torch.zeros(self.capacity, self.state_width), persistent=False)
        # Scratch for `_dedupe`: each row's first position in the batch, _UNSEEN elsewhere.
        self.register_buffer("first_seen", torch.full((self.num_rows,), _UNSEEN, dtype=torch.int32), persistent=False)
        self._where: tuple[torch.Tensor, _Where] | None = None  # the last forward's rows, located
        # The state_dict holds the host table; write the cached rows back first so it is current.
        self.register_state_dict_pre_hook(_flush_before_save)

    # -- public

    def full_table(self) -> torch.Tensor:
        """The whole current table [rows, dim] (the host tensor, with the cached rows written back)."""
        self.flush()
        return self.weight

    def full_row_state(self) -> torch.Tensor:
        """The row optimizer's state of every row [rows, state_width], cached rows written back."""
        self.flush()
        return self.row_state

    def device_bytes(self) -> int:
        """Bytes the cache holds on the device (values and optimizer state of `capacity` rows)."""
        return self.capacity * (self.dim + self.state_width) * 4

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    @torch.no_grad()
    def flush(self) -> None:
        """Write every cached row (value and optimizer state) back to the host; they stay cached."""
        slots = self._occupied()
        rows = self.slot_to_row[slots]
        self._write_host(rows, self.cache_weight[slots.to(self._device)], self.cache_state[slots.to(self._device)])

    @torch.no_grad()
    def resize(self, rows: int) -> None:
        """Change the cache's capacity to `rows` between steps. Shrinking keeps the most frequently
        used rows and writes the others back; growing admits the most frequent uncached rows (once
        warm-up is over). Values and optimizer state are unchanged wherever a row ends up."""
        capacity = max(0, min(int(rows), self.num_rows))
        if capacity == self.capacity:
            return
        occupied = self._occupied()
        if occupied.numel() > capacity:
            keep = torch.topk(self.counts[self.slot_to_row[occupied]], capacity).indices
            evict = torch.ones(occupied.numel(), dtype=torch.bool)
            evict[keep] = False
            self._evict(occupied[evict])
            occupied = occupied[keep]
        kept = occupied.numel()
        kept_rows = self.slot_to_row[occupied]
        # Through the host: the old cache is let go before the new one is allocated, so a resize
        # never holds two caches on the device (under EDO a grown grant holds the new one only).
        kept_weight, kept_state = self.cache_weight.cpu()[occupied], self.cache_state.cpu()[occupied]
        self.cache_weight = self.cache_weight.new_empty(0, self.dim)  # (a view would keep the storage)
        self.cache_state = self.cache_state.new_empty(0, self.state_width)
        cache_weight = torch.zeros(capacity, self.dim, device=self._device)
        cache_state = torch.zeros(capacity, self.state_width, device=self._device)
        cache_weight[:kept] = kept_weight
        cache_state[:kept] = kept_state
        slot_to_row = torch.full((capacity,), -1, dtype=torch.int64)
        slot_to_row[:kept] = kept_rows
        self.row_to_slot[kept_rows] = torch.arange(kept, dtype=torch.int32)
        self.cache_weight, self.cache_state, self.slot_to_row = cache_weight, cache_state, slot_to_row
        self.capacity = capacity
        if capacity > kept and self._steps >= self.warmup_steps:
            self._admit(((self.counts > 0) & (self.row_to_slot < 0)).nonzero().squeeze(1))

    # -- the self-updating mechanism

    @property
    def _device(self) -> torch.device:
        return self.cache_weight.device

    def _distinct(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if is_fake(flat):
            return super()._distinct(flat)
        rows, inverse, counts = self._dedupe(flat.cpu())
        return rows, inverse.to(flat.device), counts  # rows and counts stay on the host

    def _gather_rows(self, rows: torch.Tensor, counts: torch.Tensor | None) -> torch.Tensor:
        host_rows = rows.cpu()
        if is_fake(rows):  # no values: read every row from both places (the worst case in bytes)
            weight, _ = self._read_any(host_rows)
            return weight
        where = self._locate(host_rows)
        self._where = (host_rows, where)
        if counts is not None:
            host_counts = counts.cpu()
            hits = int(host_counts[where.hit_at].sum())
            self.hits += hits
            self.misses += int(host_counts.sum()) - hits
        return self._read(self.cache_weight, self.weight, host_rows.numel(), where)

    def _update_rows(self, update: RowUpdate, rows: torch.Tensor, grads: torch.Tensor) -> None:
        host_rows = rows.cpu()
        if is_fake(rows):
            weight, state = self._read_any(host_rows)
            update.apply(weight, grads, state if self.state_width else None)
            slots = self.row_to_slot[host_rows].long().clamp(min=0).to(self._device)
            self.cache_weight.index_copy_(0, slots, weight)
            self._write_host(host_rows, weight, state)
            return
        # One forward's rows (one micro-batch) were located by that forward; the cache has not
        # changed since (admission comes after the step).
        last = self._where
        where = last[1] if last is not None and last[0] is host_rows else self._locate(host_rows)
        self._where = None
        n = host_rows.numel()
        weight = self._read(self.cache_weight, self.weight, n, where)
        state = self._read(self.cache_state, self.row_state, n, where)
        update.apply(weight, grads, state if self.state_width else None)
        self.cache_weight.index_copy_(0, where.slots_dev, weight.index_select(0, where.hit_at_dev))
        self.cache_state.index_copy_(0, where.slots_dev, state.index_select(0, where.hit_at_dev))
        self._write_host(
            where.miss_rows, weight.index_select(0, where.miss_at_dev), state.index_select(0, where.miss_at_dev)
        )

    def _after_step(self, pending: list[_Pending]) -> None:
        if not pending or is_fake(pending[0].rows):
            return  # admission decisions need values; the estimator's trace has none
        if len(pending) == 1:  # one forward's rows are distinct
            rows = pending[0].rows.cpu()
            counts = pending[0].counts
            distinct = rows
        else:
            rows = torch.cat([p.rows for p in pending]).cpu()
            counts = torch.cat([p.counts for p in pending if p.counts is not None])
            distinct = self._dedupe(rows)[0]
        assert counts is not None  # count_accesses: every forward counts
        self.counts.index_add_(0, rows, counts.cpu())
        if self._steps < self.warmup_steps:
            return
        # At the end of warm-up every row seen so far is a candidate (most frequent first); later,
        # this step's rows.
        warmup_over = self._steps == self.warmup_steps
        candidates = self.counts.nonzero().squeeze(1) if warmup_over else distinct
        self._admit(candidates[self.row_to_slot[candidates] < 0])

    def _loaded(self) -> None:
        super()._loaded()
        # The host table is the checkpoint's; refresh the cached copies of the rows cached now.
        slots = self._occupied()
        rows = self.slot_to_row[slots]
        on_device = slots.to(self._device)
        self.cache_weight[on_device] = self.weight[rows].to(self._device)
        self.cache_state[on_device] = self.row_state[rows].to(self._device)

    # -- cache bookkeeping (host tensors; `rows` are host int64 global rows)

    def _occupied(self) -> torch.Tensor:
        return (self.slot_to_row >= 0).nonzero().squeeze(1)

    def _dedupe(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(distinct rows in order of first occurrence, index of each id among them, occurrences
        of each) for host int64 `ids`: what torch.unique gives, in passes linear in the ids."""
        n = ids.numel()
        positions = torch.arange(n, dtype=torch.int32)
        first = self.first_seen.scatter_reduce_(0, ids, positions, reduce="amin")[ids]  # each id's first position
        firsts = (first == positions).nonzero().squeeze(1)
        rows = ids[firsts]
        self.first_seen[rows] = _UNSEEN  # the scratch is clean again for the next batch
        rank = torch.empty(n, dtype=torch.int64)
        rank[firsts] = torch.arange(firsts.numel())
        inverse = rank[first]
        return rows, inverse, torch.bincount(inverse, minlength=firsts.numel())

    def _locate(self, rows: torch.Tensor) -> _Where:
        """Where each of the distinct host `rows` lives now."""
        slots = self.row_to_slot[rows]
        hit = slots >= 0
        hit_at = hit.nonzero().squeeze(1)
        miss_at = (~hit).nonzero().squeeze(1)
        device = self._device
        return _Where(
            hit_at=hit_at,
            miss_at=miss_at,
            miss_rows=rows[miss_at],
            hit_at_dev=hit_at.to(device),
            miss_at_dev=miss_at.to(device),
            slots_dev=slots[hit_at].long().to(device),
        )

    def _read(self, cache: torch.Tensor, host: torch.Tensor, n: int, where: _Where) -> torch.Tensor:
        """Rows [n] of a (cache, host) pair of tables, each from where it lives, on the device."""
        out = torch.empty(n, cache.shape[1], device=self._device)
        out.index_copy_(0, where.hit_at_dev, cache.index_select(0, where.slots_dev))
        out.index_copy_(0, where.miss_at_dev, host.index_select(0, where.miss_rows).to(self._device))
        return out

    def _read_any(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Data-independent read for fake tensors: both sources for every row, then pick."""
        slots = self.row_to_slot[rows].long()
        cached = (slots >= 0).to(self._device).unsqueeze(1)
        at = slots.clamp(min=0).to(self._device)
        weight = torch.where(cached, self.cache_weight[at], self.weight[rows].to(self._device))
        state = torch.where(cached, self.cache_state[at], self.row_state[rows].to(self._device))
        return weight, state

    def _write_host(self, rows: torch.Tensor, weight: torch.Tensor, state: torch.Tensor) -> None:
        self.weight.index_copy_(0, rows, weight.cpu())
        self.row_state.index_copy_(0, rows, state.cpu())

    def _evict(self, slots: torch.Tensor) -> None:
        """Write the rows in `slots` back to the host and free the slots."""
        rows = self.slot_to_row[slots]
        on_device = slots.to(self._device)
        self._write_host(rows, self.cache_weight[on_device], self.cache_state[on_device])
        self.row_to_slot[rows] = -1
        self.slot_to_row[slots] = -1

    def _fill(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """Load `rows` (uncached) from the host into the free `slots`."""
        self.slot_to_row[slots] = rows
        self.row_to_slot[rows] = slots.to(torch.int32)
        on_device = slots.to(self._device)
        self.cache_weight[on_device] = self.weight[rows].to(self._device)
        self.cache_state[on_device] = self.row_state[rows].to(self._device)

    def _admit(self, candidates: torch.Tensor) -> None:
        """Admit uncached `candidates`, most frequent first: into free slots, then in place of
        cached rows with strictly fewer accesses (least frequently used first)."""
        if self.capacity == 0 or candidates.numel() == 0:
            return
        if not bool((self.slot_to_row < 0).any()):
            # A full cache (the steady state): only rows used more often than the least used
            # cached row can win a slot, so the others need no sorting.
            floor = self.counts[self.slot_to_row].min()
            candidates = candidates[self.counts[candidates] > floor]
            if candidates.numel() == 0:
                return
        freq = self.counts[candidates]
        order = torch.argsort(freq, descending=True, stable=True)
        candidates, freq = candidates[order], freq[order]
        free = (self.slot_to_row < 0).nonzero().squeeze(1)
        n_free = min(free.numel(), candidates.numel())
        slots, rows = [free[:n_free]], [candidates[:n_free]]
        rest, rest_freq = candidates[n_free:], freq[n_free:]
        if rest.numel():  # every free slot is taken: replace the least frequently used rows
            occupied = self._occupied()  # the slots just filled are not marked yet: not victims
            m = min(rest.numel(), occupied.numel())
            victim_freq, victim_at = torch.topk(self.counts[self.slot_to_row[occupied]], m, largest=False)
            # rest is sorted down and the victims up, so the winners are a prefix
            wins = rest_freq[:m] > victim_freq
            victims = occupied[victim_at[wins]]
            self._evict(victims)
            slots.append(victims)
            rows.append(rest[:m][wins])
        self._fill(torch.cat(slots), torch.cat(rows))

    # -- host tensors stay on the host when the module moves

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Any:
        order = list(self._buffers)
        host = {name: self._buffers.pop(name) for name in self.host_buffers}
        try:
            return super()._apply(fn, recurse)
        finally:
            for name in order:  # put them back, in their original order
                self._buffers[name] = host[name] if name in host else self._buffers.pop(name)


def _flush_before_save(module: nn.Module, prefix: str, keep_vars: bool) -> None:
    if isinstance(module, CachedEmbedding):
        module.flush()


def _state_bytes(table_sizes: Sequence[int], dim: int, cfg: EmbeddingConfig, sparse_optimizer: str) -> int:
    rows = sum(table_sizes)
    width = state_width(sparse_optimizer, dim)
    capacity = cache_capacity(rows, cfg)
    host = rows * dim * 4 + rows * width * 4
    device = capacity * (dim + width) * 4
    index = rows * 8 + rows * 4 + rows * 4 + capacity * 8  # counts, row -> slot, dedupe scratch, slot -> row
    return host + device + index


register(
    StrategySpec(
        name="cached",
        build=lambda sizes, dim, cfg, opt: CachedEmbedding(
            sizes, dim, capacity=cache_capacity(sum(sizes), cfg), sparse_optimizer=opt
        ),
        state_bytes=_state_bytes,
        self_updating=True,
    )
)
