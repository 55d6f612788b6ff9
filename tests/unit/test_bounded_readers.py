"""Readers have bounded memory: a line over data.max_document_bytes is refused by its number before
it is read whole, and a gzip bomb after inflating no more than that (data/files.py).

The big files (100 MB lines, a 3 MB gzip of 3 GiB) are read by `elastune train` in a child process,
whose peak resident memory is measured (`ru_maxrss`, by the child itself); the child also runs under
an address-space cap, a safety net so that a reader that does hold the line whole fails here
instead of taking the shared machine's memory. The bounds, both sides of them, are checked in
process on small files with the smallest limit, 1 KiB. Every file is generated in tmp_path.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from elastune.config import DataConfig
from elastune.data import table as table_source
from elastune.data import text as text_source
from elastune.data.criteo import CriteoParquet, CriteoTSV
from elastune.data.files import bounded_lines, open_bounded
from elastune.errors import ConfigError, DataError
from elastune.validate import load_run_config
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tests.conftest import TINY
from tests.unit.test_data import SIZES, assert_same, expected_batch, row, write_tsv
from tests.unit.test_data import write_parquet as write_criteo_parquet
from tests.unit.test_table_source import SCHEMA, rows, write_csv, write_parquet
from tests.unit.test_text_source import LM, documents, write_txt

PEAK = 1 << 30  # what reading a file that is refused may cost the process, at most (it starts at ~0.3 GiB)
CAP = 6 << 30  # the child's address space: the safety net (the old readers needed 4.5 and 11 GB here)
BIG = 100 << 20  # the long line
LIMIT = 1 << 10  # the smallest data.max_document_bytes, for the in-process bounds


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ELASTUNE_HOME (vocabularies and tokenizers are cached there), and no tokenizer or
    corpus remembered from another test."""
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(text_source, "_TOKENIZERS", {})
    monkeypatch.setattr(text_source, "_CORPORA", {})
    return tmp_path / "home"


# ----------------------------------------------------------------------------------------------
# A 100 MB line and a gzip bomb, through `elastune train`, in a child whose peak is measured
# ----------------------------------------------------------------------------------------------

_CHILD = """
import resource, sys
from elastune.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))  # Linux: KiB
sys.exit(code)
"""


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _train_in_child(tmp_path: Path, sets: list[str]) -> tuple[int, str, int]:
    """(exit code, what it printed, peak resident bytes) of `elastune train --set ...` in a child."""
    peak = tmp_path / "peak.txt"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(peak), "train", *[a for s in sets for a in ("--set", s)]],
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=_cap_address_space,
    )
    said = done.stdout + done.stderr
    assert peak.is_file(), f"the child died (exit {done.returncode}): {said[-3000:]}"
    return done.returncode, said, int(peak.read_text())


@pytest.fixture
def big(tmp_path: Path) -> Iterator[Path]:
    """A folder for the big files, emptied after the test (the machine's disk is shared)."""
    folder = tmp_path / "big"
    folder.mkdir()
    yield folder
    for path in folder.iterdir():
        path.unlink()


