"""`data.source: text`: your own documents for `workload: lm`, tokenized by a BPE trained on them.

```yaml
workload: lm
workload_options: {vocab: 8192, context: 256}   # vocab: the tokenizer's target size
data:
  source: text
  path: corpus.jsonl           # or .jsonl.gz, .txt, .txt.gz (the suffix says which)
  text_field: text             # JSON Lines: the key that holds each document
  eval_path: held-out.txt      # optional
```

Documents: in a .txt (.txt.gz) each non-empty line is one document (its text without the line
ending; a line of whitespace only is none). In a .jsonl (.jsonl.gz) each non-blank line is one
JSON object and the document is its `text_field` string (an empty or blank string is none). Files
are UTF-8 (a byte-order mark at the start is skipped), at most MAX_TEXT_BYTES after decompression,
and no line is over data.max_document_bytes (refused before it is read whole: data/files.py).

The split: with eval_path every document of path trains and eval_path's are held out. Without it,
eval.samples documents spread over path are held out: every k-th, k = max(2, documents //
eval.samples), the first eval.samples of those. Held-out documents are never trained on, not even by
the tokenizer.

The tokenizer: a byte-level BPE (HuggingFace `tokenizers`) trained on the training documents to
workload_options.vocab ids, with the special tokens at fixed ids: PAD 0 (the LM's padding), UNK 1
(reserved: every byte has an id, so nothing is unknown) and EOS 2, appended to every document so
the model learns where text ends. Text that spells a special token ("<eos>") is encoded as text,
never as the id (`encode_special_tokens`, which the JSON does not store: a server that loads the
tokenizer sets it too). The LM's token table has the tokenizer's real size, which is below the
target when the corpus runs out of pairs to merge. Training is deterministic: the same documents
give the same JSON, whatever the thread count (tests/unit/test_text_source.py checks it).

Sequences: each document's ids, EOS included, cut into consecutive pieces of at most `context` ids;
a last piece of one id is dropped (nothing to predict from it). Sequences travel in a `TokenBatch`,
as SyntheticText's (below): tokens int64 [B, context] right-padded with PAD, lengths int64 [B] the
real ids of each. Training sequence k is the (k mod n)-th of the n training sequences
in one fixed order, shuffled by data.seed so that a batch does not hold one long document's pieces
or one stretch of the file: a pure function of position, each epoch in the same order.
`eval_batches` gives the held-out sequences in file order.

The cache, in $ELASTUNE_HOME/tokenizers/ (not beside the data: its folder may be read-only, and a
job launched from the web UI must not write where a client has a say): `<key>.json`, the tokenizer
(HuggingFace's format: `Tokenizer.from_file` reads it), and `<key>.ids.npy` (`<key>.eval.npy` for
eval_path), the documents' ids end to end, each ending in EOS, which trials map into memory instead
of tokenizing the file again. The key hashes what they depend on: each file's resolved path, size,
mtime and the SHA-256 of its first and last MiB (not of all of it: every process computes the key),
and text_field, vocab, the held-out count and the tokenizers version. Written atomically; a changed
file gets a new key. Validation (validate.py: `check_text_data`) builds them: it reads each file,
checks every line, trains the tokenizer and tokenizes, once; the run's processes then load them.

What it trains on is said once per process, on stderr, when the source is first built (for
`elastune train`: by validation, before the run starts): the documents, how many are held out, the
tokens on each side and the vocabulary's real size (`TextStats`). A small corpus shows there: a
730-line file with eval.samples above half of it has every 2nd document held out.

Bad input is a DataError naming the file (and the line): an empty file, a line that is not UTF-8 or
not a JSON object, an object without a string `text_field`, a line over data.max_document_bytes, a
file past the size bound, fewer than 2 training sequences, too few documents to hold one out.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import os
import re
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tokenizers
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from elastune.config import DataConfig, RunConfig, elastune_home, text_format
from elastune.data.files import DataTooBig, bounded_lines
from elastune.data.source import I64, DataArtifact, Mask, check_range
from elastune.errors import DataError
from elastune.units import human_bytes

__all__ = [
    "DEFAULT_VOCAB",
    "EOS",
    "MAX_TEXT_BYTES",
    "MIN_VOCAB",
    "PAD",
    "UNK",
    "SyntheticText",
    "TextCorpus",
    "TextSource",
    "TextStats",
    "TokenBatch",
    "check_text_data",
    "text_corpus",
    "text_tokenizer",
    "tokenizer_artifact",
    "tokenizer_file",
    "tokenizer_of",
]

PAD, UNK, EOS = 0, 1, 2  # PAD is lm.PAD
DEFAULT_VOCAB = 4096  # the LM's workload_options.vocab when none is given
SPECIAL_TOKENS = ("<pad>", "<unk>", "<eos>")  # in id order
MIN_VOCAB = 256 + len(SPECIAL_TOKENS)  # every byte has an id, then the special tokens
MAX_TEXT_BYTES = 2 << 30  # 2 GiB of text, decompressed: the ids are held in memory (4 bytes each)
HASHED_BYTES = 1 << 20  # the fingerprint hashes a file's first and last MiB
ENCODE_DOCUMENTS = 1024  # pieces of documents per encode_batch call, at most
ENCODE_CHARS = 4 << 20  # text per encode_batch call, at most (one longer piece goes alone)
PIECE_CHARS = 1 << 16  # a longer document reaches the tokenizer in pieces of about half this or more
# where a document may be cut with no change to its tokens: a single space between two letters or
# digits starts a pre-token of the byte-level BPE (GPT-2's split pattern) and ends the one before
_CUT = re.compile(r"(?<=[^\W_]) (?=[^\W_])")
CACHE_FORMAT = "elastune.text/1"

U32 = npt.NDArray[np.uint32]


# ----------------------------------------------------------------------------------------------
# Reading: documents, every line checked
# ----------------------------------------------------------------------------------------------


def _lines(path: Path, limit: int) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line ending) of `path`, gunzipped: a line over `limit` bytes
    (data.max_document_bytes) is refused before it is read whole, and a file over MAX_TEXT_BYTES of
    text as soon as that much is read (files.bounded_lines: a gzip bomb costs no memory)."""
    try:
        for number, line in bounded_lines(path, limit, max_bytes=MAX_TEXT_BYTES):
            if number == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8) :]
            yield number, line.rstrip(b"\r\n")
    except DataTooBig:
        raise _too_big(path, decompressed=path.name.lower().endswith(".gz")) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot be read ({exc}); give a readable UTF-8 text file (gzipped if .gz)") from None


