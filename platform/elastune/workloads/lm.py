"""`workload: lm`: a small decoder-only transformer language model, the second built-in workload.

It is written on the public workload API alone (`elastune.Workload`, `TableSpec`, `build_tables`,
`QualityMetric`): the vocabulary embedding is a table of the run's strategy, so `embedding.strategy`
(full, half, int8, hashed), the row-wise optimizers and the estimator apply to it as to DLRM's.

Data (`data.source`):
- `synthetic` (default): `SyntheticText` (data/text.py), `workload_options.vocab` ids with a learnable rule
  and log-normal lengths around `workload_options.mean_length`;
- `text`: your documents (`data.path`, .txt or .jsonl), tokenized by a byte-level BPE trained on
  them to `workload_options.vocab` ids (data/text.py; mean_length is not read). The
  token table has the tokenizer's real size, which a small corpus leaves below the target.
Other sources (Criteo's, a table's columns) are DLRM's and are refused.

A sequence travels in a `TokenBatch` (data/text.py): tokens int64 [B, context] right-padded with
PAD (0), lengths int64 [B] (at least 2); the targets are the tokens shifted by one.

Knobs (its options, `workload_options.KEY`, which a sweep can search like any run-config field):
- `padding: static | dynamic | packed`: attend over the whole context, only up to the longest
  sequence of the micro-batch, or over the micro-batch's documents laid end to end in rows
  with attention kept inside each document (a block-diagonal causal mask; positions restart per
  document; a document is never cut across rows). Right padding under a causal mask never changes
  a real token's output, so all three give the same loss; dynamic and packed do less work where
  sequences are short. A fake tensor has no lengths, so the estimator prices the longest batch it
  can see (`seen_shapes`): it reads the lengths of the run's first training steps (up to
  SEEN_SEQUENCES sequences) and of every evaluation batch, splits them into micro-batches as the
  loop does, and prices each micro-batch size at the longest sequence (dynamic) or the most packed
  rows (packed) among them. A later batch longer than all of those is not priced. A CUDA
  estimate runs the run's own lengths instead, batch by batch in the run's order
  (`example_batches`: the first REPLAYED steps and eval batches, then each one larger than all
  before it): the caching allocator's reserved peak depends on the sequence of shapes, not only
  on the largest (memory/trace.py).
- `bucket_by_length` (dynamic padding): a step's sequences are sorted by length before they
  are split into micro-batches, so short ones pad to short ones (it matters when batch.accum > 1).
- `activation_checkpointing: none | every_block | every_n` (`checkpoint_every`): the
  blocks' activations are recomputed in the backward instead of kept (torch.utils.checkpoint).
- `tie_embeddings`: the output projection is the token table's weight (strategy `full`
  only: the others store rows in a form a matmul cannot take).
Quality: eval perplexity over the held-out sequences' real tokens, lower is better. Beside it,
`baseline_perplexity`: that of guessing uniformly over the token table, its size. A model above it
has learned nothing that carries to held-out text, and the run says so (quality.unlearned_warning).
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, cast

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from elastune.compat import is_fake, outside_trace
from elastune.config import RunConfig
from elastune.data.source import DataSource
from elastune.data.text import DEFAULT_VOCAB, PAD, SyntheticText, TextSource, TokenBatch, text_tokenizer
from elastune.embeddings.tables import TableSpec, build_tables
from elastune.workloads.base import Workload
from elastune.workloads.options import WorkloadOptions
from elastune.workloads.quality import QualityMetric

__all__ = ["PAD", "LMOptions", "LMWorkload", "SyntheticText", "TransformerLM", "make_lm"]

SEEN_SEQUENCES = 16_384  # the estimator reads at most this many training sequences' lengths (`run_lengths`)
REPLAYED = 16  # a CUDA estimate replays the run's first steps and eval batches, then only larger ones (`replayed`)


class LMOptions(WorkloadOptions):
    """`workload_options` of `workload: lm` (the width is `model.embedding_dim`): its shape, its
    data, and the sequence knobs a sweep searches."""

    layers: int = Field(2, ge=1, le=96, description="Transformer blocks.")
    heads: int = Field(4, ge=1, le=128, description="Attention heads; model.embedding_dim must divide by it.")
    context: int = Field(128, ge=8, le=32768, description="Longest sequence (tokens).")
    vocab: int = Field(
        DEFAULT_VOCAB,
        ge=16,
        le=2_000_000,
        description="Vocabulary size: of the synthetic text, or the target of data.source=text's tokenizer "
        "(at least 259: every byte, <pad>, <unk>, <eos>).",
    )
    mean_length: float = Field(
        40.0,
        gt=2,
        le=32768,
        description="Synthetic text: mean sequence length (log-normal, clipped to context); data.source=text "
        "does not read it.",
    )
    padding: Literal["static", "dynamic", "packed"] = Field(
        "static",
        description="Pad sequences to the context length (static), to the longest of the micro-batch (dynamic), "
        "or pack the micro-batch's documents into full rows, attention kept inside each document (packed).",
    )
    bucket_by_length: bool = Field(
        False,
        description="padding=dynamic: sort each step's sequences by length before the micro-batch split, so each "
        "micro-batch pads less (the step's gradient is the same in any order; it needs batch.accum > 1 to matter).",
    )
    activation_checkpointing: Literal["none", "every_block", "every_n"] = Field(
        "none",
        description="Recompute blocks' activations in the backward (torch.utils.checkpoint): every block, or every "
        "checkpoint_every-th; less memory, more compute.",
    )
    checkpoint_every: int = Field(
        2, ge=1, le=64, description="activation_checkpointing=every_n: checkpoint one block in this many."
    )
    tie_embeddings: bool = Field(
        False,
        description="The output projection is the token table (half the vocabulary parameters; needs "
        "embedding.strategy=full and optimizer.sparse=adam).",
    )

    @model_validator(mode="after")
    def _buckets_need_dynamic_padding(self) -> LMOptions:
        # A whole-options rule (named `workload_options`, not one key): a sweep draws bucket_by_length
        # only `when` padding is dynamic, and a value check of bucket_by_length alone must not refuse it.
        if self.bucket_by_length and self.padding != "dynamic":
            raise ValueError(
                f"workload_options.bucket_by_length sorts sequences so that dynamic padding pads less; with "
                f"workload_options.padding={self.padding!r} it does nothing: set padding to dynamic or drop "
                "bucket_by_length"
            )
        return self


def first_fit(lengths: Sequence[int], context: int) -> tuple[list[int], list[int], int]:
    """Packing's layout: each document goes whole into the first row with room for it, in order.
    Returns (row of each document, its first column, rows used)."""
    fills = np.zeros(len(lengths), dtype=np.int64)  # tokens used per row; at most one row per document
    row_of, col_of, rows = [], [], 0
    for n in lengths:
        row = int(np.argmax(fills[: rows + 1] + n <= context))  # row `rows` is empty: always fits
        row_of.append(row)
        col_of.append(int(fills[row]))
        fills[row] += n
        rows = max(rows, row + 1)
    return row_of, col_of, rows


@functools.lru_cache(maxsize=16)
def seen_shapes(cfg_json: str) -> tuple[tuple[int, int, int], ...]:
    """What the estimator prices an LM run's micro-batches at: (micro-batch size, its longest
    sequence, the rows it packs into), the most of each over the micro-batches of the run's first
    steps and over every evaluation batch (`run_lengths`)."""
    cfg = RunConfig.model_validate_json(cfg_json)
    context = LMOptions.model_validate(cfg.workload_options).context
    seen: dict[int, tuple[int, int]] = {}

    def see(lengths: tuple[int, ...]) -> None:
        longest, rows = seen.get(len(lengths), (0, 0))
        shape = _shape(lengths, context)
        seen[len(lengths)] = (max(longest, shape[0]), max(rows, shape[1]))

    for lengths in run_lengths(cfg_json):
        for part in _micro_batches(lengths, cfg.batch.micro):
            see(part)
    for lengths in run_lengths(cfg_json, held_out=True):
        see(lengths)
    return tuple((size, longest, rows) for size, (longest, rows) in sorted(seen.items()))


@functools.lru_cache(maxsize=32)
def run_lengths(cfg_json: str, held_out: bool = False) -> tuple[tuple[int, ...], ...]:
    """The real lengths of an LM run's batches, in the order the loop reads them: its first
    training steps (up to SEEN_SEQUENCES sequences; one rank's view), each as `arrange_step`
    orders it, or with `held_out` every evaluation batch."""
    cfg = RunConfig.model_validate_json(cfg_json)
    workload = LMWorkload(cfg, LMOptions.model_validate(cfg.workload_options))
    source = workload.data_source()
    if held_out:
        batches = source.eval_batches(cfg.eval.samples, cfg.eval.batch or cfg.batch.micro)
        return tuple(tuple(int(n) for n in batch.lengths.tolist()) for batch in batches)
    effective = cfg.batch.effective
    steps = []
    for step in range(min(cfg.steps, max(1, SEEN_SEQUENCES // effective))):
        lengths = [int(n) for n in _lengths(source, step * effective, effective)]
        if workload.options.bucket_by_length:
            lengths.sort()  # arrange_step's order (equal lengths are interchangeable)
        steps.append(tuple(lengths))
    return tuple(steps)


def replayed(batches: Iterable[tuple[int, ...]], size: Callable[[tuple[int, ...]], int]) -> Iterator[tuple[int, ...]]:
    """Of a run's batches (their lengths, in order), those a CUDA estimate replays: the first
    REPLAYED, then each one larger by `size` than all before it. The caching allocator reserves
    anew when a request outgrows every free block it has cached: once the first steps have cached
    blocks of the shapes they use, that happens at a step whose shapes are larger than any before
    it. (Replaying every step of 13 dynamic and packed configs, 100 or 300 steps each, the reserved
    peak grew after the 14th step only at such steps, and this selection reproduces each peak.)"""
    largest = 0
    for index, lengths in enumerate(batches):
        this = size(lengths)
        if index < REPLAYED or this > largest:
            yield lengths
        largest = max(largest, this)


def _micro_batches(lengths: tuple[int, ...], micro: int) -> list[tuple[int, ...]]:
    return [lengths[start : start + micro] for start in range(0, len(lengths), micro)]


def _shape(lengths: Sequence[int], context: int) -> tuple[int, int]:
    """(longest sequence, packed rows) of a micro-batch of sequences of these lengths."""
    return max(lengths), first_fit(lengths, context)[2]


def _lengths(source: DataSource, start: int, n: int) -> np.ndarray:
    """Real lengths of the training sequences [start, start + n)."""
    if isinstance(source, SyntheticText):
        return source.lengths(start, n)
    batch: TokenBatch = source.read(start, n)
    return batch.lengths.numpy()


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, width]; mask [B, 1, T, T] (True: may attend) for packed rows, else causal."""
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        if mask is None:  # causal: right padding is never read by a real token
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, t, w))
        return x + self.mlp(self.norm2(x))


