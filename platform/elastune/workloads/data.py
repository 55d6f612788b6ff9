"""Criteo-shaped training data for DLRM: a synthetic stream, and readers for the real files.

Every source yields `Batch`es of 13 dense features, 26 sparse (categorical) features and a binary
label, the shape of the Criteo Kaggle / Terabyte click logs that DLRM was built for.

The one property everything else leans on is that a source is a *pure function of position*:
`read(start, n)` returns training samples `[start, start + n)` of an endless stream, and the same
samples whatever way the range is split into calls. That is what makes gradient accumulation
(one batch read as k micro-batches), OOM retries (re-read a batch at a smaller micro-batch) and
checkpoint resume (continue at sample `step * batch_size`) exact rather than approximate.

Sources:

* `SyntheticCriteo` needs no files. It draws Zipf-skewed ids (the access pattern that makes
  embedding tables interesting: a few hot rows, a long cold tail) and labels from a hidden
  "teacher" model, so a learner has a real signal to find and a known ceiling (`teacher_auc`).
  It is generated chunk by chunk from seeds, never materialised, so the full-size Criteo tables
  (10M rows) cost no memory.
* `CriteoTSV` reads the Criteo text format; `CriteoParquet` reads the same columns from Parquet.
"""

from __future__ import annotations

import gzip
import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from elastune.errors import DataError

__all__ = [
    "CRITEO_KAGGLE_CARDINALITIES",
    "NUM_DENSE",
    "NUM_SPARSE",
    "Batch",
    "CriteoParquet",
    "CriteoTSV",
    "DataSource",
    "SyntheticCriteo",
    "hash_category",
    "table_sizes",
]

NUM_DENSE = 13
NUM_SPARSE = 26

# Distinct values per categorical column of the Criteo Kaggle display-advertising set (C1..C26).
CRITEO_KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
Mask = npt.NDArray[np.bool_]


def table_sizes(rows_scale: float) -> tuple[int, ...]:
    """Criteo Kaggle cardinalities scaled: max(2, ceil(card * rows_scale)) each.

    Scaling keeps the *shape* of the problem (one huge table next to tiny ones) while letting a
    laptop run it; 1.0 gives the real sizes. The product is rounded to 1e-9 before the ceiling so
    float error cannot add a row (100 * 0.07 is 7.000000000000001 in floats; it must give 7).
    """
    if not rows_scale > 0:
        raise ValueError(f"rows_scale must be > 0, got {rows_scale}")
    return tuple(max(2, math.ceil(round(c * rows_scale, 9))) for c in CRITEO_KAGGLE_CARDINALITIES)


# ----------------------------------------------------------------------------------------------
# The batch and the source protocol
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Batch:
    """B samples, ready for the model.

    dense:  float32 [B, 13], already log1p(max(x, 0)): Criteo counts are heavy-tailed, and the log
            keeps one huge count from dominating the bottom MLP.
    sparse: int64 [B, F, P] row ids, each in [0, table_sizes[f]) for feature f; P is the pooling
            (ids per multi-hot bag, fixed per source; 1 for the Criteo files).
    labels: float32 [B] in {0., 1.} (float so it feeds BCE-with-logits directly).
    """

    dense: torch.Tensor
    sparse: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def slice(self, start: int, stop: int) -> Batch:
        """Rows [start, stop), as views: micro-batching must not copy the batch."""
        return Batch(self.dense[start:stop], self.sparse[start:stop], self.labels[start:stop])

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on `device` (sources produce CPU tensors; the loop moves them)."""
        return Batch(self.dense.to(device), self.sparse.to(device), self.labels.to(device))


def _concat(parts: Sequence[Batch]) -> Batch:
    if len(parts) == 1:
        return parts[0]
    return Batch(
        torch.cat([p.dense for p in parts]),
        torch.cat([p.sparse for p in parts]),
        torch.cat([p.labels for p in parts]),
    )


def _empty_batch(num_sparse: int, pooling: int) -> Batch:
    return Batch(
        torch.zeros(0, NUM_DENSE),
        torch.zeros(0, num_sparse, pooling, dtype=torch.int64),
        torch.zeros(0),
    )


@runtime_checkable
class DataSource(Protocol):
    """Where training and evaluation samples come from (see the module docstring)."""

    table_sizes: tuple[int, ...]
    pooling: int

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start+n) of the stream.

        Deterministic: read(s, a+b) == concat(read(s, a), read(s+a, b)) exactly, whatever the
        split. This is what makes micro-batch x accumulation, OOM retries and checkpoint resume
        exact.
        """
        ...

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        """The held-out eval set: n samples, disjoint from training, the same every call."""
        ...