_JSON_KIND = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "true or false", type(None): "null"}  # fmt: skip


def _documents(path: Path, text_field: str, limit: int) -> Iterator[str]:
    """The documents of `path` in file order (see the module docstring); DataError at the first bad line."""
    jsonl = text_format(path) == "jsonl"
    for number, raw in _lines(path, limit):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = raw[exc.start : exc.start + 1]
            raise DataError(
                f"{path}: line {number}: not UTF-8 (byte {exc.start + 1} of the line is {bad!r}); save it as UTF-8"
            ) from None
        if not line.strip():
            continue
        if not jsonl:
            yield line
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise DataError(
                f"{path}: line {number}: not JSON ({str(exc)[:200]}); JSON Lines holds one object per line"
            ) from None
        if not isinstance(value, dict):
            raise DataError(
                f"{path}: line {number}: is {_JSON_KIND.get(type(value), 'a value')}, not a JSON object; "
                f'give one object per line, e.g. {{"{text_field}": "the document"}}'
            )
        if text_field not in value:
            keys = ", ".join(map(repr, list(value)[:10])) or "no keys"
            raise DataError(
                f"{path}: line {number}: the object has no key {text_field!r} (data.text_field), only {keys}; "
                "set data.text_field to the key that holds the text, or fix the line"
            )
        text = value[text_field]
        if not isinstance(text, str):
            raise DataError(
                f"{path}: line {number}: {text_field!r} (data.text_field) is {_JSON_KIND.get(type(text), 'a value')}, "
                "not a string; the document must be text"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise DataError(
                f"{path}: line {number}: {text_field!r} holds an unpaired surrogate escape (\\ud800-\\udfff), "
                "which is not text; fix the line"
            ) from None
        if text.strip():
            yield text


def _too_big(path: Path, *, decompressed: bool) -> DataError:
    how = "decompressed " if decompressed else ""
    return DataError(
        f"{path}: is over the {human_bytes(MAX_TEXT_BYTES)} of {how}text a text source reads (its ids are held "
        "in memory); split the corpus or sample it down"
    )


def _held_out(documents: int, eval_samples: int) -> Mask:
    """Which documents are held out for eval: every k-th, k = max(2, documents // eval_samples),
    the first eval_samples of them; none when eval_samples is 0 (eval_path holds the eval set)."""
    held = np.zeros(documents, dtype=np.bool_)
    if eval_samples:
        k = max(2, documents // eval_samples)
        held[k - 1 :: k][:eval_samples] = True
    return held


def _check_count(path: Path, documents: int, eval_samples: int) -> None:
    if documents == 0:
        raise DataError(f"{path}: has no documents (it is empty, or every line is blank); give a file of text")
    if eval_samples and documents < 2:
        raise DataError(
            f"{path}: has 1 document, and holding one out for evaluation leaves none to train on; give more "
            "documents (one per line in a .txt) or data.eval_path"
        )


# ----------------------------------------------------------------------------------------------
# The tokenizer and the ids, cached by fingerprint
# ----------------------------------------------------------------------------------------------


def _file_fingerprint(path: Path) -> dict[str, Any]:
    resolved = path.resolve()
    try:
        stat = resolved.stat()
        if stat.st_size > MAX_TEXT_BYTES:
            raise _too_big(path, decompressed=False)
        digest = hashlib.sha256()
        with open(resolved, "rb") as f:
            digest.update(f.read(HASHED_BYTES))
            f.seek(max(HASHED_BYTES, stat.st_size - HASHED_BYTES))
            digest.update(f.read(HASHED_BYTES))
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc}); give a readable file") from None
    return {
        "path": str(resolved),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256_ends": digest.hexdigest(),
    }


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:32]