def _write_long_line(f: object, size: int) -> None:
    """`size` bytes of words, 1 MiB at a time: the test process never holds the line either."""
    chunk = ("the cat sat on the mat " * ((1 << 20) // 23 + 1))[: 1 << 20].encode()
    for _ in range(size // len(chunk)):
        f.write(chunk)  # type: ignore[attr-defined]


def _gzip_bomb(path: Path, head: bytes) -> Path:
    """`head`, then 3 GiB of zero bytes with no line end, in about 3 MB: one gzip member of 64 MiB
    of zeros, compressed once and written 48 times (a file of several members reads as one stream,
    for gzip.open as for `gzip -d`), so it is made in a fraction of a second."""
    zeros = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
    with path.open("wb") as f:
        f.write(gzip.compress(head))
        for _ in range(48):
            f.write(zeros)
    assert path.stat().st_size < 4 << 20
    return path


def _assert_refused(code: int, said: str, peak: int, path: Path, line: int) -> None:
    assert code == 2, said[-3000:]
    assert peak < PEAK, f"peak {peak / 2**20:.0f} MiB: {said[-3000:]}"
    for text in ("data.path", str(path), f"line {line} ", "data.max_document_bytes=16,777,216", "split the"):
        assert text in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]


def _lm_sets(path: Path, eval_path: Path) -> list[str]:
    # eval_path: a file of one document is refused for holding out, so that a reader that let the
    # long line through goes on to train the tokenizer on it (the old readers: 11 GB for 100 MB)
    return [*LM, "data.source=text", f"data.path={path}", f"data.eval_path={eval_path}"]


def test_a_100mb_jsonl_line_is_refused_by_its_number_within_a_bounded_peak(tmp_path: Path, big: Path) -> None:
    path = big / "long.jsonl"
    with path.open("wb") as f:
        f.write(b'{"text": "a first document"}\n{"text": "a second one"}\n{"text": "')
        _write_long_line(f, BIG)
        f.write(b'"}\n')
    evals = write_txt(tmp_path / "eval.txt", documents(300))
    code, said, peak = _train_in_child(tmp_path, _lm_sets(path, evals))
    _assert_refused(code, said, peak, path, line=3)


@pytest.mark.parametrize("where", ["header", "row"])
def test_a_100mb_csv_line_is_refused_by_its_number_within_a_bounded_peak(tmp_path: Path, big: Path, where: str) -> None:
    path = big / "long.csv"
    with path.open("wb") as f:
        if where == "header":  # the header is read first, by the csv module
            _write_long_line(f, BIG)
            f.write(b",y,x1,x2,city,device,tags\n1,0.5,3,c1,1,t1\n")
        else:  # a row, read by pyarrow
            f.write(b"y,x1,x2,city,device,tags\n1,0.5,3,c1,1,t1\n0,0.1,4,c2,2,t2\n1,0.2,5,")
            _write_long_line(f, BIG)
            f.write(b",1,t3\n")
    code, said, peak = _train_in_child(tmp_path, [*TINY, "data.source=table", f"data.path={path}", SCHEMA])
    _assert_refused(code, said, peak, path, line=1 if where == "header" else 4)


@pytest.mark.parametrize("name", ["bomb.txt.gz", "bomb.csv.gz"])
def test_a_gzip_bomb_is_refused_after_inflating_no_more_than_the_limit(tmp_path: Path, big: Path, name: str) -> None:
    if name.endswith(".txt.gz"):  # the bomb as a document, line 2
        path = _gzip_bomb(big / name, b"a first document\n")
        sets, line = _lm_sets(path, write_txt(tmp_path / "eval.txt", documents(300))), 2
    else:  # the bomb as the header, read by the csv module
        path = _gzip_bomb(big / name, b"")
        sets, line = [*TINY, "data.source=table", f"data.path={path}", SCHEMA], 1
    code, said, peak = _train_in_child(tmp_path, sets)
    _assert_refused(code, said, peak, path, line=line)


# ----------------------------------------------------------------------------------------------
# The bound, both sides of it, in every reader
# ----------------------------------------------------------------------------------------------


def _padded(prefix: str, suffix: str, size: int, pad: str = "w") -> str:
    """prefix + pad... + suffix, `size` bytes in all (ASCII)."""
    assert len(prefix) + len(suffix) <= size
    return prefix + pad * (size - len(prefix) - len(suffix)) + suffix


def _words(size: int) -> str:
    """A document of words, exactly `size` bytes."""
    return ("the cat sat on the mat " * (size // 23 + 1))[:size]


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
@pytest.mark.parametrize("fmt", ["txt", "jsonl.gz"])
def test_text_lines_at_the_limit_are_read_and_one_byte_more_is_refused(tmp_path: Path, fmt: str, ending: str) -> None:
    docs = documents(300)

    def corpus(size: int) -> Path:
        if fmt == "txt":
            lines = [*docs[:7], _words(size), *docs[7:]]
        else:
            lines = [json.dumps({"text": d}) for d in docs]
            lines.insert(7, '{"text": "' + _words(size - len('{"text": "') - len('"}')) + '"}')
        assert len(lines[7].encode()) == size
        path = tmp_path / f"c{size}.{fmt}"
        text = "".join(line + ending for line in lines).encode()
        path.write_bytes(gzip.compress(text) if fmt.endswith(".gz") else text)
        return path

    sets = [*LM, "data.source=text", "data.max_document_bytes=1KiB"]
    cfg = load_run_config(None, [*sets, f"data.path={corpus(LIMIT)}"])
    assert cfg.data.max_document_bytes == LIMIT
    over = corpus(LIMIT + 1)
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [*sets, f"data.path={over}"])
    for text in ("data.path", str(over), "line 8 is 1,025 bytes", "data.max_document_bytes=1,024", "split the"):
        assert text in str(err.value), err.value


@pytest.mark.parametrize("where", ["header", "row"])
@pytest.mark.parametrize("suffix", [".csv", ".tsv.gz"])
def test_table_lines_at_the_limit_are_read_and_one_byte_more_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, where: str
) -> None:
    # no usual 1 MiB block: pyarrow's block is the one the limit asks for, which must hold the line
    monkeypatch.setattr(table_source, "CSV_BLOCK_BYTES", 1)
    plain = write_csv(tmp_path / "rows.csv", rows(600)).read_text().splitlines()
    sep = "\t" if suffix.startswith(".tsv") else ","

    def table(size: int) -> Path:
        lines = [line.replace(",", sep) for line in plain]
        if where == "header":  # a long name of a column the schema does not read
            lines[0] = _padded(lines[0] + sep, "", size, pad="h")
            lines[1:] = [line + sep for line in lines[1:]]
        else:  # a long city (seen once: the vocabulary gives it the rare row)
            cells = lines[300].split(sep)
            cells[3] = ""
            cells[3] = "c" * (size - len(sep.join(cells)))
            lines[300] = sep.join(cells)
        assert len(lines[0 if where == "header" else 300].encode()) == size
        text = "".join(line + "\r\n" for line in lines).encode()
        path = tmp_path / f"t{size}{suffix}"
        path.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
        return path

    sets = [*TINY, "data.source=table", SCHEMA, "eval.samples=256", "data.max_document_bytes=1024"]
    read = load_run_config(None, [*sets, f"data.path={table(LIMIT)}"])
    assert read.data.max_document_bytes == LIMIT
    over = table(LIMIT + 1)
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [*sets, f"data.path={over}"])
    line = 1 if where == "header" else 301
    for text in ("data.path", str(over), f"line {line} is 1,025 bytes", "data.max_document_bytes=1,024"):
        assert text in str(err.value), err.value


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_criteo_lines_at_the_limit_are_read_and_one_byte_more_is_refused(tmp_path: Path, ending: str) -> None:
    def file(size: int) -> tuple[Path, list[list[str]]]:
        lines = [row(i % 2) for i in range(12)]
        long = row(1)
        long[-1] = "0" * (size - len("\t".join(long))) + long[-1]  # leading zeros: the same hex value
        lines[5] = long
        assert len("\t".join(lines[5])) == size
        path = tmp_path / f"c{size}.tsv"
        path.write_bytes("".join("\t".join(r) + ending for r in lines).encode())
        return path, lines

    path, lines = file(LIMIT)
    assert_same(CriteoTSV(path, SIZES, max_document_bytes=LIMIT).read(0, 12), expected_batch(lines))
    over, _ = file(LIMIT + 1)
    for skip in (False, True):  # a line over the bound is not a malformed row to skip
        source = CriteoTSV(over, SIZES, max_document_bytes=LIMIT, skip_malformed=skip)
        with pytest.raises(DataError, match=rf"{over}: line 6 is 1,025 bytes: data.max_document_bytes=1,024"):
            source.read(0, 12)


def test_a_criteo_file_is_read_with_the_configs_bound(tmp_path: Path) -> None:
    """The config's data.max_document_bytes reaches the Criteo readers the workload builds."""
    from elastune.workloads import build_workload

    lines = [row(i % 2) for i in range(12)]
    lines[5][-1] = "0" * (LIMIT + 1 - len("\t".join(lines[5]))) + lines[5][-1]
    path = write_tsv(tmp_path / "criteo.tsv", lines)
    sets = [*TINY, "data.source=criteo_tsv", f"data.path={path}", "data.max_document_bytes=1KiB"]
    source = build_workload(load_run_config(None, sets)).data_source()
    with pytest.raises(DataError, match=r"line 6 is 1,025 bytes: data\.max_document_bytes=1,024"):
        source.read(0, 12)


def test_lines_at_the_limit_are_read_wherever_pyarrows_blocks_fall(tmp_path: Path) -> None:
    """pyarrow refuses a row that is not inside one read block ("straddling object"), so the block
    is sized from the limit: lines of exactly the limit, ended by "\\r\\n", starting at offsets
    spread over a block, are all read (with the reader's usual 1 MiB block set aside)."""
    rng = random.Random(5)
    lines = []
    for i in range(600):
        short, long = row(i % 2), row(1)
        short[-1] = "0" * rng.randint(0, 600) + short[-1]  # the next line starts elsewhere in a block
        long[-1] = "0" * (LIMIT - len("\t".join(long))) + long[-1]
        lines += [short, long]
    path = tmp_path / "c.tsv"
    path.write_bytes("".join("\t".join(r) + "\r\n" for r in lines).encode())
    source = CriteoTSV(path, SIZES, max_document_bytes=LIMIT)
    source.block_bytes = 1  # no usual block: the one the limit asks for
    assert_same(source.read(0, len(lines)), expected_batch(lines))


def test_lines_at_a_limit_past_pyarrows_usual_block_are_read(tmp_path: Path) -> None:
    """pyarrow refuses a row that is not inside one read block ("straddling object"): with a limit
    of 2 MiB, twice the readers' usual 1 MiB block, a 2 MiB line must still be read, wherever the
    blocks fall (a long first line, a long line further on)."""
    limit = 2 << 20
    for at in (0, 5):
        lines = [row(i % 2) for i in range(12)]
        lines[at][-1] = "0" * (limit - len("\t".join(lines[at]))) + lines[at][-1]
        path = write_tsv(tmp_path / f"criteo{at}.tsv", lines)
        assert_same(CriteoTSV(path, SIZES, max_document_bytes=limit).read(0, 12), expected_batch(lines))
    table = write_csv(tmp_path / "rows.csv", rows(600)).read_text().splitlines()
    cells = table[300].split(",")
    cells[3] = ""
    cells[3] = "c" * (limit - len(",".join(cells)))
    table[300] = ",".join(cells)
    path = tmp_path / "long.csv"
    path.write_text("".join(line + "\n" for line in table))
    sets = [*TINY, "data.source=table", SCHEMA, "eval.samples=256", "data.max_document_bytes=2MiB"]
    assert load_run_config(None, [*sets, f"data.path={path}"]).data.max_document_bytes == limit


@pytest.mark.parametrize("suffix", [".tsv.gz", ".tsv.bz2", ".tsv.zst"])
def test_compressed_criteo_files_are_inflated_as_they_are_read(tmp_path: Path, suffix: str) -> None:
    """.gz, and the .bz2 / .zst pyarrow's CSV reader inflated by the name before the guard came
    between them: read as the plain file, and bounded the same."""
    lines = [row(i % 2) for i in range(12)]
    good = tmp_path / f"good{suffix}"
    long = tmp_path / f"long{suffix}"
    codec = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}[Path(suffix).suffix]
    for path, text in ((good, lines), (long, [*lines[:3], ["1"] * (LIMIT // 2 + 1)])):
        with pa.output_stream(str(path), compression=codec) as f:
            f.write("".join("\t".join(r) + "\n" for r in text).encode())
    assert_same(CriteoTSV(good, SIZES, max_document_bytes=LIMIT).read(0, 12), expected_batch(lines))
    with pytest.raises(DataError, match=rf"{long}: line 4 is 1,025 bytes"):
        CriteoTSV(long, SIZES, max_document_bytes=LIMIT).read(0, 4)


def test_parquet_values_at_the_limit_are_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    def table(size: int, column: str) -> Path:
        data = rows(600)
        if column == "city":
            data["city"][400] = _padded("c", "", size)
        else:  # a list whose items together are over: each of them is short
            data["tags"][400] = [_padded("t", "", size // 4)] * 3 + [_padded("t", "", size - 3 * (size // 4))]
        return write_parquet(tmp_path / f"{column}{size}.parquet", data)

    sets = [*TINY, "data.source=table", SCHEMA, "eval.samples=256", "data.max_document_bytes=1KiB"]
    for column in ("city", "tags"):
        load_run_config(None, [*sets, f"data.path={table(LIMIT, column)}"])
        over = table(LIMIT + 1, column)
        with pytest.raises(ConfigError, match=rf"{over}: row 401: column '{column}' holds 1,025 bytes"):
            load_run_config(None, [*sets, f"data.path={over}"])
    lines = [row(i % 2) for i in range(9)]
    lines[6][-1] = "0" * LIMIT + lines[6][-1]
    path = write_criteo_parquet(tmp_path / "criteo.parquet", lines)
    with pytest.raises(DataError, match=rf"{path}: row 7: column 'C26' holds 1,032 bytes"):
        CriteoParquet(path, SIZES, max_document_bytes=LIMIT).read(0, 9)


# ----------------------------------------------------------------------------------------------
# The helper: its line accounting against a plain split, and the config field
# ----------------------------------------------------------------------------------------------


def _random_file(rng: random.Random) -> bytes:
    """Lines of lengths around the limit, with every line ending the readers meet, and a last line
    with or without one."""
    lengths = [0, 1, 5, 1000, 1022, 1023, 1024, 1025, 2000, 3000]
    parts = [b"q" * rng.choice(lengths) + rng.choice([b"\n", b"\r\n", b"\r", b"\r\r\n", b"\n\r"]) for _ in range(8)]
    parts = parts[: rng.randint(0, 8)]
    if rng.random() < 0.5:
        parts.append(b"w" * rng.choice([0, 3, 1023, 1024, 1025]) + rng.choice([b"", b"\r"]))
    return b"".join(parts)


def _first_over(data: bytes, ends: bytes) -> int | None:
    """The first line over LIMIT, by a plain split: lines end at "\\n" (a "\\r" before it is part of
    the ending), or with `ends` = rb"\\r\\n|\\r|\\n" at any of the three."""
    lines = re.split(ends, data)
    if ends == b"\n":
        lines = [line[:-1] if line.endswith(b"\r") and k < len(lines) - 1 else line for k, line in enumerate(lines)]
    return next((k + 1 for k, line in enumerate(lines) if len(line) > LIMIT), None)


@pytest.mark.parametrize("cr", [False, True], ids=["lf", "cr-lf-or-cr"])
def test_the_guard_finds_the_first_line_over_the_limit_as_a_plain_split_does(tmp_path: Path, cr: bool) -> None:
    rng = random.Random(7)
    for trial in range(300):
        data = _random_file(rng)
        want = _first_over(data, rb"\r\n|\r|\n" if cr else b"\n")
        for path in (tmp_path / "f.txt", tmp_path / "f.txt.gz"):
            path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
            got = b""
            try:
                with open_bounded(path, LIMIT, cr_ends_lines=cr) as f:
                    while part := f.read(rng.choice([1, 700, 5000])):  # reads of any size
                        got += part
            except DataError as exc:
                assert f"line {want} " in str(exc), (trial, want, str(exc))
                continue
            assert want is None, (trial, want)
            assert got == data, trial  # the bytes pass unchanged


def test_bounded_lines_are_the_lines_without_their_endings(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    path.write_bytes(b"a\r\nb\n\nc\r\rd\r")
    assert list(bounded_lines(path, LIMIT)) == [(1, b"a"), (2, b"b"), (3, b""), (4, b"c\r\rd\r")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "must be above 0 bytes"),
        ("-5", "must be above 0 bytes"),
        ("2TiB", "is 2199023255552 bytes"),
        (".nan", "must be a finite size"),
        ("1023", "is 1023 bytes"),
        ("lots", "is not a size"),
    ],
)
def test_max_document_bytes_is_a_bounded_size(value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"data.max_document_bytes={value}"])
    said = str(err.value)
    for text in ("data.max_document_bytes=", expected, "1KiB to 1GiB"):
        assert text in said, said


def test_max_document_bytes_reads_sizes_and_defaults_to_16_mib() -> None:
    assert DataConfig().max_document_bytes == 16 * 1024 * 1024
    for value, size in (("1KiB", 1024), ("64KiB", 65536), ("1.5MB", 1_500_000), ("1GiB", 1 << 30)):
        assert load_run_config(None, [f"data.max_document_bytes={value}"]).data.max_document_bytes == size


# ----------------------------------------------------------------------------------------------
# The tokenizer takes a long document in pieces, with the same result as whole
# ----------------------------------------------------------------------------------------------


def test_long_documents_in_pieces_train_and_encode_as_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces keep the tokenizer's memory bounded (a document whole costs it ~100x its size); cut
    only where a pre-token starts, they change nothing: the same merges, the same ids. Checked
    against `tokenizers` given the documents whole, on text with contractions, runs of spaces,
    tabs, newlines, digits, punctuation, non-Latin scripts, an emoji and "<eos>"."""
    monkeypatch.setattr(text_source, "PIECE_CHARS", 64)  # cut every few words
    rng = random.Random(3)
    words = ["the", "cat", "it's", "we'll", "naïve", "東京", "123", "4.5", "<eos>", "—", "x_y", "ÉCOLE", "²",
             "a\tb", "  ", "\n", "!!", "'s", "🙂", "١٢٣"]  # fmt: skip
    spaces = [" ", " ", " ", "", "  ", "\t", " '"]
    docs = ["".join(rng.choice(words) + rng.choice(spaces) for _ in range(rng.randint(1, 2000))) for _ in range(40)]
    assert sum(len(list(text_source._cut(d))) for d in docs) > 10 * len(docs)  # it does cut
    assert all("".join(text_source._cut(d)) == d for d in docs)

    def tokenizer(texts: Iterator[str]) -> Tokenizer:
        t = Tokenizer(models.BPE(unk_token="<unk>"))
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        t.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=["<pad>", "<unk>", "<eos>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        t.train_from_iterator(texts, trainer=trainer)
        t.encode_special_tokens = True
        return t

    whole = tokenizer(iter(docs))
    assert tokenizer(piece for d in docs for piece in text_source._cut(d)).to_str() == whole.to_str()
    want = [i for d in docs for i in [*whole.encode(d, add_special_tokens=False).ids, text_source.EOS]]
    assert text_source._encode(whole, docs).tolist() == want


def test_a_document_long_enough_to_be_cut_reads_as_it_would_whole(tmp_path: Path) -> None:
    """End to end: a corpus with documents longer than PIECE_CHARS gives the ids of its documents
    tokenized whole by the tokenizer it trained."""
    docs = [*documents(300), *(_words(5 * text_source.PIECE_CHARS + k) for k in range(3))]
    assert len(list(text_source._cut(docs[-1]))) >= 5
    path = write_txt(tmp_path / "long.txt", docs)
    data = DataConfig.model_validate({"source": "text", "path": str(path)})
    corpus = text_source.text_corpus(data, 300, 0)
    want = [i for d in docs for i in [*corpus.tokenizer.encode(d, add_special_tokens=False).ids, text_source.EOS]]
    assert corpus.documents.ids.tolist() == want
    assert len(corpus.documents) == len(docs)