def hash_category(value: str, size: int) -> int:
    """Row id of a categorical value in a table of `size` rows; empty (missing) -> 0.

    Criteo categoricals are already hashed to hex strings ("68fd1e64"), so reading them as a number
    modulo the table size is a well-spread, *stable* hash: the same value gets the same row in
    every process and run, which Python's salted `hash()` would not give. Raises ValueError for a
    value that is not hexadecimal.
    """
    return int(value, 16) % size if value else 0


def _check_range(start: int, n: int) -> None:
    if start < 0 or n < 0:
        raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")


# ----------------------------------------------------------------------------------------------
# Synthetic stream
# ----------------------------------------------------------------------------------------------

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
    """One generated chunk, as numpy (row slices of it become the tensors of a Batch)."""

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

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start + n); see DataSource.read."""
        return self._read(_TRAIN, start, n)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
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

    def _read(self, split: int, start: int, n: int) -> Batch:
        _check_range(start, n)
        if n == 0:
            return _empty_batch(len(self.table_sizes), self.pooling)
        parts = []
        stop = start + n
        for i in range(start // self.chunk, (stop - 1) // self.chunk + 1):
            lo, hi = max(start - i * self.chunk, 0), min(stop - i * self.chunk, self.chunk)
            parts.append((self._cached(split, i), lo, hi))
        # concatenate copies, so callers may modify their batch without corrupting the cache
        return Batch(
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


# ----------------------------------------------------------------------------------------------
# Real files: shared cursor / epoch / eval logic
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Block:
    """Consecutive valid rows parsed from a file, with the malformed lines skipped among them."""

    batch: Batch
    malformed: list[int]  # 1-based line (row) numbers skipped
    last_line: int  # the last line number this block covered


class _RowStream:
    """The valid rows of one file, from its beginning, handed out k at a time."""

    def __init__(self, batches: Iterator[Batch]) -> None:
        self._batches = batches
        self._head: Batch | None = None
        self.consumed = 0  # rows handed out (or skipped) so far

    def take(self, k: int) -> list[Batch]:
        """Up to k rows as views of parsed blocks; fewer only when the file has run out."""
        parts: list[Batch] = []
        while k > 0:
            if self._head is None or len(self._head) == 0:
                self._head = next(self._batches, None)
                if self._head is None:
                    break
                continue
            part = self._head.slice(0, k)
            self._head = self._head.slice(len(part), len(self._head))
            parts.append(part)
            k -= len(part)
            self.consumed += len(part)
        return parts

    def skip(self, k: int) -> int:
        return sum(len(p) for p in self.take(k))


def _require_file(path: Path, what: str) -> Path:
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"{path}: no such file; set {what} to an existing data file")
    return path


class _FileSource(ABC):
    """A DataSource over a Criteo file (TSV or Parquet): sequential cursor, epochs, eval split.

    * `read` keeps a cursor: a read that starts where the last one stopped continues the open file;
      any other start reopens it and skips to `start` (which costs parsing everything before it).
    * When the file runs out the stream wraps around to its first training row: sample
      `start` is training row `start mod (training rows)`, i.e. epochs follow each other.
    * Eval: with `eval_path`, the eval set is that file's rows; otherwise the first `eval_samples`
      valid rows of `path` are held out and training starts right after them.
    * Malformed rows raise DataError naming file and line, or with skip_malformed are skipped and
      counted (once each, however many epochs re-read them) in `malformed_lines`.
    """

    pooling: int = 1
    _fix = "fix the file or set data.skip_malformed=true to skip and count such lines"

    def __init__(
        self,
        path: Path,
        table_sizes: Sequence[int],
        *,
        eval_path: Path | None = None,
        eval_samples: int = 0,
        skip_malformed: bool = False,
    ) -> None:
        if len(table_sizes) != NUM_SPARSE:
            raise ValueError(f"need {NUM_SPARSE} table sizes (C1..C26), got {len(table_sizes)}")
        if eval_samples < 0:
            raise ValueError(f"eval_samples must be >= 0, got {eval_samples}")
        self.path = _require_file(path, "data.path")
        self.eval_path = _require_file(eval_path, "data.eval_path") if eval_path else None
        self.table_sizes = tuple(int(s) for s in table_sizes)
        self.held_out = 0 if self.eval_path else eval_samples
        self.skip_malformed = skip_malformed
        self.malformed_lines = 0
        self._scanned: dict[Path, int] = {}  # per file, the furthest line already counted
        self._stream: _RowStream | None = None
        self._cursor = 0  # the training sample the open stream yields next
        self._train_rows: int | None = None  # valid training rows per epoch, once known

    @abstractmethod
    def _parse(self, path: Path) -> Iterator[_Block]:
        """The file's valid rows from its start, in blocks; malformed rows per skip_malformed."""

    def read(self, start: int, n: int) -> Batch:
        """Training samples [start, start + n), wrapping around the file; see the class doc."""
        _check_range(start, n)
        if n == 0:
            return _empty_batch(NUM_SPARSE, 1)
        try:
            if self._stream is None or start != self._cursor:
                self._seek(start)
            assert self._stream is not None
            parts: list[Batch] = []
            left = n
            while left > 0:
                got = self._stream.take(left)
                parts += got
                left -= sum(len(p) for p in got)
                if left > 0:
                    self._wrap()
        except BaseException:
            self._stream = None  # a parser that raised is dead: the next read reopens the file
            raise
        self._cursor = start + n
        return _concat(parts)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[Batch]:
        """The first n rows of the eval set, in batches (re-read from the file every call)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        source = self.eval_path or self.path
        if self.eval_path is None and n > self.held_out:
            raise DataError(
                f"{source}: asked for {n} eval samples but only eval_samples={self.held_out} rows "
                "are held out; set eval.samples accordingly or give data.eval_path"
            )
        stream = _RowStream(self._batches(source))
        for start in range(0, n, batch_size):
            want = min(batch_size, n - start)
            got = stream.take(want)
            if sum(len(p) for p in got) < want:
                raise DataError(
                    f"{source}: has only {stream.consumed} valid rows, fewer than the {n} eval "
                    "samples asked for; lower eval.samples or use a bigger file"
                )
            yield _concat(got)

    def _batches(self, path: Path) -> Iterator[Batch]:
        for block in self._parse(path):
            seen = self._scanned.get(path, 0)
            self.malformed_lines += sum(1 for line in block.malformed if line > seen)
            self._scanned[path] = max(seen, block.last_line)
            yield block.batch

    def _open_training(self) -> _RowStream:
        """A stream at training row 0, i.e. past the held-out eval rows."""
        stream = _RowStream(self._batches(self.path))
        if stream.skip(self.held_out) < self.held_out:
            raise DataError(
                f"{self.path}: has only {stream.consumed} valid rows, fewer than the "
                f"{self.held_out} held out for evaluation, so none are left to train on; lower "
                "eval.samples or give data.eval_path"
            )
        return stream

    def _wrap(self) -> None:
        """The open stream hit the end of the file: record the epoch length and start over."""
        assert self._stream is not None
        rows = self._stream.consumed - self.held_out
        if rows == 0:
            raise DataError(
                f"{self.path}: no valid training rows after the {self.held_out} held out for "
                "evaluation; lower eval.samples or give data.eval_path"
            )
        self._train_rows = rows
        self._stream = self._open_training()

    def _seek(self, start: int) -> None:
        self._stream = self._open_training()
        left = start % self._train_rows if self._train_rows else start
        while left > 0:
            left -= self._stream.skip(left)
            if left > 0:
                self._wrap()
                assert self._train_rows is not None
                left %= self._train_rows

    def _malformed(self, path: Path, line: int, problem: str) -> DataError:
        return DataError(f"{path}:{line}: {problem}; {self._fix}")


def _rows_to_batch(labels: npt.ArrayLike, ints: npt.ArrayLike, ids: npt.ArrayLike) -> Batch:
    """Parsed columns -> a Batch: dense log1p(max(x, 0)), sparse [B, 26, 1].

    Counts are converted through float64 so a huge count cannot overflow an int64 on the way."""
    counts = np.asarray(ints, dtype=np.float64).reshape(-1, NUM_DENSE)
    return Batch(
        torch.from_numpy(np.log1p(np.maximum(counts, 0.0)).astype(np.float32)),
        torch.from_numpy(np.asarray(ids, dtype=np.int64).reshape(-1, NUM_SPARSE, 1)),
        torch.from_numpy(np.asarray(labels, dtype=np.float32)),
    )


# ----------------------------------------------------------------------------------------------
# Criteo TSV
# ----------------------------------------------------------------------------------------------

_TSV_FIELDS = 1 + NUM_DENSE + NUM_SPARSE


class _Malformed(ValueError):
    """A line that is not a Criteo row; the message says what is wrong with it."""


def _parse_tsv_line(line: str, sizes: Sequence[int]) -> tuple[int, list[int], list[int]]:
    """`label \\t I1..I13 \\t C1..C26` -> (label, ints, row ids); raises _Malformed."""
    fields = line.rstrip("\n").rstrip("\r").split("\t")
    if len(fields) != _TSV_FIELDS:
        raise _Malformed(
            f"expected {_TSV_FIELDS} tab-separated fields (label, {NUM_DENSE} integer, "
            f"{NUM_SPARSE} categorical), found {len(fields)}"
        )
    if fields[0] not in ("0", "1"):
        raise _Malformed(f"the label must be 0 or 1, found {fields[0]!r}")
    try:
        ints = [int(v) if v else 0 for v in fields[1 : 1 + NUM_DENSE]]
    except ValueError:
        j, v = next((j, v) for j, v in enumerate(fields[1 : 1 + NUM_DENSE], 1) if not _is_int(v))
        raise _Malformed(f"I{j} must be an integer or empty, found {v!r}") from None
    cats = fields[1 + NUM_DENSE :]
    try:  # hash_category, inlined: this is the reader's hot loop
        ids = [int(v, 16) % s if v else 0 for v, s in zip(cats, sizes, strict=True)]
    except ValueError:
        j, v = next((j, v) for j, v in enumerate(cats, 1) if not _is_hex(v))
        raise _Malformed(f"C{j} must be a hex string or empty, found {v!r}") from None
    return int(fields[0]), ints, ids


def _is_int(v: str) -> bool:
    try:
        int(v or "0")
    except ValueError:
        return False
    return True


def _is_hex(v: str) -> bool:
    try:
        int(v or "0", 16)
    except ValueError:
        return False
    return True


def _open_text(path: Path) -> IO[str]:
    """Text lines of a plain or gzipped (.gz) file; undecodable bytes become U+FFFD, which then
    fail the field checks with a line number instead of a UnicodeDecodeError."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