def _key(data: DataConfig, vocab: int, eval_samples: int) -> str:
    """The tokenizer's (and data.path's ids') cache key. eval_path is not in it: a new eval file
    does not train the tokenizer again."""
    assert data.source == "text" and data.path is not None, "a validated text config"
    return _hash(
        {
            "format": CACHE_FORMAT,
            "path": _file_fingerprint(data.path),
            "text_field": data.text_field,
            "vocab": vocab,
            "held_out": eval_samples,
            "tokenizers": tokenizers.__version__,
        }
    )


def _cache() -> Path:
    return elastune_home() / "tokenizers"


def tokenizer_file(data: DataConfig, vocab: int, eval_samples: int) -> Path:
    """Where the tokenizer of `data` is cached: $ELASTUNE_HOME/tokenizers/<key>.json."""
    return _cache() / f"{_key(data, vocab, eval_samples)}.json"


_TOKENIZERS: dict[str, Tokenizer] = {}  # this process's tokenizers, by key


def text_tokenizer(data: DataConfig, vocab: int, eval_samples: int) -> Tokenizer:
    """The tokenizer of `data`, trained on its training documents to `vocab` ids (`eval_samples`
    documents held out, 0 with eval_path): from the cache, or trained (two passes over data.path)
    and cached."""
    if vocab < MIN_VOCAB:
        raise ValueError(f"vocab={vocab}: a byte-level tokenizer needs at least {MIN_VOCAB} ids")
    key = _key(data, vocab, eval_samples)
    known = _TOKENIZERS.get(key)
    if known is not None:
        return known
    where = _cache() / f"{key}.json"
    try:
        tokenizer = Tokenizer.from_file(str(where))
    except Exception:  # none yet, or damaged (the Rust side raises plain Exception): trained again
        assert data.path is not None
        tokenizer = _train(data.path, data.text_field, vocab, eval_samples, data.max_document_bytes)
        _write(where, lambda f: f.write(tokenizer.to_str().encode()))
    tokenizer.encode_special_tokens = True  # "<eos>" in a document is text, not the id
    _TOKENIZERS[key] = tokenizer
    return tokenizer


