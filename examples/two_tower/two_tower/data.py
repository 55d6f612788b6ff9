"""MovieLens-style interactions, generated: who watched what, with the users' and movies' columns.

The columns are MovieLens's (ml-1m's users.dat and movies.dat): a user has an id, an age bracket,
a gender, an occupation and a zip code; a movie an id, up to two genres and a release year. Which
movie a user watches follows a hidden taste model that the columns partly explain (age, gender and
occupation shift a user's taste; genres and year place a movie), so a two-tower model has something
to learn and its recall is measurable.

The stream is a pure function of position, as elastune's `DataSource` protocol asks: sample `k`
comes from chunk `k // CHUNK`, generated from a seed of (seed, split, chunk) alone, so any way of
splitting a range into reads returns the same samples (micro-batch x accumulation, OOM retries and
checkpoint resume stay exact).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from elastune.data import ClickBatch

__all__ = ["FEATURES", "ITEM_FEATURES", "USER_FEATURES", "Catalogue", "Interactions"]

AGES, GENDERS, OCCUPATIONS, ZIPS, GENRES, YEARS = 7, 2, 21, 1000, 19, 12  # genre 0: "no second genre"
USER_FEATURES = ("user_id", "age", "gender", "occupation", "zip")
ITEM_FEATURES = ("movie_id", "genre_1", "genre_2", "year")
FEATURES = USER_FEATURES + ITEM_FEATURES  # the order of ClickBatch.sparse's feature axis
DENSE = 2  # the user's activity and the movie's popularity, log-scaled
CHUNK = 4096
TASTE = 8  # width of the hidden taste vectors
CANDIDATES = 32  # a watch is the best-liked of this many popular movies (a tournament, not a softmax)
_TRAIN, _EVAL = 0, 1


@dataclass(frozen=True)
class Catalogue:
    """Every user's and movie's columns and hidden tastes: fixed by the seed."""

    users: np.ndarray  # int64 [U, 4]: age, gender, occupation, zip
    movies: np.ndarray  # int64 [M, 3]: genre_1, genre_2, year
    user_taste: np.ndarray  # float32 [U, TASTE]
    movie_taste: np.ndarray  # float32 [M, TASTE]
    user_weight: np.ndarray  # float64 [U]: how often each user watches (Zipf)
    movie_weight: np.ndarray  # float64 [M]: how often each movie is a candidate (Zipf)

    @classmethod
    def generate(cls, users: int, movies: int, seed: int) -> Catalogue:
        rng = np.random.default_rng([seed, 7])
        u_cols = np.stack([rng.integers(0, n, users) for n in (AGES, GENDERS, OCCUPATIONS, ZIPS)], axis=1).astype(
            np.int64
        )
        genre_1 = rng.integers(1, GENRES, movies)
        genre_2 = np.where(rng.random(movies) < 0.5, 0, rng.integers(1, GENRES, movies))
        m_cols = np.stack([genre_1, genre_2, rng.integers(0, YEARS, movies)], axis=1).astype(np.int64)
        # Tastes: mostly explained by the columns, the rest personal.
        age, gender, occ = (rng.standard_normal((n, TASTE)) for n in (AGES, GENDERS, OCCUPATIONS))
        genre, year = rng.standard_normal((GENRES, TASTE)), rng.standard_normal((YEARS, TASTE))
        genre[0] = 0.0
        u_taste = age[u_cols[:, 0]] + gender[u_cols[:, 1]] + occ[u_cols[:, 2]]
        u_taste += 0.7 * rng.standard_normal((users, TASTE))
        m_taste = genre[m_cols[:, 0]] + genre[m_cols[:, 1]] + 0.5 * year[m_cols[:, 2]]
        m_taste += 0.7 * rng.standard_normal((movies, TASTE))
        zipf = lambda n: 1.0 / np.arange(1, n + 1) ** 1.05  # noqa: E731
        return cls(
            u_cols,
            m_cols,
            u_taste.astype(np.float32),
            m_taste.astype(np.float32),
            rng.permutation(zipf(users) / zipf(users).sum()),
            rng.permutation(zipf(movies) / zipf(movies).sum()),
        )

    def dense(self, user: np.ndarray, movie: np.ndarray) -> np.ndarray:
        """float32 [n, DENSE]: log of each user's and movie's relative frequency, centred."""
        u = np.log(self.user_weight[user] * len(self.user_weight))
        m = np.log(self.movie_weight[movie] * len(self.movie_weight))
        return (np.stack([u, m], axis=1) / 4.0).astype(np.float32)

    def sparse(self, user: np.ndarray, movie: np.ndarray) -> np.ndarray:
        """int64 [n, len(FEATURES), 1]: every feature's id, in FEATURES order."""
        return np.concatenate([user[:, None], self.users[user], movie[:, None], self.movies[movie]], axis=1)[:, :, None]