class CriteoTSV(_FileSource):
    """The Criteo Kaggle / Terabyte text format (optionally .gz); implements DataSource.

    Each line is `label \\t I1..I13 \\t C1..C26`: integer counts (empty = missing = 0, negative
    clamped to 0) and hex-hashed categoricals (empty = missing = row 0), the latter mapped into
    each table with `hash_category`. Parsing is pure Python (roughly 100k lines/s per process).
    See _FileSource for the cursor, epoch and eval semantics.
    """

    block_rows = 8192

    def _parse(self, path: Path) -> Iterator[_Block]:
        labels: list[int] = []
        ints: list[list[int]] = []
        ids: list[list[int]] = []
        malformed: list[int] = []
        line_no = 0
        with _open_text(path) as f:
            for line_no, line in enumerate(f, 1):
                try:
                    label, row_ints, row_ids = _parse_tsv_line(line, self.table_sizes)
                except _Malformed as e:
                    if not self.skip_malformed:
                        raise self._malformed(path, line_no, str(e)) from None
                    malformed.append(line_no)
                    continue
                labels.append(label)
                ints.append(row_ints)
                ids.append(row_ids)
                if len(labels) == self.block_rows:
                    yield _Block(_rows_to_batch(labels, ints, np.array(ids)), malformed, line_no)
                    labels, ints, ids, malformed = [], [], [], []
        if labels or malformed:
            yield _Block(_rows_to_batch(labels, ints, np.array(ids)), malformed, line_no)