def _train(path: Path, text_field: str, vocab: int, eval_samples: int, limit: int) -> Tokenizer:
    """A byte-level BPE trained on the training documents of `path`: one pass to count them (which
    ones are held out depends on how many there are), one to train."""
    documents = sum(1 for _ in _documents(path, text_field, limit))
    _check_count(path, documents, eval_samples)
    held = _held_out(documents, eval_samples)
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.encode_special_tokens = True
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),  # added first: ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte, seen or not
        show_progress=False,
    )
    train = (doc for doc, out in zip(_documents(path, text_field, limit), held, strict=True) if not out)
    pieces = (piece for doc in train for piece in _cut(doc))  # the same words, so the same merges
    tokenizer.train_from_iterator(pieces, trainer=trainer)
    ids = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
    assert ids == [PAD, UNK, EOS], f"special tokens at {ids}"
    return tokenizer


def _cut(doc: str) -> Iterator[str]:
    """`doc` in pieces that tokenize, one after the other, to the ids it tokenizes to whole (cut
    only at _CUT): the tokenizer holds about a hundred bytes per byte of the text it is given at
    once (measured: 4 MiB in one string peaks at 460 MB training, 530 MB encoding), so a document of
    data.max_document_bytes goes in pieces of PIECE_CHARS / 2 or more. A stretch with nowhere to cut
    (no single space between letters or digits) stays whole."""
    start = 0
    while len(doc) - start > PIECE_CHARS:
        cut = _CUT.search(doc, start + PIECE_CHARS // 2)
        if cut is None:
            break
        yield doc[start : cut.start()]
        start = cut.start()
    yield doc[start:]


def _encode(tokenizer: Tokenizer, documents: Iterable[str]) -> U32:
    """Every document's ids followed by EOS, end to end."""
    parts = [np.zeros(0, dtype=np.uint32)]
    eos = np.array([EOS], dtype=np.uint32)
    count = 0
    for chunk in _chunks((piece, i == 0) for doc in documents for i, piece in enumerate(_cut(doc))):
        encoded = tokenizer.encode_batch_fast([piece for piece, _ in chunk], add_special_tokens=False)
        for e, (_, first) in zip(encoded, chunk, strict=True):
            if first and count:  # a document starts: the one before it ends
                parts.append(eos)
            count += first
            parts.append(np.array(e.ids, dtype=np.uint32))
    if count:
        parts.append(eos)
    ids = np.concatenate(parts)
    # EOS alone marks where a document ends: no document holds a special id (encode_special_tokens)
    assert int((ids <= EOS).sum()) == count, "a document encoded to a special id"
    return ids


def _chunks(pieces: Iterable[tuple[str, bool]]) -> Iterator[list[tuple[str, bool]]]:
    """The pieces in lists of at most ENCODE_DOCUMENTS and about ENCODE_CHARS of text: the tokenizer
    holds a batch's text and its encodings at once, many times the text's size."""
    chunk: list[tuple[str, bool]] = []
    size = 0
    for piece in pieces:
        if chunk and (len(chunk) == ENCODE_DOCUMENTS or size + len(piece[0]) > ENCODE_CHARS):
            yield chunk
            chunk, size = [], 0
        chunk.append(piece)
        size += len(piece[0])
    if chunk:
        yield chunk


def _write(where: Path, write: Callable[[Any], Any]) -> None:
    """Atomically (a concurrent trial reads the whole file or none); a cache that cannot be written
    only costs the next process the work again."""
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=where.parent, suffix=".tmp", delete=False) as f:
            write(f)
        os.replace(f.name, where)
    except OSError:
        return


