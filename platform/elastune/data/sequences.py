"""Token sequences as the dict batches a Hugging Face model takes: `input_ids`, `attention_mask`, `labels`.

Both sources are pure functions of position (data/source.py) and give every sequence `context`
columns, right-padded with PAD (0), which no real token is:

* `NextTokenDicts(source)`: a token source (`SyntheticText`, `TextSource`: TokenBatch) for a causal
  language model. `labels` are the ids with IGNORE (-100) at padding: the model predicts
  labels[t + 1] from the ids up to t, so a sequence of n real ids has n - 1 targets.
* `SyntheticClassification`: sequences whose label is a function of their tokens, for a sequence
  classifier. Each sequence is drawn leaning to one class c of `classes` (half its tokens are ids
  with id mod classes = c, the rest uniform), and its label is the class most of its real tokens
  fall in (ties to the lowest): a rule over the whole sequence that a model can learn, never noise.
  Lengths are log-normal around `mean_length` (sigma 0.8, as SyntheticText's), clipped to
  [2, context]. `labels` is int64 [B].
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Protocol

import numpy as np
import torch

from elastune.data.source import check_range
from elastune.data.text import PAD, TokenBatch

__all__ = ["IGNORE", "NextTokenDicts", "SyntheticClassification", "TokenDict"]

IGNORE = -100  # a target no loss counts (torch's and Hugging Face's cross-entropy ignore_index)
CHUNK = 1024  # sequences per generated chunk

TokenDict = dict[str, torch.Tensor]


class _TokenSource(Protocol):
    table_sizes: tuple[int, ...]
    pooling: int

    def read(self, start: int, n: int) -> TokenBatch: ...

    def eval_batches(self, n: int, batch_size: int) -> Iterator[TokenBatch]: ...


def _mask(lengths: torch.Tensor, context: int) -> torch.Tensor:
    """int64 [B, context]: 1 at each sequence's real ids, 0 at its padding."""
    return (torch.arange(context)[None, :] < lengths[:, None]).long()


class NextTokenDicts:
    """A TokenBatch source as next-token dict batches (see the module docstring)."""

    def __init__(self, source: _TokenSource) -> None:
        self.source = source
        self.table_sizes = source.table_sizes
        self.pooling = source.pooling
        self.synthetic = bool(getattr(source, "synthetic", False))  # as the source it reads

    @staticmethod
    def of(batch: TokenBatch) -> TokenDict:
        mask = _mask(batch.lengths, batch.tokens.shape[1])
        labels = batch.tokens.masked_fill(mask == 0, IGNORE)
        return {"input_ids": batch.tokens, "attention_mask": mask, "labels": labels}

    def read(self, start: int, n: int) -> TokenDict:
        return self.of(self.source.read(start, n))

    def eval_batches(self, n: int, batch_size: int) -> Iterator[TokenDict]:
        return (self.of(batch) for batch in self.source.eval_batches(n, batch_size))


class SyntheticClassification:
    """Labelled token sequences (see the module docstring). Sequence k of a split comes from chunk
    k // CHUNK, seeded by (seed, split, chunk): training is split 0, the held-out set split 1."""

    synthetic = True  # a stand-in: its reads are left out of samples/s on a CPU device (training/throughput.py)

    def __init__(self, vocab: int, context: int, mean_length: float, classes: int, seed: int = 0) -> None:
        if vocab < 2 * classes + 1:
            raise ValueError(f"vocab={vocab}: {classes} classes need at least {2 * classes + 1} ids (2 per class)")
        self.vocab, self.context, self.mean_length, self.classes, self.seed = vocab, context, mean_length, classes, seed
        self.table_sizes: tuple[int, ...] = (vocab,)
        self.pooling = context
        self._recent: dict[tuple[int, int], TokenDict] = {}

    def read(self, start: int, n: int) -> TokenDict:
        return self._read(0, start, n)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[TokenDict]:
        for start in range(0, n, batch_size):
            yield self._read(1, start, min(batch_size, n - start))

    def _read(self, split: int, start: int, n: int) -> TokenDict:
        check_range(start, n)
        parts = []
        for index in range(start // CHUNK, (start + n - 1) // CHUNK + 1) if n else ():
            lo, hi = max(start - index * CHUNK, 0), min(start + n - index * CHUNK, CHUNK)
            parts.append({key: value[lo:hi] for key, value in self._chunk(split, index).items()})
        if not parts:
            empty = torch.zeros(0, self.context, dtype=torch.int64)
            return {"input_ids": empty, "attention_mask": empty, "labels": torch.zeros(0, dtype=torch.int64)}
        return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}

    def _chunk(self, split: int, index: int) -> TokenDict:
        key = (split, index)
        if key not in self._recent:
            if len(self._recent) >= 4:
                self._recent.pop(next(iter(self._recent)))
            self._recent[key] = self._generate(split, index)
        return self._recent[key]

    def _generate(self, split: int, index: int) -> TokenDict:
        rng = np.random.default_rng([self.seed, split, index])
        sigma = 0.8
        mu = math.log(self.mean_length) - sigma**2 / 2  # the log-normal's mean is mean_length
        lengths = np.clip(np.rint(rng.lognormal(mu, sigma, CHUNK)), 2, self.context).astype(np.int64)
        leaning = rng.integers(0, self.classes, CHUNK)[:, None]
        uniform = rng.integers(1, self.vocab, (CHUNK, self.context))
        # the id nearest below a uniform one whose class is the sequence's leaning: in [1, vocab)
        lean = uniform - uniform % self.classes + leaning
        lean = np.where(lean >= self.vocab, lean - self.classes, lean)
        lean = np.where(lean < 1, lean + self.classes, lean)
        tokens = np.where(rng.random((CHUNK, self.context)) < 0.5, lean, uniform)
        real = np.arange(self.context)[None, :] < lengths[:, None]
        tokens[~real] = PAD
        counts = np.stack([((tokens % self.classes == c) & real).sum(1) for c in range(self.classes)], axis=1)
        labels = counts.argmax(1)  # the class most real tokens fall in; argmax takes the lowest of a tie
        return {
            "input_ids": torch.from_numpy(tokens.astype(np.int64)),
            "attention_mask": torch.from_numpy(real.astype(np.int64)),
            "labels": torch.from_numpy(labels.astype(np.int64)),
        }
