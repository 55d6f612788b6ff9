"""Item-id histories shaped like MovieLens-1M, generated, and the stream SASRec trains on.

ML-1M (the dataset SASRec's paper evaluates on) has 6,040 users and 3,706 rated movies; each user
rated at least 20 movies (median 96, mean 165.6, at most 2,314: 1,000,209 ratings), each movie at
most once, and movie popularity is heavily skewed (the most rated, 3,428 ratings; the median movie,
about 120). `generate` draws histories of that shape from a fixed seed:

* lengths: 20 + a log-normal (median 75, sigma 1.14), capped at 2,314 (and at 3/4 of the catalogue);
* popularity: Zipf-Mandelbrot, p(rank r) proportional to 1 / (r + 40)^1.25, over a random order of
  the items, each of which has one of 18 genres (ML-1M's count; genre sizes Zipf-skewed too);
* order, the signal next-item prediction can learn: each next item is, with probability 0.35, one
  of the previous item's 4 follow-ups (fixed per item: a sequel, a film usually watched next), with
  0.30 a popular item of the previous item's genre (a genre run), and otherwise a popular item of a
  genre drawn from the user's own taste (a Dirichlet mix of genres); an item the user has already
  seen is redrawn, so a history never repeats an item (as in ML-1M).

With the defaults: 989,797 interactions, history lengths median 96, mean 163.9, max 2,314; the most
popular item is in 3,376 histories, the median item in 133 (tests/test_sasrec.py checks the shape).

The split is SASRec's leave-one-out: each user's last item is held out. Training reads only the
items before it; the held-out set asks, for each user, the last item from everything before it.

`Sequences` is the `DataSource`: `read(start, n)` a pure function of position (sample k is user
`perm_e[k % users]` of epoch e = k // users, with a window end drawn from the epoch's seed), so any
split of a range into reads returns the same samples. A batch is a dict:

* `user` int64 [B]: the user (the held-out set's query id);
* `history` int64 [B, L]: the items a prediction may look at, left-padded with 0 to `max_len` L (SASRec's
  layout: a causal model's last position is always the newest item);
* `targets` int64 [B, L]: the item that followed each position (0: none). Training: every position
  of a window of the user's training items; held out: only the last position, the held-out item;
* `negatives` int64 [B, L] (loss bce only): a random item other than the target, per position;
* `seen` (held-out batches only): a `Ragged` of every item the user had before the held-out one
  (up to 2,313 of them, which would pad badly into a rectangle: hence Ragged), what evaluation
  excludes from the ranking, as full-catalogue evaluations do.

Why padding and not `Ragged` for the history: self-attention works on a rectangle anyway, SASRec
trains on the last L items with a mask, and a fixed [B, L] shape is the shape the estimator traces,
so its prediction is exact for every batch.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from elastune import Ragged

__all__ = ["GENRES", "Histories", "Sequences", "generate"]

GENRES = 18  # ML-1M's genres
FOLLOW_UPS = 4  # per item: the items that usually come next
P_FOLLOW, P_GENRE_RUN = 0.35, 0.30  # the rest: the user's own taste
MIN_HISTORY, MAX_HISTORY = 20, 2314  # ML-1M's shortest and longest
LENGTH_MU, LENGTH_SIGMA = 4.33, 1.14  # 20 + lognormal: median 96, mean 163.9 (ML-1M: 96, 165.6)
ZIPF_SHIFT, ZIPF_POWER = 40.0, 1.25
SEEN_CELLS = 1 << 26  # users x items generated at once: bounds the seen-matrix to 64 MB
_TRAIN, _EVAL = 1, 2  # the seeds' streams


@dataclass(frozen=True)
class Histories:
    """Every user's items in order (item ids 1..items; 0 is padding), the held-out last one included."""

    items: int
    offsets: np.ndarray  # int64 [users + 1]: user u's items are flat[offsets[u] : offsets[u + 1]]
    flat: np.ndarray  # int32 [interactions]
    genre: np.ndarray  # int64 [items + 1]: each item's genre (row 0: padding)

    @property
    def users(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def of(self, user: int) -> np.ndarray:
        return self.flat[self.offsets[user] : self.offsets[user + 1]]


@functools.lru_cache(maxsize=4)
def generate(users: int, items: int, seed: int) -> Histories:
    """The histories of `users` users over `items` items, a pure function of the three (cached:
    the factory, the estimator and the run each ask for them)."""
    rng = np.random.default_rng([seed, 0x5A5])
    lengths = MIN_HISTORY + np.floor(rng.lognormal(LENGTH_MU, LENGTH_SIGMA, users)).astype(np.int64)
    lengths = np.minimum(lengths, min(MAX_HISTORY, items - items // 4))  # a quarter of the catalogue left unseen
    weights = 1.0 / np.arange(1, GENRES + 1) ** 0.8
    genre = np.concatenate([np.arange(GENRES), rng.choice(GENRES, items - GENRES, p=weights / weights.sum())])
    popularity = 1.0 / (np.arange(1, items + 1) + ZIPF_SHIFT) ** ZIPF_POWER
    popularity = rng.permutation(popularity / popularity.sum())
    draw = _GenreDraw(genre, popularity)
    world = _World(
        genre=genre,
        follow_ups=np.stack([draw(genre, rng) for _ in range(FOLLOW_UPS)], axis=1),
        taste=rng.dirichlet(np.full(GENRES, 0.5), users).cumsum(axis=1),
        draw=draw,
    )
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.zeros(int(offsets[-1]), dtype=np.int32)
    chunk = max(1, SEEN_CELLS // items)  # users walked at once, so their seen-matrix stays bounded
    for first in range(0, users, chunk):
        part = np.arange(first, min(first + chunk, users))
        _walk(world, part, lengths[part], offsets[part], flat, np.random.default_rng([seed, 1, first]))
    flat += 1  # ids 1..items: 0 is the padding row
    for array in (offsets, flat):
        array.setflags(write=False)
    return Histories(items, offsets, flat, np.concatenate([[-1], genre]))


class _GenreDraw:
    """Draws a popularity-weighted item of each given genre, vectorised: one sorted key per item
    (its genre + its cumulative share within the genre), searched at genre + uniform."""

    def __init__(self, genre: np.ndarray, popularity: np.ndarray) -> None:
        self.order = np.lexsort((np.arange(len(genre)), genre))
        by_genre = genre[self.order]
        starts = np.searchsorted(by_genre, np.arange(GENRES + 1))
        within = np.empty(len(genre))
        for g in range(GENRES):
            share = popularity[self.order[starts[g] : starts[g + 1]]]
            within[starts[g] : starts[g + 1]] = np.cumsum(share) / share.sum()
        self.keys = by_genre + within

    def __call__(self, genres: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        at = np.searchsorted(self.keys, genres + rng.random(len(genres)) * (1 - 1e-9))
        return self.order[np.minimum(at, len(self.order) - 1)]


@dataclass(frozen=True)
class _World:
    """What every user's walk draws from: the items' genres and follow-ups, the users' tastes."""

    genre: np.ndarray  # int64 [items]
    follow_ups: np.ndarray  # int64 [items, FOLLOW_UPS]
    taste: np.ndarray  # float64 [users, GENRES]: cumulative genre shares
    draw: _GenreDraw


def _walk(
    world: _World,
    users: np.ndarray,
    lengths: np.ndarray,
    starts: np.ndarray,
    flat: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """Write the histories of `users` (0-based item ids) at `flat[starts[i]:]`, one step of all of them at a time."""
    items = len(world.genre)
    seen = np.zeros((len(users), items), dtype=bool)
    rows_all = np.arange(len(users))

    def tasted(rows: np.ndarray) -> np.ndarray:  # a genre from each row's user's taste
        return np.minimum((world.taste[users[rows]] < rng.random(len(rows))[:, None]).sum(axis=1), GENRES - 1)

    previous = np.zeros(len(users), dtype=np.int64)
    for t in range(int(lengths.max())):
        rows = rows_all[lengths > t]
        if t == 0:
            step = world.draw(tasted(rows), rng)
        else:
            before = previous[rows]
            r = rng.random(len(rows))
            step = np.where(r < P_FOLLOW, world.follow_ups[before, rng.integers(0, FOLLOW_UPS, len(rows))], -1)
            run = (r >= P_FOLLOW) & (r < P_FOLLOW + P_GENRE_RUN)
            step[run] = world.draw(world.genre[before[run]], rng)
            own = step < 0
            step[own] = world.draw(tasted(rows[own]), rng)
        for _ in range(3):  # an item already seen: redrawn from the user's taste
            again = seen[rows, step]
            if not again.any():
                break
            step[again] = world.draw(tasted(rows[again]), rng)
        again = np.nonzero(seen[rows, step])[0]
        if len(again):  # still seen (a heavy user's genres run dry): any unseen item
            step[again] = np.argmax(rng.random((len(again), items)) * ~seen[rows[again]], axis=1)
        seen[rows, step] = True
        previous[rows] = step
        flat[starts[rows] + t] = step


class Sequences:
    """SASRec's stream over `histories` (implements elastune's DataSource; see the module docstring)."""

    pooling = 1

    def __init__(self, histories: Histories, max_len: int, *, seed: int = 0, negatives: bool = False) -> None:
        self.histories, self.max_len, self.seed, self.negatives = histories, max_len, seed, negatives
        self.table_sizes = (histories.items + 1,)
        self._epochs: OrderedDict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = OrderedDict()

    def read(self, start: int, n: int) -> dict[str, torch.Tensor]:
        if start < 0 or n < 0:
            raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")
        users_n = self.histories.users
        k = np.arange(start, start + n, dtype=np.int64)
        user = np.empty(n, dtype=np.int64)
        end = np.empty(n, dtype=np.int64)
        negatives = np.empty((n, self.max_len), dtype=np.int64) if self.negatives else None
        for epoch in np.unique(k // users_n):
            at = np.nonzero(k // users_n == epoch)[0]
            order, draws, noise = self._epoch(int(epoch))
            index = k[at] % users_n
            user[at] = order[index]
            # The window's end (exclusive) among the user's training items (all but the last one):
            # windows of max_len + 1 items anywhere in them, the whole of them when shorter.
            train = self.histories.lengths[user[at]] - 1
            low = np.minimum(train, self.max_len + 1)
            end[at] = low + np.floor(draws[index] * (train - low + 1)).astype(np.int64)
            if negatives is not None and noise is not None:
                negatives[at] = noise[index]
        history, targets = self._windows(user, end)
        batch = {"user": torch.from_numpy(user), "history": history, "targets": targets}
        if negatives is not None:
            # a random item other than the target: (target + r) mod items + 1 with r < items - 1
            chosen = (targets.numpy() + negatives) % self.histories.items + 1
            batch["negatives"] = torch.from_numpy(np.where(targets.numpy() > 0, chosen, 0))
        return batch

    def eval_users(self, n: int) -> np.ndarray:
        """The users the held-out set asks about, in order: the first n of a fixed order (every user
        when n >= users)."""
        return np.random.default_rng([self.seed, _EVAL]).permutation(self.histories.users)[:n]

    def eval_batches(self, n: int, batch_size: int) -> Iterator[dict[str, Any]]:
        """Per user, its held-out last item from the max_len items before it (only the last position
        has a target), with every earlier item in `seen`; at most one sample per user."""
        users = self.eval_users(n)
        h = self.histories
        for first in range(0, len(users), batch_size):
            user = users[first : first + batch_size]
            history, targets = self._windows(user, h.lengths[user])
            targets[:, :-1] = 0  # only the held-out item is asked for
            seen = Ragged.from_list([torch.from_numpy(h.of(u)[:-1].astype(np.int64)) for u in user])
            yield {"user": torch.from_numpy(user), "history": history, "targets": targets, "seen": seen}

    def _windows(self, user: np.ndarray, end: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(history, targets) [B, L]: items [end - L - 1, end - 1) of each user's history and the
        item after each, left-padded with 0 where the history starts later."""
        length = self.max_len
        position = end[:, None] - length - 1 + np.arange(length)[None, :]
        real = position >= 0
        base = self.histories.offsets[user][:, None]
        flat = self.histories.flat
        history = np.where(real, flat[np.where(real, base + position, 0)], 0).astype(np.int64)
        targets = np.where(real, flat[np.where(real, base + position + 1, 0)], 0).astype(np.int64)
        return torch.from_numpy(history), torch.from_numpy(targets)

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Epoch e's order of the users, window draws and negatives' noise: from (seed, e) alone."""
        if epoch not in self._epochs:
            rng = np.random.default_rng([self.seed, _TRAIN, epoch])
            users = self.histories.users
            noise = None
            if self.negatives:
                noise = rng.integers(0, self.histories.items - 1, (users, self.max_len))
            self._epochs[epoch] = (rng.permutation(users), rng.random(users), noise)
            if len(self._epochs) > 2:
                self._epochs.popitem(last=False)
        return self._epochs[epoch]