# ----------------------------------------------------------------------------------------------
# Criteo Parquet
# ----------------------------------------------------------------------------------------------

_DENSE_COLUMNS = [f"I{j}" for j in range(1, NUM_DENSE + 1)]
_SPARSE_COLUMNS = [f"C{j}" for j in range(1, NUM_SPARSE + 1)]
_COLUMNS = ["label", *_DENSE_COLUMNS, *_SPARSE_COLUMNS]


class CriteoParquet(_FileSource):
    """Criteo columns `label, I1..I13, C1..C26` in Parquet; implements DataSource.

    Integer columns may be any integer or integral float type (null = missing = 0) or strings;
    categoricals may be hex strings (hashed with `hash_category`) or integers (value % size).
    The file is read in record batches, never whole; "line" in messages is the 1-based row.
    See _FileSource for the cursor, epoch and eval semantics.
    """

    block_rows = 65536
    _fix = "fix the file or set data.skip_malformed=true to skip and count such rows"

    def __init__(
        self,
        path: Path,
        table_sizes: Sequence[int],
        *,
        eval_path: Path | None = None,
        eval_samples: int = 0,
        skip_malformed: bool = False,
    ) -> None:
        super().__init__(
            path,
            table_sizes,
            eval_path=eval_path,
            eval_samples=eval_samples,
            skip_malformed=skip_malformed,
        )
        for p in (self.path, self.eval_path):
            if p is not None:
                self._check_columns(p)

    @staticmethod
    def _open(path: Path) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{path}: not a readable Parquet file ({e})") from None

    def _check_columns(self, path: Path) -> None:
        names = set(self._open(path).schema_arrow.names)
        missing = [c for c in _COLUMNS if c not in names]
        if missing:
            raise DataError(
                f"{path}: missing column(s) {', '.join(missing)}; a Criteo Parquet file needs label, I1..I13, C1..C26"
            )

    def _parse(self, path: Path) -> Iterator[_Block]:
        first_row = 1
        for record_batch in self._open(path).iter_batches(self.block_rows, columns=_COLUMNS):
            yield self._convert(path, record_batch, first_row)
            first_row += record_batch.num_rows

    def _convert(self, path: Path, rb: pa.RecordBatch, first_row: int) -> _Block:
        """One record batch -> its valid rows; `bad` collects each column's malformed rows."""
        label, label_bad, label_missing = _int_column(path, rb, "label", int)
        bad = {"label": label_bad | label_missing | (label > 1) | (label < 0)}
        ints = np.empty((rb.num_rows, NUM_DENSE), dtype=np.int64)
        for j, name in enumerate(_DENSE_COLUMNS):
            ints[:, j], bad[name], _ = _int_column(path, rb, name, _parse_count)
        ids = np.empty((rb.num_rows, NUM_SPARSE), dtype=np.int64)
        for j, (name, size) in enumerate(zip(_SPARSE_COLUMNS, self.table_sizes, strict=True)):
            parse = partial(hash_category, size=size)
            values, bad[name], _ = _int_column(path, rb, name, parse)
            ids[:, j] = np.remainder(values, size)
        any_bad = np.logical_or.reduce(list(bad.values()))
        rows = np.flatnonzero(any_bad)
        if len(rows) and not self.skip_malformed:
            row = int(rows[0])
            name = next(n for n, b in bad.items() if b[row])
            problem = f"column {name}: {_EXPECTED[name[0]]}, found {rb.column(name)[row].as_py()!r}"
            raise self._malformed(path, first_row + row, problem)
        keep = ~any_bad
        batch = _rows_to_batch(label[keep], ints[keep], ids[keep])
        return _Block(batch, [first_row + int(r) for r in rows], first_row + rb.num_rows - 1)