class Interactions:
    """The watch stream (implements elastune's DataSource protocol).

    `negatives`: the share of samples whose movie is a random popular one and label 0 (for a BCE
    loss); 0 gives watches only, label 1 (for in-batch negatives).
    """

    pooling = 1

    def __init__(self, users: int, movies: int, *, seed: int = 0, negatives: float = 0.0) -> None:
        self.catalogue = Catalogue.generate(users, movies, seed)
        self.table_sizes = (users, AGES, GENDERS, OCCUPATIONS, ZIPS, movies, GENRES, GENRES, YEARS)
        self.seed, self.negatives = seed, negatives
        self._recent: dict[int, OrderedDict[int, ClickBatch]] = {_TRAIN: OrderedDict(), _EVAL: OrderedDict()}

    def read(self, start: int, n: int) -> ClickBatch:
        return self._read(_TRAIN, start, n)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[ClickBatch]:
        for start in range(0, n, batch_size):
            yield self._read(_EVAL, start, min(batch_size, n - start))

    def _read(self, split: int, start: int, n: int) -> ClickBatch:
        if start < 0 or n < 0:
            raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")
        parts = []
        for index in range(start // CHUNK, (start + n - 1) // CHUNK + 1) if n else ():
            chunk = self._chunk(split, index)
            lo, hi = max(start - index * CHUNK, 0), min(start + n - index * CHUNK, CHUNK)
            parts.append(chunk.slice(lo, hi))
        if not parts:
            return ClickBatch(
                torch.zeros(0, DENSE), torch.zeros(0, len(FEATURES), 1, dtype=torch.int64), torch.zeros(0)
            )
        return ClickBatch(*(torch.cat([getattr(p, f) for p in parts]) for f in ("dense", "sparse", "labels")))

    def _chunk(self, split: int, index: int) -> ClickBatch:
        recent = self._recent[split]
        if index not in recent:
            recent[index] = self._generate(split, index)
            if len(recent) > 2:
                recent.popitem(last=False)
        return recent[index]

    def _generate(self, split: int, index: int) -> ClickBatch:
        c = self.catalogue
        rng = np.random.default_rng([self.seed, split, index])
        user = rng.choice(len(c.user_weight), CHUNK, p=c.user_weight)
        candidates = rng.choice(len(c.movie_weight), (CHUNK, CANDIDATES), p=c.movie_weight)
        liking = np.einsum("nt,nkt->nk", c.user_taste[user], c.movie_taste[candidates])
        liking += rng.gumbel(size=liking.shape) * 2.0  # taste decides often, not always
        movie = candidates[np.arange(CHUNK), liking.argmax(axis=1)]
        labels = np.ones(CHUNK, dtype=np.float32)
        if self.negatives > 0:
            negative = rng.random(CHUNK) < self.negatives
            movie = np.where(negative, candidates[:, 0], movie)
            labels[negative] = 0.0
        return ClickBatch(
            torch.from_numpy(c.dense(user, movie)),
            torch.from_numpy(c.sparse(user, movie)),
            torch.from_numpy(labels),
        )