def _ids(where: Path, tokenizer: Tokenizer, path: Path, text_field: str, limit: int) -> U32:
    """The ids of path's documents: mapped from the cache, or tokenized and cached."""
    try:
        ids = np.load(where, mmap_mode="r", allow_pickle=False)
        if ids.dtype == np.uint32 and ids.ndim == 1 and (len(ids) == 0 or ids[-1] == EOS):
            return ids
    except (OSError, ValueError):
        pass  # none yet, or damaged: tokenized again
    ids = _encode(tokenizer, _documents(path, text_field, limit))
    _write(where, lambda f: np.save(f, ids, allow_pickle=False))
    return ids


@dataclass(frozen=True)
class _Documents:
    """A file's documents: their ids (each document's, then EOS, end to end), and where each is."""

    ids: U32
    starts: I64
    lengths: I64  # EOS included

    @classmethod
    def of(cls, ids: U32) -> _Documents:
        ends = (np.flatnonzero(ids == EOS) + 1).astype(np.int64)
        starts = np.concatenate([[0], ends])[:-1].astype(np.int64)
        return cls(ids, starts, ends - starts)

    def __len__(self) -> int:
        return len(self.starts)


@dataclass(frozen=True)
class TextCorpus:
    """A text source's tokenizer and its files' documents."""

    tokenizer: Tokenizer
    documents: _Documents  # data.path's
    eval_documents: _Documents | None  # data.eval_path's; None: eval documents are held out of path's


_CORPORA: dict[str, TextCorpus] = {}  # this process's corpora, by key


def text_corpus(data: DataConfig, vocab: int, eval_samples: int) -> TextCorpus:
    """The tokenizer and the documents' ids of `data` (see text_tokenizer), from the cache or built."""
    key = _key(data, vocab, eval_samples)
    eval_key = _hash([key, _file_fingerprint(data.eval_path)]) if data.eval_path else None
    known = _CORPORA.get(f"{key}/{eval_key}")
    if known is not None:
        return known
    assert data.path is not None
    tokenizer = text_tokenizer(data, vocab, eval_samples)
    limit = data.max_document_bytes
    documents = _Documents.of(_ids(_cache() / f"{key}.ids.npy", tokenizer, data.path, data.text_field, limit))
    eval_documents = None
    if data.eval_path is not None:
        ids = _ids(_cache() / f"{eval_key}.eval.npy", tokenizer, data.eval_path, data.text_field, limit)
        eval_documents = _Documents.of(ids)
    corpus = _CORPORA[f"{key}/{eval_key}"] = TextCorpus(tokenizer, documents, eval_documents)
    return corpus


# ----------------------------------------------------------------------------------------------
# The source
# ----------------------------------------------------------------------------------------------