class TransformerLM(nn.Module):
    def __init__(
        self,
        embeddings: nn.Module,
        vocab: int,
        width: int,
        options: LMOptions,
        *,
        tie: bool,
        checkpointing: str,
        every: int,
    ) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.position = nn.Embedding(options.context, width)
        self.blocks = nn.ModuleList(Block(width, options.heads) for _ in range(options.layers))
        self.norm = nn.LayerNorm(width)
        self.tied = tie
        self.output = None if tie else nn.Linear(width, vocab, bias=False)
        # which blocks recompute their activations in the backward
        self.checkpointed = [
            checkpointing == "every_block" or (checkpointing == "every_n" and i % every == every - 1)
            for i in range(options.layers)
        ]

    def output_weight(self) -> torch.Tensor:
        """[vocab, width]: the token table itself when tied."""
        if self.output is not None:
            return self.output.weight
        return cast(torch.Tensor, self.embeddings.bag.weight)  # type: ignore[union-attr]  # `full` (checked)

    def forward(
        self, tokens: torch.Tensor, segments: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, vocab]. Packed rows give each token's document
        (`segments`, -1 for padding) and its position in it: a token attends only to earlier
        tokens of its own document."""
        b, t = tokens.shape
        x = self.embeddings(tokens.reshape(b * t, 1, 1)).view(b, t, -1)
        x = x + (self.position.weight[:t] if positions is None else self.position(positions))
        mask = None
        if segments is not None:
            causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
            mask = ((segments[:, :, None] == segments[:, None, :]) & causal)[:, None]
        for block, recompute in zip(self.blocks, self.checkpointed, strict=True):
            x = checkpoint(block, x, mask, use_reentrant=False) if recompute and self.training else block(x, mask)
        return cast(torch.Tensor, self.norm(x) @ self.output_weight().T.to(x.dtype))


class LMWorkload(Workload):
    quality = QualityMetric("perplexity", "min")
    units = "tokens"  # throughput in real tokens/s beside sequences/s
    options: LMOptions

    def count_units(self, batch: TokenBatch) -> int:
        """The batch's real tokens (padding excluded), read from the lengths on the host."""
        return int(batch.lengths.sum())

    def loss_weight(self, batch: TokenBatch) -> torch.Tensor:
        """The batch's next-token targets (a sequence of n real tokens has n - 1), what `loss`
        averages over: micro-batches are weighted by it, so micro x accum is exact."""
        return (batch.lengths - 1).clamp(min=0).sum()

    def __init__(self, cfg: RunConfig, options: LMOptions) -> None:
        super().__init__(cfg, options)
        self.context = options.context  # tokens per row: a sweep's token budget counts in it
        width = cfg.model.embedding_dim
        if width % options.heads:
            raise ValueError(
                f"model.embedding_dim={width} does not divide into workload_options.heads={options.heads}; "
                "choose a width that is a multiple of the heads"
            )
        if options.tie_embeddings and cfg.embedding.strategy != "full":
            raise ValueError(
                f"workload_options.tie_embeddings needs embedding.strategy=full, not {cfg.embedding.strategy!r}: "
                "the output projection multiplies by the table, which other strategies do not store as a matrix"
            )
        if options.tie_embeddings and cfg.optimizer.sparse != "adam":
            raise ValueError(
                f"workload_options.tie_embeddings needs optimizer.sparse=adam, not {cfg.optimizer.sparse!r}: the "
                "output projection gives the tied table a dense gradient, which a row-wise optimizer cannot take"
            )
        # the token table: the synthetic vocabulary, or the text tokenizer's real size (cached by validation)
        self.vocab = options.vocab
        if cfg.data.source == "text":
            self.vocab = text_tokenizer(cfg.data, options.vocab, self._eval_samples).get_vocab_size()
        self._tables = [TableSpec("tokens", self.vocab, width)]
        # the estimator's fake batches made of the run's lengths (`example_batches`), by storage
        self._made_of: weakref.WeakKeyDictionary[torch.UntypedStorage, tuple[int, ...]] = weakref.WeakKeyDictionary()

    @property
    def tables(self) -> list[TableSpec]:
        return self._tables

    @property
    def _eval_samples(self) -> int:
        """Documents of data.path a text source holds out (none with data.eval_path)."""
        return 0 if self.cfg.data.eval_path else self.cfg.eval.samples

    def build_model(self) -> nn.Module:
        o = self.options
        embeddings = build_tables(self.tables, self.cfg.embedding, self.cfg.optimizer.sparse)
        return TransformerLM(
            embeddings,
            self.vocab,
            self.cfg.model.embedding_dim,
            o,
            tie=o.tie_embeddings,
            checkpointing=o.activation_checkpointing,
            every=o.checkpoint_every,
        )

    def data_source(self) -> DataSource:
        o, d = self.options, self.cfg.data
        if d.source == "text":
            return TextSource(d, vocab=o.vocab, context=o.context, eval_samples=self._eval_samples)
        return SyntheticText(o.vocab, o.context, min(o.mean_length, o.context), seed=d.seed)

    def arrange_step(self, batch: TokenBatch) -> TokenBatch:
        """A step's sequences in the order its micro-batches take them: by length under
        `workload_options.bucket_by_length` (stable), so a micro-batch's longest sequence is close to
        its others. Any order gives the step the same gradient (micro-batches are weighted by their targets)."""
        if not self.options.bucket_by_length or len(batch) < 2:
            return batch
        order = torch.argsort(batch.lengths, stable=True)
        return TokenBatch(batch.tokens[order], batch.lengths[order])

    def _tokens(self, batch: TokenBatch) -> torch.Tensor:
        """[B, T]: under dynamic padding only up to the micro-batch's longest sequence (a traced,
        fake batch has no lengths: `_priced`)."""
        tokens = batch.tokens
        if self.options.padding == "dynamic" and len(batch):
            longest = self._priced(batch)[0] if is_fake(batch.lengths) else int(batch.lengths.max())
            tokens = tokens[:, :longest]
        return tokens

    def _priced(self, batch: TokenBatch) -> tuple[int, int]:
        """(longest sequence, packed rows) the estimator's trace prices fake `batch` at: those of
        the real lengths it was made of (`example_batches`; a micro-batch is a view of its step's
        batch, so its lengths are the step's at its offset); else the most the run's data shows
        for a micro-batch of its size (`seen_shapes`), else the worst case."""
        made_of = self._made_of.get(batch.lengths.untyped_storage())
        if made_of is not None:
            start = batch.lengths.storage_offset()
            return _shape(made_of[start : start + len(batch)], self.options.context)
        with outside_trace():  # reads real data: neither faked nor counted
            seen = {size: (longest, rows) for size, longest, rows in seen_shapes(self.cfg.model_dump_json())}
        return seen.get(len(batch), (self.options.context, len(batch)))

    def _token_losses(self, model: nn.Module, batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed next-token loss over real tokens, count of real targets)."""
        if self.options.padding == "packed" and len(batch):
            if is_fake(batch.lengths):  # the estimator's trace: the most rows the run's data packs into
                tokens = batch.tokens[: self._priced(batch)[1]]
                segments, positions = torch.zeros_like(tokens), torch.zeros_like(tokens)
            else:
                tokens, segments, positions = self.pack(batch)
            logits = model(tokens[:, :-1], segments[:, :-1], positions[:, :-1])
            # a target is the next token of the same document
            real = ((segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] >= 0)).float()
        else:  # static, dynamic
            tokens = self._tokens(batch)
            logits = model(tokens[:, :-1])
            real = (tokens[:, 1:] != PAD).float()
        # Over [B*T, vocab] rows, not logits.transpose(1, 2): a log-softmax over a dimension that is
        # not the innermost makes its own contiguous copy of the logits (measured: 32 MiB for 16 x 127
        # x 4096 fp32), a buffer the estimator's trace cannot see.
        targets = tokens[:, 1:]
        losses = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
        return (losses.view_as(targets) * real).sum(), real.sum()

    def pack(self, batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The micro-batch's documents laid end to end in rows of the context length: (tokens,
        document of each token (-1: padding), position in its document), each [rows, context].

        A document is never cut across rows (it would lose its earlier tokens' context and its
        target at the cut, so packing would change the loss): each goes whole into the first row
        with room for it (first fit, in order). Fewer rows than sequences when they are short."""
        context = self.options.context
        lengths = batch.lengths
        row_of, col_of, rows = first_fit(lengths.tolist(), context)  # the lengths on the host: one sync
        device = batch.tokens.device
        tokens = batch.tokens
        document = torch.repeat_interleave(torch.arange(len(batch), device=device), lengths)
        position = torch.arange(len(document), device=device) - torch.repeat_interleave(
            torch.cumsum(lengths, 0) - lengths, lengths
        )
        start = torch.tensor(row_of, device=device) * context + torch.tensor(col_of, device=device)
        where = start[document] + position  # each real token's place in the packed rows
        packed = torch.full((rows * context,), PAD, dtype=tokens.dtype, device=device)
        segments = torch.full((rows * context,), -1, dtype=torch.int64, device=device)
        positions = torch.zeros(rows * context, dtype=torch.int64, device=device)
        packed[where] = tokens[torch.arange(context, device=device)[None, :] < lengths[:, None]]
        segments[where] = document
        positions[where] = position
        return packed.view(rows, context), segments.view(rows, context), positions.view(rows, context)

    def loss(self, model: nn.Module, batch: TokenBatch) -> torch.Tensor:
        total, count = self._token_losses(model, batch)
        return total / count.clamp(min=1.0)

    def evaluate(self, model: nn.Module, batches: Iterable[TokenBatch]) -> dict[str, float]:
        """The eval loss over real next-token targets (batches weighted by them), its perplexity,
        exp(loss), the quality metric, how many targets it is over (`tokens`), and the perplexity
        of a uniform guess over the token table (`baseline_perplexity`: its size)."""
        targets = torch.zeros(())

        def counted(stream: Iterable[TokenBatch]) -> Iterable[TokenBatch]:
            nonlocal targets
            for batch in stream:
                targets = targets + self.loss_weight(batch).cpu()
                yield batch

        out = super().evaluate(model, counted(batches))
        perplexity = math.exp(min(out["loss"], 50.0))
        return {**out, "perplexity": perplexity, "tokens": float(targets), "baseline_perplexity": float(self.vocab)}

    def table_ids(self, batch: TokenBatch) -> torch.Tensor:
        return batch.tokens[:, None, :]

    def example_batch(self, n: int) -> TokenBatch:
        return TokenBatch(torch.zeros(n, self.options.context, dtype=torch.int64), torch.zeros(n, dtype=torch.int64))

    def example_batches(self, *, held_out: bool = False) -> Iterator[TokenBatch] | None:
        """Dynamic padding and packing: fake batches of the run's own lengths (`run_lengths`), in
        its order, those `replayed` keeps; each micro-batch is priced at its own longest sequence
        or packed rows (`_priced`). Static padding: None (every batch has the context's shape)."""
        if self.options.padding == "static":
            return None
        with outside_trace():  # reads real data: neither faked nor counted
            batches = run_lengths(self.cfg.model_dump_json(), held_out)
        micro = (self.cfg.eval.batch or self.cfg.batch.micro) if held_out else self.cfg.batch.micro
        grows_with = 1 if self.options.padding == "packed" else 0  # its packed rows, or its longest sequence

        def size(lengths: tuple[int, ...]) -> int:
            return max(_shape(part, self.options.context)[grows_with] for part in _micro_batches(lengths, micro))

        return (self._fake(lengths) for lengths in replayed(batches, size))

    def _fake(self, lengths: tuple[int, ...]) -> TokenBatch:
        """A fake batch of sequences of these lengths, which `_priced` reads back."""
        batch = self.example_batch(len(lengths))
        self._made_of[batch.lengths.untyped_storage()] = lengths
        return batch


def make_lm(cfg: RunConfig, options: LMOptions) -> LMWorkload:
    return LMWorkload(cfg, options)


make_lm.options_model = LMOptions  # type: ignore[attr-defined]
