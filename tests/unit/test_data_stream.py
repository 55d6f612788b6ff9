"""`reader_bytes` (memory/data_stream.py): the Criteo TSV reader's host memory, from the file's text
and the reader's own buffers; the measured check is tests/integration/test_estimate_real_data.py."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

from elastune.config import RunConfig
from elastune.data.files import READ_CHUNK
from elastune.memory.data_stream import ARROW_FIRST_USE, CONVERTED_ROW_BYTES, reader_bytes

from tests.unit.test_data import row, write_tsv

MakeCfg = Callable[..., RunConfig]


def test_the_synthetic_stream_adds_nothing_to_the_fitted_runtime(tiny_cfg: MakeCfg) -> None:
    assert reader_bytes(tiny_cfg()) == 0


def test_a_file_under_one_block_is_held_whole_by_each_of_two_streams(tiny_cfg: MakeCfg, tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "d.tsv", [row(1)] * 1000)  # 1000 lines of one width
    text = path.stat().st_size
    # per stream: the text read ahead and the 1 MiB buffer before pyarrow; the parsed columns (the
    # text less 40 separators a row, plus 40 int32 offsets a row); the converted block
    stream = text + READ_CHUNK + text + 1000 * (40 * 4 - 40) + 1000 * CONVERTED_ROW_BYTES
    scratch = text + 1000 * 2 * 40 * 4  # pyarrow's parser: a copy of the lines, their fields' offsets twice
    cfg = tiny_cfg("data.source=criteo_tsv", f"data.path={path}")
    assert reader_bytes(cfg) == ARROW_FIRST_USE + 2 * stream + scratch


def test_a_gzipped_file_is_priced_as_its_text(tiny_cfg: MakeCfg, tmp_path: Path) -> None:
    plain = write_tsv(tmp_path / "d.tsv", [row(i % 2) for i in range(5000)])
    packed = tmp_path / "d.tsv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert packed.stat().st_size < plain.stat().st_size / 4
    priced = [reader_bytes(tiny_cfg("data.source=criteo_tsv", f"data.path={p}")) for p in (plain, packed)]
    assert priced[0] == priced[1]
