"""A synthetic Criteo-shaped stream with a planted, learnable signal (see data.py for the contract)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from elastune.data.clicks import NUM_DENSE, ClickBatch, empty_batch
from elastune.data.source import F32, F64, I64, U32, check_range

__all__ = ["SyntheticCriteo"]


# Seed streams: every random draw is keyed by (seed, stream, ...) so they never overlap.
_TRAIN, _EVAL, _CALIBRATION, _TEACHER, _LAYOUT = range(5)

# Standard deviations of the teacher's logit parts, tuned so that the teacher's own AUC is ~0.83
# (0.82-0.84 over seeds, table sizes and skews at pooling 1) and the default DLRM reaches ~0.80
# after 300k samples; the unit tests check that even a plain wide model beats 0.70 after 120k.
_DENSE_STD = 0.9  # linear in the standardised dense features: learnable at once
_SPARSE_STD = 1.3  # id effects, split unevenly over the features
_PAIR_STD = 0.35  # each of the two sparse x sparse interactions
_DENSE_PAIR_STD = 0.3  # one dense x dense interaction
_TARGET_POSITIVE_RATE = 0.25  # Criteo Kaggle is ~25.6% clicks
_CALIBRATION_SAMPLES = 32768


def _fmix32(x: U32) -> U32:
    """MurmurHash3's finaliser: a cheap bijection of uint32 whose output bits all depend on all
    input bits, so consecutive ids get unrelated effects. Works in place on `x`."""
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x85EBCA6B)
    x ^= x >> np.uint32(13)
    x *= np.uint32(0xC2B2AE35)
    x ^= x >> np.uint32(16)
    return x


def _id_hashes(ids: I64, salts: U32) -> F32:
    """A fixed pseudo-random value per (feature, id), uniform on [0, 2^32) (as float32).

    ids: [F, m] feature-major, salts: [F] (one per feature, so equal ids in two tables differ).
    Being a hash rather than a lookup table, it costs no memory even for 10M-row tables.
    """
    h = ids.astype(np.uint32) * np.uint32(0x9E3779B1) + salts[:, None]
    return _fmix32(h).astype(np.float32)


class _ZipfIds:
    """Zipf-skewed row ids for every table at once, in O(1) memory per table.

    A rank r in [0, N) is drawn from the bounded power law with density ~ x^-alpha on [1, N + 1)
    by inverting its CDF (floor(x) - 1 is the rank), so rank 0 is the hottest row. Ranks are then
    scattered by the bijection id = (a * r + b) mod N with gcd(a, N) = 1: real hot rows are not all
    at low indices, and a cache or sharding scheme must not be able to exploit that they are.
    """

    def __init__(self, sizes: Sequence[int], alpha: float, seed: int) -> None:
        self.alpha = alpha
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self._log_n1 = np.log(self.sizes.astype(np.float64) + 1.0)[:, None]  # [F, 1]
        self._t = 1.0 - alpha
        self._scale = np.expm1(self._t * self._log_n1)  # CDF normaliser, [F, 1]
        self._max_rank = self.sizes[:, None] - 1
        rng = np.random.default_rng([seed, _LAYOUT])
        self._mult = [_coprime_multiplier(int(n), rng) for n in self.sizes]
        self._offset = [int(rng.integers(0, n)) for n in self.sizes]

    def ranks(self, u: F64) -> I64:
        """u: uniforms in [0, 1), [F, m] (overwritten, to save allocations) -> ranks [F, m]."""
        if self._t == 0.0:  # alpha == 1: the CDF is log(x) / log(N + 1)
            x = np.exp(np.multiply(u, self._log_n1, out=u), out=u)
        else:  # x = (1 + u * scale) ** (1 / t), via log1p so alpha close to 1 stays accurate
            x = np.log1p(np.multiply(u, self._scale, out=u), out=u)
            x = np.exp(np.multiply(x, 1.0 / self._t, out=x), out=x)
        r = x.astype(np.int64)  # x >= 1, so truncation is the floor
        r -= 1
        return np.minimum(r, self._max_rank, out=r)  # x may round up to N + 1

    def scatter(self, ranks: I64) -> I64:
        """Ranks [F, m] -> row ids [F, m], in place; a*r + b < 2^63 since a, r, b < N < 2^31."""
        for f, (n, a, b) in enumerate(zip(self.sizes, self._mult, self._offset, strict=True)):
            v = ranks[f]
            v *= a
            v += b
            v -= (v // n) * n  # v mod n: floor division by a scalar is vectorised, % is not
        return ranks


def _coprime_multiplier(n: int, rng: np.random.Generator) -> int:
    """A multiplier in [1, n) coprime with n, so r -> (a * r + b) mod n is a bijection."""
    if n <= 2:
        return 1
    a = int(rng.integers(1, n))
    while math.gcd(a, n) != 1:
        a = a % (n - 1) + 1
    return a


@dataclass(frozen=True)
class _Features:
    """Raw synthetic features before the label: dense [c, 13] and ids [F, c, P] feature-major
    (each feature's ids contiguous, which the per-feature hashing and scattering want)."""

    dense: F32
    ids: I64


class _Teacher:
    """The hidden model that labels synthetic samples, and the dense feature distributions.

    logit = bias + w . z(dense) + sum_f s_f * mean_p v_f(id) + two sparse x sparse products
            + one dense x dense product
    where z standardises the dense features and v_f is a hash-derived value per (feature, id),
    uniform with mean 0 and variance 1. Most of the signal is learnable fast: the dense part, and
    the effects of hot ids, which the Zipf draw repeats constantly. Cold ids carry effects too,
    but a learner rarely sees them: they act as noise, which is why the teacher's AUC is a ceiling
    a learner approaches from below.
    """

    def __init__(self, num_sparse: int, seed: int) -> None:
        rng = np.random.default_rng([seed, _TEACHER])
        # Dense counts: heavy-tailed (Lomax, tail index k) with per-column scales and zero shares.
        self.count_scale = np.exp(rng.uniform(0.0, 4.5, NUM_DENSE)).astype(np.float32)
        self.neg_inv_tail = (-1.0 / rng.uniform(0.8, 3.0, NUM_DENSE)).astype(np.float32)
        self.keep_inv = (1.0 / (1.0 - rng.uniform(0.0, 0.5, NUM_DENSE))).astype(np.float32)
        w = rng.standard_normal(NUM_DENSE)
        self.w = (w * _DENSE_STD / np.linalg.norm(w)).astype(np.float32)
        self.dense_pair = tuple(int(i) for i in rng.choice(NUM_DENSE, 2, replace=False))
        # Id effects: some features matter much more than others, as in real logs.
        strength = rng.lognormal(0.0, 0.75, num_sparse)
        self.scales = (strength * _SPARSE_STD / np.linalg.norm(strength)).astype(np.float32)
        self.salts = rng.integers(0, 2**32, (2, num_sparse), dtype=np.uint64).astype(np.uint32)
        k = min(4, num_sparse - num_sparse % 2)  # two disjoint pairs (fewer for tiny tests)
        self.pairs = rng.choice(num_sparse, k, replace=False).reshape(-1, 2)
        self.pair_signs = rng.choice([-1.0, 1.0], len(self.pairs))
        # Set by calibrate(): dense standardisation and the bias giving the target positive rate.
        self.dense_mean = np.zeros(NUM_DENSE, dtype=np.float32)
        self.dense_std = np.ones(NUM_DENSE, dtype=np.float32)
        self.bias = 0.0

    def dense(self, u: F32) -> F32:
        """Uniforms [c, 13] -> log1p(counts): a share p_zero of zeros, the rest Lomax-distributed.

        One uniform per cell, by inverse CDF: v = u / (1 - p_zero) is uniform on [0, 1) for the
        non-zero share and >= 1 for the rest, where the clamped exponent makes the count 0.
        """
        v = np.maximum(u * self.keep_inv, np.float32(2.0**-24))
        exponent = np.maximum(np.log(v) * self.neg_inv_tail, np.float32(0.0))
        return np.log1p(np.floor(self.count_scale * np.expm1(exponent)))

    def calibrate(self, features: _Features) -> None:
        """Fit standardisation and bias on a calibration sample, so every seed, skew and table
        size gives ~25% positives instead of whatever the hot ids' random effects add up to."""
        self.dense_mean = features.dense.mean(axis=0)
        self.dense_std = features.dense.std(axis=0) + np.float32(1e-6)
        logits = self.logits(features).astype(np.float64)
        lo, hi = -20.0, 20.0
        for _ in range(60):  # bisection: the positive rate is monotone in the bias
            mid = (lo + hi) / 2
            rate = np.mean(1.0 / (1.0 + np.exp(-(logits + mid))))
            lo, hi = (mid, hi) if rate < _TARGET_POSITIVE_RATE else (lo, mid)
        self.bias = (lo + hi) / 2

    def logits(self, features: _Features) -> F32:
        z = (features.dense - self.dense_mean) / self.dense_std
        i, j = self.dense_pair
        logit = z @ self.w + np.float32(_DENSE_PAIR_STD) * z[:, i] * z[:, j]
        logit += self.scales @ _unit_values(features.ids, self.salts[0])
        if len(self.pairs):
            used = self.pairs.ravel()
            second = _unit_values(features.ids[used], self.salts[1][used])
            products = second[0::2] * second[1::2]  # [pairs, c]
            logit += (self.pair_signs * _PAIR_STD).astype(np.float32) @ products
        return (logit + np.float32(self.bias)).astype(np.float32, copy=False)


def _unit_values(ids: I64, salts: U32) -> F32:
    """ids [F, c, P] -> per (feature, sample) the mean over the bag of the ids' hashed values,
    each uniform with mean 0 and variance 1: [F, c]."""
    num_sparse, c, p = ids.shape
    h = _id_hashes(ids.reshape(num_sparse, c * p), salts).reshape(num_sparse, c, p)
    u = h[:, :, 0] if p == 1 else h.mean(axis=2, dtype=np.float32)
    return (u * np.float32(2.0**-32) - np.float32(0.5)) * np.float32(math.sqrt(12.0))


@dataclass(frozen=True)
class _Chunk:
    """One generated chunk, as numpy (row slices of it become the tensors of a ClickBatch)."""

    dense: F32  # [c, 13], log1p'd
    sparse: I64  # [c, F, P]
    labels: F32  # [c]
    probs: F32  # [c], the teacher's probabilities (for teacher_auc)


class SyntheticCriteo:
    """An endless Criteo-shaped stream with a planted, learnable signal; implements DataSource.

    Samples are generated in chunks of `chunk`; chunk i of a split is drawn from a generator seeded
    by (seed, split, i) alone, so any sample can be produced without the ones before it and
    `read` is exact under any split of a range. Train and eval are different splits, hence
    disjoint streams. The stream is a function of (table_sizes, zipf_alpha, pooling, seed, chunk).
    Only the last two chunks per split are cached (reads are nearly always sequential).
    """

    # A training loop may read it on another thread (data/source.py's ReadAhead), one read at a
    # time: a chunk is a pure function of its seeds, and each split has its own cache.
    reads_on_any_thread = True
    # A stand-in for a real pipeline: on a CPU device the loop leaves its reads out of samples/s
    # (training/throughput.py says why).
    synthetic = True

    def __init__(
        self,
        table_sizes: Sequence[int],
        *,
        zipf_alpha: float = 1.15,
        pooling: int = 1,
        seed: int = 0,
        chunk: int = 4096,
    ) -> None:
        if not table_sizes or min(table_sizes) < 1 or max(table_sizes) >= 2**31:
            raise ValueError(f"table sizes must be in [1, 2^31), got {list(table_sizes)}")
        if not zipf_alpha > 0 or pooling < 1 or chunk < 1 or seed < 0:
            raise ValueError(
                f"need zipf_alpha > 0, pooling >= 1, chunk >= 1, seed >= 0; got "
                f"{zipf_alpha}, {pooling}, {chunk}, {seed}"
            )
        self.table_sizes = tuple(int(s) for s in table_sizes)
        self.pooling = pooling
        self.zipf_alpha = zipf_alpha
        self.seed = seed
        self.chunk = chunk
        self._ids = _ZipfIds(self.table_sizes, zipf_alpha, seed)
        self._teacher = _Teacher(len(self.table_sizes), seed)
        calibration = np.random.default_rng([seed, _CALIBRATION])
        self._teacher.calibrate(self._features(calibration, _CALIBRATION_SAMPLES))
        self._recent: dict[int, OrderedDict[int, _Chunk]] = {split: OrderedDict() for split in (_TRAIN, _EVAL)}

    def read(self, start: int, n: int) -> ClickBatch:
        """Training samples [start, start + n); see DataSource.read."""
        return self._read(_TRAIN, start, n)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[ClickBatch]:
        """The first n samples of the eval split, in batches: the same every call."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        for start in range(0, n, batch_size):
            yield self._read(_EVAL, start, min(batch_size, n - start))

    def teacher_auc(self, n: int = 200_000) -> float:
        """AUC of the teacher's own probabilities on the first n eval samples: the ceiling a
        learner can reach (labels are Bernoulli draws, so even the teacher is not perfect)."""
        from sklearn.metrics import roc_auc_score

        labels, probs = self._eval_labels_and_probs(n)
        return float(roc_auc_score(labels, probs))

    def positive_rate(self, n: int = 200_000) -> float:
        """Share of positive labels in the first n eval samples (calibrated to be ~0.25)."""
        labels, _ = self._eval_labels_and_probs(n)
        return float(labels.mean())

    def _eval_labels_and_probs(self, n: int) -> tuple[F32, F32]:
        chunks = [self._generate(_EVAL, i) for i in range(-(-n // self.chunk))]
        labels = np.concatenate([c.labels for c in chunks])[:n]
        probs = np.concatenate([c.probs for c in chunks])[:n]
        return labels, probs

    def _read(self, split: int, start: int, n: int) -> ClickBatch:
        check_range(start, n)
        if n == 0:
            return empty_batch(len(self.table_sizes), self.pooling)
        parts = []
        stop = start + n
        for i in range(start // self.chunk, (stop - 1) // self.chunk + 1):
            lo, hi = max(start - i * self.chunk, 0), min(stop - i * self.chunk, self.chunk)
            parts.append((self._cached(split, i), lo, hi))
        # concatenate copies, so callers may modify their batch without corrupting the cache
        return ClickBatch(
            torch.from_numpy(np.concatenate([c.dense[lo:hi] for c, lo, hi in parts])),
            torch.from_numpy(np.concatenate([c.sparse[lo:hi] for c, lo, hi in parts])),
            torch.from_numpy(np.concatenate([c.labels[lo:hi] for c, lo, hi in parts])),
        )

    def _cached(self, split: int, index: int) -> _Chunk:
        recent = self._recent[split]
        if index in recent:
            recent.move_to_end(index)
            return recent[index]
        chunk = recent[index] = self._generate(split, index)
        if len(recent) > 2:
            recent.popitem(last=False)
        return chunk

    def _generate(self, split: int, index: int) -> _Chunk:
        rng = np.random.default_rng([self.seed, split, index])
        features = self._features(rng, self.chunk)
        probs = 1.0 / (1.0 + np.exp(-self._teacher.logits(features)))
        labels = (rng.random(self.chunk, dtype=np.float32) < probs).astype(np.float32)
        sparse = np.ascontiguousarray(features.ids.transpose(1, 0, 2))
        return _Chunk(features.dense, sparse, labels, probs.astype(np.float32))

    def _features(self, rng: np.random.Generator, c: int) -> _Features:
        """c samples' dense features and ids (everything but the label)."""
        num_sparse, p = len(self.table_sizes), self.pooling
        ranks = self._ids.ranks(rng.random((num_sparse, c * p)))
        ids = self._ids.scatter(ranks).reshape(num_sparse, c, p)
        dense = self._teacher.dense(rng.random((c, NUM_DENSE), np.float32))
        return _Features(dense, ids)
