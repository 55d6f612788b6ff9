"""Star ratings shaped like MovieLens, generated: who rated which movie, how many stars, with the
users' and movies' columns.

The columns and their cardinalities are ml-1m's (users.dat, movies.dat): a user has an id, an age
bracket (7), a gender (2), an occupation (21) and a zip code (3,439 distinct); a movie an id, up to
two of 18 genres and a release year (1919-2000). How many users and movies there are is the
workload's to say (by default MovieLens-25M's 162,541 users and 62,423 movies; ml-1m has
6,040 and 3,706, but ml-25m has no user columns to copy). A rating is 1-5 stars, drawn from a hidden
model in the shape of the matrix-factorization literature's:

    stars = round(3.58 + user bias + movie bias + taste(user) . taste(movie) + noise), clipped to 1..5

where a user's taste is mostly explained by their age, gender and occupation and a movie's by its
genres and year (the rest is personal), and a movie's bias partly by its genres. Who rates which
movie follows Zipf popularity on both sides, as in the real data. The taste term is an
*interaction* of a user's columns with a movie's: a linear model over one-hot ids (the baseline)
can learn every bias but not it; an embedding model can.

The stream is a pure function of position, as elastune's `DataSource` asks: sample `k` comes from
chunk `k // CHUNK`, generated from a seed of (seed, split, chunk) alone, so any way of splitting a
range into reads returns the same samples.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import ndtr

__all__ = ["FEATURES", "MEAN_STARS", "MOVIE_FEATURES", "USER_FEATURES", "Catalogue", "Ratings"]

AGES, GENDERS, OCCUPATIONS, ZIPS, GENRES, YEARS = 7, 2, 21, 3439, 19, 82  # genre 0: "no second genre"
USER_FEATURES = ("user_id", "age", "gender", "occupation", "zip")
MOVIE_FEATURES = ("movie_id", "genre_1", "genre_2", "year")
FEATURES = USER_FEATURES + MOVIE_FEATURES  # the order of a batch's "ids" feature axis
MEAN_STARS = 3.58  # ml-1m's mean rating, the hidden model's centre (clipping at 5 brings the stars' to 3.4)
CHUNK = 4096
TASTE = 8  # width of the hidden taste vectors
NOISE = 0.6  # standard deviation of a rating around its hidden value, before rounding
_TRAIN, _EVAL = 0, 1
Batch = dict[str, torch.Tensor]  # {"ids": int64 [B, 9, 1], "rating": float32 [B]}


@dataclass(frozen=True)
class Catalogue:
    """Every user's and movie's columns, hidden tastes and biases, and popularity: fixed by the seed."""

    users: np.ndarray  # int64 [U, 4]: age, gender, occupation, zip
    movies: np.ndarray  # int64 [M, 3]: genre_1, genre_2, year
    user_taste: np.ndarray  # float64 [U, TASTE]
    movie_taste: np.ndarray  # float64 [M, TASTE]
    user_bias: np.ndarray  # float64 [U]
    movie_bias: np.ndarray  # float64 [M]
    user_weight: np.ndarray  # float64 [U]: how often each user rates (Zipf)
    movie_weight: np.ndarray  # float64 [M]: how often each movie is rated (Zipf)

    @classmethod
    def generate(cls, users: int, movies: int, seed: int) -> Catalogue:
        rng = np.random.default_rng([seed, 11])
        u_cols = np.stack([rng.integers(0, n, users) for n in (AGES, GENDERS, OCCUPATIONS, ZIPS)], axis=1)
        genre_1 = rng.integers(1, GENRES, movies)
        genre_2 = np.where(rng.random(movies) < 0.5, 0, rng.integers(1, GENRES, movies))
        m_cols = np.stack([genre_1, genre_2, rng.integers(0, YEARS, movies)], axis=1)
        # Tastes: mostly explained by the columns, the rest personal.
        age, gender, occupation = (rng.standard_normal((n, TASTE)) for n in (AGES, GENDERS, OCCUPATIONS))
        genre, year = rng.standard_normal((GENRES, TASTE)), rng.standard_normal((YEARS, TASTE))
        genre[0] = 0.0
        u_taste = age[u_cols[:, 0]] + gender[u_cols[:, 1]] + occupation[u_cols[:, 2]]
        u_taste += 0.7 * rng.standard_normal((users, TASTE))
        m_taste = genre[m_cols[:, 0]] + genre[m_cols[:, 1]] + 0.5 * year[m_cols[:, 2]]
        m_taste += 0.7 * rng.standard_normal((movies, TASTE))
        genre_bias = 0.3 * rng.standard_normal(GENRES)
        genre_bias[0] = 0.0
        m_bias = 0.4 * rng.standard_normal(movies) + genre_bias[m_cols[:, 0]] + genre_bias[m_cols[:, 1]]

        def zipf(n: int) -> np.ndarray:
            w = 1.0 / np.arange(1, n + 1) ** 0.9
            return rng.permutation(w / w.sum())

        return cls(
            u_cols.astype(np.int64),
            m_cols.astype(np.int64),
            u_taste,
            m_taste,
            0.35 * rng.standard_normal(users),
            m_bias,
            zipf(users),
            zipf(movies),
        )

    def ids(self, user: np.ndarray, movie: np.ndarray) -> np.ndarray:
        """int64 [n, len(FEATURES)]: every feature's id, in FEATURES order."""
        return np.concatenate([user[:, None], self.users[user], movie[:, None], self.movies[movie]], axis=1)

    def real(self, user: np.ndarray, movie: np.ndarray) -> np.ndarray:
        """float64 [n]: the hidden model's rating before noise and rounding."""
        taste = np.einsum("nt,nt->n", self.user_taste[user], self.movie_taste[movie]) * (0.25 / np.sqrt(TASTE))
        return MEAN_STARS + self.user_bias[user] + self.movie_bias[movie] + taste

    def stars(self, user: np.ndarray, movie: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """float32 [n]: whole stars, 1..5."""
        return np.clip(np.rint(self.real(user, movie) + NOISE * noise), 1, 5).astype(np.float32)

    def expected_stars(self, user: np.ndarray, movie: np.ndarray) -> np.ndarray:
        """float64 [n]: the mean of `stars` over the noise, the prediction with the least squared
        error that any model can make (the hidden model's own)."""
        real = self.real(user, movie)
        # P(stars <= k) = P(real + noise < k + 0.5); clipping puts every tail below 1.5 on 1 star
        below = [ndtr((k + 0.5 - real) / NOISE) for k in range(1, 5)]
        return 5.0 - sum(below)  # E[stars] = 1 + sum over k=1..4 of P(stars > k)


class Ratings:
    """The rating stream (elastune's DataSource protocol): training ratings by position, and a
    held-out stream of its own draws for evaluation."""

    pooling = 1

    def __init__(self, users: int, movies: int, *, seed: int = 0) -> None:
        self.catalogue = Catalogue.generate(users, movies, seed)
        self.table_sizes = (users, AGES, GENDERS, OCCUPATIONS, ZIPS, movies, GENRES, GENRES, YEARS)
        self.seed = seed
        self._recent: dict[int, OrderedDict[int, Batch]] = {_TRAIN: OrderedDict(), _EVAL: OrderedDict()}

    def read(self, start: int, n: int) -> Batch:
        return self._read(_TRAIN, start, n)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        for start in range(0, n, batch_size):
            yield self._read(_EVAL, start, min(batch_size, n - start))

    def _read(self, split: int, start: int, n: int) -> Batch:
        if start < 0 or n < 0:
            raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")
        parts = []
        for index in range(start // CHUNK, (start + n - 1) // CHUNK + 1) if n else ():
            chunk = self._chunk(split, index)
            lo, hi = max(start - index * CHUNK, 0), min(start + n - index * CHUNK, CHUNK)
            parts.append({key: value[lo:hi] for key, value in chunk.items()})
        if not parts:
            return {"ids": torch.zeros(0, len(FEATURES), 1, dtype=torch.int64), "rating": torch.zeros(0)}
        return {key: torch.cat([p[key] for p in parts]) for key in ("ids", "rating")}

    def _chunk(self, split: int, index: int) -> Batch:
        recent = self._recent[split]
        if index not in recent:
            recent[index] = self._generate(split, index)
            if len(recent) > 2:
                recent.popitem(last=False)
        return recent[index]

    def _generate(self, split: int, index: int) -> Batch:
        c = self.catalogue
        rng = np.random.default_rng([self.seed, split, index])
        user = rng.choice(len(c.user_weight), CHUNK, p=c.user_weight)
        movie = rng.choice(len(c.movie_weight), CHUNK, p=c.movie_weight)
        stars = c.stars(user, movie, rng.standard_normal(CHUNK))
        return {"ids": torch.from_numpy(c.ids(user, movie)[:, :, None]), "rating": torch.from_numpy(stars)}
