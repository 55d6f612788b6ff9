"""Host memory a file reader holds beyond the traced tensors: `reader_bytes(cfg)`.

The trace (trace.py) feeds the step fake batches of the configured shape: it counts the batch a
step trains on, not the reader that made it. The CPU heap model's `runtime` (overhead.py) was
fitted on the synthetic stream, which computes each batch from its position and holds ~6.5 MiB of
its own (measured: 50 reads and an evaluation at micro 1024 and 4096, pinned heap). The Criteo TSV
reader (data/criteo.py `CriteoTSV`) holds far more, all of it after the probe's baseline (the loop
opens the source before it, but a file source reads nothing until the first step):

- pyarrow's machinery, set up on first use: the compute function registry, the CSV reader's IO
  thread, and the library pages both fault in. `ARROW_FIRST_USE`: measured on a 10-row file
  (pyarrow 25.0.1: 51 MiB, 15 of them file-backed pages, which the CPU probe counts), less the
  synthetic stream's share of `runtime`, which a file source replaces.
- per open stream (`_Text.stream_bytes`), from the reader's own buffers:
  - the text read ahead: pyarrow's streaming CSV reader reads the file on its IO thread up to 34
    blocks ahead of the parser (measured: 544 MiB of 16 MiB blocks; Arrow's background queue holds
    32 of them, which no option changes, ARROW-12090). A block is `block_size(max_document_bytes,
    1 MiB)`, 16 MiB at the default max_document_bytes, so a file under 544 MiB is held whole;
    and the 1 MiB buffer between the file and pyarrow (files.READ_CHUNK).
  - pyarrow's parsed columns of the block being handed out and of the one it parses ahead: 40
    binary columns, i.e. the text less its 40 separators a row, plus 40 int32 offsets a row.
  - the reader's conversion of the block being handed out (`CONVERTED_ROW_BYTES`): the float64
    counts, int64 ids, labels and line numbers its generator keeps while the block's rows are
    handed out, and the block's ClickBatch.
- two streams at the peak: the evaluation opens one of its own (of data.eval_path, or of the
  training file from its start) while the training stream stays open, and a training stream that
  runs out opens the next epoch's before it drops its own.
- pyarrow's parser's scratch for one block, which its memory pool keeps for the next: a copy of the
  block's values and two sets of 40 field offsets a row (measured: the pool peaks 556 bytes a row
  above what it keeps, for 7 and 16 MiB blocks of 238-byte rows).

Measured against `elastune train` (fresh processes, 50 steps, eval.samples=1024) on Criteo TSV files
converted from a public dataset (tests/data/kr_vs_kp/: 0.7 MB, and its rows repeated up to 73 MB):
default, micro 4096 and int8 configs within -3% to +9% of the highest of 1-4 runs each, where they
were 15-88% under without this term; the hashed strategy 22% over, as on synthetic data (24%: the
heap model's own miss). At 725 MB, past the read-ahead's bound, 14% over: an evaluation of 1,024
samples ends before its stream's read-ahead has filled. Other file sources (parquet, table, text)
are not measured: 0 here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elastune.config import RunConfig
from elastune.data.clicks import NUM_DENSE, NUM_SPARSE
from elastune.data.criteo import CriteoTSV
from elastune.data.files import ARROW_CODECS, READ_CHUNK, block_size, open_bounded

__all__ = ["ARROW_FIRST_USE", "CONVERTED_ROW_BYTES", "READ_AHEAD_BLOCKS", "reader_bytes"]

_MiB = 2**20
ARROW_FIRST_USE = 51 * _MiB - int(6.5 * _MiB)  # pyarrow set up, less the synthetic stream's share of `runtime`
READ_AHEAD_BLOCKS = 34  # text blocks pyarrow's streaming CSV reader holds (measured; see above)
_FIELDS = 1 + NUM_DENSE + NUM_SPARSE  # columns per row: label, counts, categoricals
_PARSED_EXTRA_ROW_BYTES = _FIELDS * 4 - _FIELDS  # int32 offsets per column, less the separators dropped
CONVERTED_ROW_BYTES = (
    NUM_DENSE * 8 + NUM_SPARSE * 8 + 8 + 8 + 2  # kept by the generator: counts, ids, labels, line numbers, masks
    + NUM_DENSE * 4 + NUM_SPARSE * 8 + 4  # the block's ClickBatch: float32 dense, int64 ids, float32 labels
)  # fmt: skip
_PARSE_SCRATCH_ROW_BYTES = 2 * _FIELDS * 4  # beside a copy of the line: its 40 field offsets, twice (measured)
_WIDTH_SAMPLE = 1 << 20  # bytes of a file's head that give its mean line width


def reader_bytes(cfg: RunConfig) -> int:
    """Resident bytes the data reader of `cfg` holds at the run's peak beyond what the trace and
    the heap model's fitted `runtime` count (see the module docstring); 0 for the synthetic stream
    and for the file sources not measured."""
    d = cfg.data
    if d.source != "criteo_tsv" or d.path is None:
        return 0
    block = block_size(d.max_document_bytes, CriteoTSV.block_bytes)
    files = [_Text.of(p, block, d.max_document_bytes) for p in (d.path, d.eval_path) if p is not None]
    training = files[0].stream_bytes(block)
    # the second stream: the evaluation's, or, with its own eval file, the next epoch's if larger
    second = max(f.stream_bytes(block) for f in files)
    return ARROW_FIRST_USE + training + second + max(f.parse_scratch(block) for f in files)


@dataclass(frozen=True)
class _Text:
    """A data file's text as the reader meets it: its bytes (inflated) and mean line width."""

    size: int
    width: int

    @classmethod
    def of(cls, path: Path, block: int, max_line: int) -> _Text:
        """A plain file's size; a .gz file's is the size its trailer records, at least the
        compressed size (the trailer counts modulo 4 GiB, and for the last member only); the other
        codecs' is not known without inflating the whole file, so the read-ahead's bound stands in
        for it. The width is the mean of the lines in the file's first MiB."""
        path = Path(path).expanduser()
        with open_bounded(path, max_line, cr_ends_lines=True) as f:
            head = f.read(_WIDTH_SAMPLE)
        width = max(1, len(head) // max(1, head.count(b"\n"), head.count(b"\r")))
        size = path.stat().st_size
        suffix = path.suffix.lower()
        if suffix == ".gz":
            size = max(size, _gzip_trailer_size(path))
        elif suffix in ARROW_CODECS:
            size = READ_AHEAD_BLOCKS * block
        return cls(size, width)

    def stream_bytes(self, block: int) -> int:
        """What one open stream holds: the text read ahead, the parsed columns of the block in hand
        and of the next, and the block in hand converted."""
        parsed = min(self.size, 2 * block)
        read_ahead = min(self.size, READ_AHEAD_BLOCKS * block) + READ_CHUNK
        columns = parsed + parsed // self.width * _PARSED_EXTRA_ROW_BYTES
        return read_ahead + columns + self._rows_in_hand(block) * CONVERTED_ROW_BYTES

    def parse_scratch(self, block: int) -> int:
        """pyarrow's parser's scratch for one block, which its pool keeps for the next."""
        return self._rows_in_hand(block) * (self.width + _PARSE_SCRATCH_ROW_BYTES)

    def _rows_in_hand(self, block: int) -> int:
        return min(self.size, block) // self.width


def _gzip_trailer_size(path: Path) -> int:
    with open(path, "rb") as f:
        f.seek(-4, 2)
        return int.from_bytes(f.read(4), "little")