_EXPECTED = {
    "l": "the label must be 0 or 1",
    "I": "expected an integer or null",
    "C": "expected a hex string, an integer or null",
}


def _parse_count(value: str) -> int:
    return int(value) if value else 0


def _int_column(path: Path, rb: pa.RecordBatch, name: str, parse: Callable[[str], int]) -> tuple[I64, Mask, Mask]:
    """(values, malformed, missing) for a column read as integers; missing (null, NaN) reads as 0.

    Strings are parsed with `parse`, once per distinct value: categoricals repeat a lot (that is
    the Zipf skew), so this is much cheaper than parsing every cell.
    """
    col = rb.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    t = col.type
    missing = col.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        values = col.cast(pa.int64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False)
        return values.astype(np.int64), np.zeros(len(col), dtype=np.bool_), missing
    if pa.types.is_floating(t):
        x = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        missing |= np.isnan(x)
        x[missing] = 0.0
        bad = ~np.isfinite(x) | (x != np.floor(x)) | (np.abs(x) > 2.0**62)
        return np.where(bad, 0.0, x).astype(np.int64), bad, missing
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return (*_parse_strings(col, parse), missing)
    raise DataError(f"{path}: column {name} has type {t}; expected integers or strings")


def _parse_strings(col: pa.Array, parse: Callable[[str], int]) -> tuple[I64, Mask]:
    encoded = col.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    parsed = np.zeros(len(distinct) + 1, dtype=np.int64)  # the extra last entry serves nulls
    invalid = np.zeros(len(distinct) + 1, dtype=np.bool_)
    for i, v in enumerate(distinct):
        try:
            parsed[i] = parse(v)
        except (ValueError, OverflowError):
            invalid[i] = True
    index = encoded.indices.fill_null(len(distinct)).to_numpy(zero_copy_only=False)
    return parsed[index], invalid[index]