def _pieces(starts: I64, lengths: I64, context: int) -> tuple[I64, I64]:
    """Documents cut into consecutive pieces of at most `context` ids: (start, length) of each
    piece of at least 2 ids, in document order."""
    count = -(-lengths // context)
    doc = np.repeat(np.arange(len(starts)), count)
    nth = np.arange(len(doc)) - np.repeat(np.cumsum(count) - count, count)
    start = starts[doc] + nth * context
    length = np.minimum(context, lengths[doc] - nth * context)
    keep = length >= 2
    return start[keep], length[keep]


@dataclass(frozen=True, eq=False)
class TokenBatch:
    """B token sequences, what a text source (a file's documents, or SyntheticText) gives the LM.

    tokens:  int64 [B, context], the ids, right-padded with PAD (0);
    lengths: int64 [B], each sequence's real ids (at least 2: one to predict from, one to predict).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor

    def __len__(self) -> int:
        return int(self.lengths.shape[0])


@dataclass(frozen=True)
class _Sequences:
    ids: U32
    starts: I64
    lengths: I64

    def __len__(self) -> int:
        return len(self.starts)

    def batch(self, rows: I64 | slice, context: int) -> TokenBatch:
        starts, lengths = self.starts[rows], self.lengths[rows]
        columns = np.arange(context)
        real = columns[None, :] < lengths[:, None]
        tokens = np.full((len(starts), context), PAD, dtype=np.int64)
        tokens[real] = self.ids[(starts[:, None] + columns[None, :])[real]]
        return TokenBatch(torch.from_numpy(tokens), torch.from_numpy(lengths.astype(np.int64)))


@dataclass(frozen=True)
class TextStats:
    """What a text source trains and evaluates on: the lines it prints when first built."""

    path: Path
    eval_path: Path | None
    documents: int  # of data.path
    held_out: int  # documents held out for eval: of data.path, or all of data.eval_path's
    every: int  # without data.eval_path: every `every`-th document is held out, at most eval_samples
    eval_samples: int
    train_tokens: int  # ids of the training documents, each one's EOS included
    held_out_tokens: int
    train_sequences: int
    context: int
    vocab: int  # the tokenizer's real size: the LM's token table
    target_vocab: int  # workload_options.vocab, which a small corpus leaves the tokenizer below

    def lines(self) -> list[str]:
        if self.eval_path is not None:
            first = (
                f"text data: {self.documents:,} documents in {self.path.name} to train on, {self.held_out:,} "
                f"held out in {self.eval_path.name} (data.eval_path)"
            )
        else:
            how = f"every {_ordinal(self.every)} document, at most eval.samples={self.eval_samples:,}"
            if self.held_out * 4 > self.documents:  # a quarter or more never trains
                how += "; a lower eval.samples or a data.eval_path leaves more to train on"
            first = (
                f"text data: {self.documents:,} documents in {self.path.name}: {self.held_out:,} held out for eval "
                f"({how}), {self.documents - self.held_out:,} to train on"
            )
        below = f" (below workload_options.vocab={self.target_vocab:,}: the text ran out of pairs to merge)"
        second = (
            f"  tokens: {self.train_tokens:,} to train on ({self.train_sequences:,} sequences of at most "
            f"{self.context}), {self.held_out_tokens:,} held out; vocabulary: {self.vocab:,} ids"
        )
        return [first, second + (below if self.vocab < self.target_vocab else "")]


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _stats(
    data: DataConfig,
    corpus: TextCorpus,
    held: Mask,
    train_sequences: int,
    *,
    context: int,
    target_vocab: int,
    eval_samples: int,
) -> TextStats:
    """The stats of a source over `corpus`, whose documents of data.path `held` marks held out
    (eval_samples of them, every k-th: `_held_out`)."""
    assert data.path is not None
    docs, held_file = corpus.documents, corpus.eval_documents
    if held_file is None:
        held_out, held_out_tokens = int(held.sum()), int(docs.lengths[held].sum())
    else:
        held_out, held_out_tokens = len(held_file), int(held_file.lengths.sum())
    return TextStats(
        path=data.path,
        eval_path=data.eval_path,
        documents=len(docs),
        held_out=held_out,
        every=max(2, len(docs) // eval_samples) if eval_samples else 0,
        eval_samples=eval_samples,
        train_tokens=int(docs.lengths[~held].sum()),
        held_out_tokens=held_out_tokens,
        train_sequences=train_sequences,
        context=context,
        vocab=corpus.tokenizer.get_vocab_size(),
        target_vocab=target_vocab,
    )


_ANNOUNCED: set[TextStats] = set()  # the stats this process has printed: each once


def _announce(stats: TextStats) -> None:
    """Print `stats` on stderr, where a run's progress goes, once per process: validation, the
    loop and the estimator each build the source."""
    if stats not in _ANNOUNCED:
        _ANNOUNCED.add(stats)
        print("\n".join(stats.lines()), file=sys.stderr, flush=True)


class TextSource:
    """A DataSource over a file of documents (see the module docstring)."""

    pooling: int

    def __init__(self, data: DataConfig, *, vocab: int, context: int, eval_samples: int) -> None:
        assert data.path is not None, "a validated text config"
        corpus = text_corpus(data, vocab, eval_samples)
        self.tokenizer = corpus.tokenizer
        self.table_sizes: tuple[int, ...] = (corpus.tokenizer.get_vocab_size(),)
        self.context = self.pooling = context
        docs = corpus.documents
        _check_count(data.path, len(docs), eval_samples)
        held = _held_out(len(docs), eval_samples)
        starts, lengths = _pieces(docs.starts[~held], docs.lengths[~held], context)
        if len(starts) < 2:
            fix = "lower eval.samples, give data.eval_path or give more text" if held.any() else "give more text"
            raise DataError(
                f"{data.path}: gives {len(starts)} training sequence(s) of at least 2 ids, from {int((~held).sum())} "
                f"training document(s); a run needs at least 2: {fix}"
            )
        # one fixed shuffle: consecutive sequences are one document's pieces, or one stretch of the file
        order = np.random.default_rng(data.seed).permutation(len(starts))
        self._train = _Sequences(docs.ids, starts[order], lengths[order])
        if corpus.eval_documents is None:
            self._eval = _Sequences(docs.ids, *_pieces(docs.starts[held], docs.lengths[held], context))
        elif len(corpus.eval_documents):
            evals = corpus.eval_documents
            self._eval = _Sequences(evals.ids, *_pieces(evals.starts, evals.lengths, context))
        else:
            raise DataError(
                f"{data.eval_path}: has no documents (it is empty, or every line is blank); give held-out text, "
                "or drop data.eval_path to hold documents of data.path out"
            )
        self.stats = _stats(
            data, corpus, held, len(starts), context=context, target_vocab=vocab, eval_samples=eval_samples
        )
        _announce(self.stats)

    @property
    def train_sequences(self) -> int:
        return len(self._train)

    @property
    def eval_sequences(self) -> int:
        return len(self._eval)

    def read(self, start: int, n: int) -> TokenBatch:
        check_range(start, n)
        rows = (start + np.arange(n, dtype=np.int64)) % len(self._train)
        return self._train.batch(rows, self.context)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[TokenBatch]:
        n = min(n, len(self._eval))
        for start in range(0, n, batch_size):
            yield self._eval.batch(slice(start, min(start + batch_size, n)), self.context)


def check_text_data(data: DataConfig, *, vocab: int, context: int, eval_samples: int) -> TextSource:
    """Every problem validation can find before a run starts (DataError naming the file and line):
    the source built as a run builds it, every line of every file read, the tokenizer trained and
    the documents tokenized: the cache the run's processes then load."""
    return TextSource(data, vocab=vocab, context=context, eval_samples=eval_samples)


# ----------------------------------------------------------------------------------------------
# The artifact: the tokenizer beside a checkpoint and on a sweep's MLflow run
# ----------------------------------------------------------------------------------------------


def _settings(config: Mapping[str, Any]) -> tuple[DataConfig, int, int] | None:
    """(data, vocab, held-out documents) of a run config given as a plain dict; None if it does
    not read text. The tokenizer depends on more than `data`: the LM's vocab and eval.samples."""
    data = config.get("data")
    if not isinstance(data, Mapping) or data.get("source") != "text":
        return None
    cfg = RunConfig.model_validate(config)
    # the LM's option (validated with the config that ran); read here, as data knows no workload
    vocab = int(cfg.workload_options.get("vocab", DEFAULT_VOCAB))
    return cfg.data, vocab, 0 if cfg.data.eval_path else cfg.eval.samples


def tokenizer_of(config: Mapping[str, Any]) -> str | None:
    """The tokenizer JSON of a run config given as a plain dict (a checkpoint's, a sweep spec's
    base); None for a config that does not read text."""
    settings = _settings(config)
    return None if settings is None else text_tokenizer(*settings).to_str()


def tokenizer_artifact(config: Mapping[str, Any]) -> DataArtifact | None:
    text = tokenizer_of(config)
    if text is None:
        return None
    return DataArtifact(
        name="tokenizer",
        text=text,
        suffix=".tokenizer.json",
        mlflow_path="tokenizer/tokenizer.json",
        changed="data.path's documents now tokenize to other ids (the file, or what trains the tokenizer, "
        "changed since)",
        ids=lambda raw: raw,  # the whole tokenizer: vocabulary, merges, special tokens, pre-tokenizer
    )


# ----------------------------------------------------------------------------------------------
# Synthetic text: no files, a learnable rule
# ----------------------------------------------------------------------------------------------

CHUNK = 1024  # sequences per generated chunk


class SyntheticText:
    """Token sequences with a realistic length spread and a learnable structure (implements
    DataSource): lengths are log-normal around `mean_length` (sigma 0.8, as documents are),
    clipped to [2, context]; a token follows its predecessor by a fixed rule (t -> 7t + 3 mod V)
    with probability 0.6, else is drawn Zipf-skewed. A pure function of position: sequence k comes
    from chunk k // CHUNK, seeded by (seed, split, chunk)."""

    pooling: int
    synthetic = True  # a stand-in: its reads are left out of samples/s on a CPU device (training/throughput.py)

    def __init__(self, vocab: int, context: int, mean_length: float, seed: int = 0) -> None:
        self.vocab, self.context, self.mean_length, self.seed = vocab, context, mean_length, seed
        self.table_sizes: tuple[int, ...] = (vocab,)
        self.pooling = context
        ranks = np.arange(1, vocab, dtype=np.float64)  # id 0 is PAD, never a token
        self._zipf = ranks**-1.1 / (ranks**-1.1).sum()
        self._recent: dict[tuple[int, int], TokenBatch] = {}

    def read(self, start: int, n: int) -> TokenBatch:
        return self._read(0, start, n)

    def eval_batches(self, n: int, batch_size: int) -> Iterator[TokenBatch]:
        for start in range(0, n, batch_size):
            yield self._read(1, start, min(batch_size, n - start))

    def _read(self, split: int, start: int, n: int) -> TokenBatch:
        if start < 0 or n < 0:
            raise ValueError(f"read(start={start}, n={n}): start and n must be >= 0")
        parts = []
        for index in range(start // CHUNK, (start + n - 1) // CHUNK + 1) if n else ():
            lo, hi = max(start - index * CHUNK, 0), min(start + n - index * CHUNK, CHUNK)
            chunk = self._chunk(split, index)
            parts.append(TokenBatch(chunk.tokens[lo:hi], chunk.lengths[lo:hi]))
        if not parts:
            return TokenBatch(torch.zeros(0, self.context, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
        return TokenBatch(torch.cat([p.tokens for p in parts]), torch.cat([p.lengths for p in parts]))

    def _chunk(self, split: int, index: int) -> TokenBatch:
        key = (split, index)
        if key not in self._recent:
            if len(self._recent) >= 4:
                self._recent.pop(next(iter(self._recent)))
            self._recent[key] = self._generate(split, index)
        return self._recent[key]

    def lengths(self, start: int, n: int) -> np.ndarray:
        """The lengths of training sequences [start, start + n), without generating their tokens."""
        first, last = start // CHUNK, (start + n - 1) // CHUNK
        drawn = np.concatenate(
            [self._draw_lengths(np.random.default_rng([self.seed, 0, i])) for i in range(first, last + 1)]
        )
        return drawn[start - first * CHUNK : start - first * CHUNK + n]

    def _draw_lengths(self, rng: np.random.Generator) -> np.ndarray:
        sigma = 0.8
        mu = math.log(self.mean_length) - sigma**2 / 2  # the log-normal's mean is mean_length
        return np.clip(np.rint(rng.lognormal(mu, sigma, CHUNK)), 2, self.context).astype(np.int64)

    def _generate(self, split: int, index: int) -> TokenBatch:
        rng = np.random.default_rng([self.seed, split, index])
        lengths = self._draw_lengths(rng)  # first from the chunk's generator: `lengths` draws the same
        drawn = rng.choice(self.vocab - 1, (CHUNK, self.context), p=self._zipf) + 1
        follow = rng.random((CHUNK, self.context)) < 0.6
        tokens = np.empty((CHUNK, self.context), dtype=np.int64)
        tokens[:, 0] = drawn[:, 0]
        for t in range(1, self.context):  # one column at a time: each token may follow the last
            rule = (tokens[:, t - 1] * 7 + 3) % (self.vocab - 1) + 1
            tokens[:, t] = np.where(follow[:, t], rule, drawn[:, t])
        tokens[np.arange(self.context)[None, :] >= lengths[:, None]] = PAD
        return TokenBatch(torch.from_numpy(tokens), torch.from_numpy(lengths))
