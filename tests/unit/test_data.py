"""elastune.data.clicks: the synthetic Criteo stream and the TSV / Parquet readers."""

from __future__ import annotations

import math
import random
import re
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from elastune.data.clicks import (
    CRITEO_KAGGLE_CARDINALITIES,
    NUM_DENSE,
    NUM_SPARSE,
    ClickBatch,
    hash_category,
    table_sizes,
)
from elastune.data.criteo import CriteoParquet, CriteoTSV
from elastune.data.source import DataSource
from elastune.data.synthetic import SyntheticCriteo
from elastune.errors import DataError, InputError
from hypothesis import given, settings
from hypothesis import strategies as st

SMALL = table_sizes(0.01)


def cat(*batches: ClickBatch) -> ClickBatch:
    return ClickBatch(
        torch.cat([b.dense for b in batches]),
        torch.cat([b.sparse for b in batches]),
        torch.cat([b.labels for b in batches]),
    )


def assert_same(a: ClickBatch, b: ClickBatch) -> None:
    assert len(a) == len(b)
    assert torch.equal(a.dense, b.dense)
    assert torch.equal(a.sparse, b.sparse)
    assert torch.equal(a.labels, b.labels)


def assert_valid(batch: ClickBatch, sizes: Sequence[int], pooling: int) -> None:
    n = len(batch)
    assert batch.dense.dtype == torch.float32 and batch.dense.shape == (n, NUM_DENSE)
    assert batch.sparse.dtype == torch.int64 and batch.sparse.shape == (n, len(sizes), pooling)
    assert batch.labels.dtype == torch.float32 and batch.labels.shape == (n,)
    assert torch.isfinite(batch.dense).all() and (batch.dense >= 0).all()
    assert set(batch.labels.unique().tolist()) <= {0.0, 1.0}
    upper = torch.tensor(sizes).view(1, -1, 1)
    assert (batch.sparse >= 0).all() and (batch.sparse < upper).all()


@pytest.fixture(scope="module")
def synth() -> SyntheticCriteo:
    # A small chunk so that modest reads cross many chunk boundaries.
    return SyntheticCriteo(SMALL, chunk=1000)


# ---------------------------------------------------------------------------------- basics


def test_table_sizes_scale_the_criteo_cardinalities() -> None:
    assert table_sizes(1.0) == CRITEO_KAGGLE_CARDINALITIES
    assert len(SMALL) == NUM_SPARSE == 26
    expected = tuple(max(2, math.ceil(c * 0.01)) for c in CRITEO_KAGGLE_CARDINALITIES)
    assert expected == SMALL
    assert SMALL[2] == 101313 and SMALL[8] == 2  # 3 rows * 0.01 still gets the minimum of 2
    assert min(table_sizes(1e-9)) == 2
    with pytest.raises(ValueError):
        table_sizes(0.0)


def test_batch_len_and_slice_are_views() -> None:
    b = SyntheticCriteo(SMALL).read(0, 10)
    part = b.slice(2, 5)
    assert len(b) == 10 and len(part) == 3
    assert part.sparse.data_ptr() == b.sparse[2].data_ptr()  # a view, not a copy
    assert torch.equal(part.labels, b.labels[2:5])
    moved = b.to("meta")
    assert moved.dense.device.type == moved.sparse.device.type == moved.labels.device.type == "meta"
    assert moved.sparse.shape == b.sparse.shape and moved.sparse.dtype == torch.int64


def test_hash_category_is_stable_hex_modulo_and_missing_is_zero() -> None:
    assert hash_category("68fd1e64", 1000) == 0x68FD1E64 % 1000 == 852
    assert hash_category("68FD1E64", 1000) == 852
    assert hash_category("", 1000) == 0
    assert all(0 <= hash_category(f"{v:08x}", 7) < 7 for v in range(0, 2**32, 2**28))
    with pytest.raises(ValueError):
        hash_category("not-hex", 10)


def test_sources_implement_the_protocol(tmp_path: Path) -> None:
    tsv = write_tsv(tmp_path / "d.tsv", [row(1)])
    pqt = write_parquet(tmp_path / "d.parquet", [row(1)])
    for source in (SyntheticCriteo(SMALL), CriteoTSV(tsv, SMALL), CriteoParquet(pqt, SMALL)):
        assert isinstance(source, DataSource)


# ---------------------------------------------------------------------------------- synthetic


def test_synthetic_shapes_dtypes_and_ranges(synth: SyntheticCriteo) -> None:
    b = synth.read(0, 5000)
    assert_valid(b, SMALL, pooling=1)
    assert synth.pooling == 1 and synth.table_sizes == SMALL
    zeros = (b.dense == 0).float().mean(0)
    assert (zeros > 0).any() and (zeros < 0.9).all()  # some missing counts, never all
    assert (b.dense.std(0) > 0.1).all()  # every dense column varies
    assert b.dense.max() > math.log1p(1000)  # heavy tail: some huge counts
    assert b.sparse[:, 2].unique().numel() > 500  # the 101k table is really sampled
    chunks = b.sparse.view(5, 1000, NUM_SPARSE)
    for i in range(5):  # every chunk of 1000 samples is new data, not a repeat
        assert all(not torch.equal(chunks[i], chunks[j]) for j in range(i))


@pytest.mark.parametrize(
    ("start", "a", "b"),
    [(0, 1, 1), (0, 999, 2), (0, 1000, 1000), (998, 3, 2500), (1500, 700, 301), (12345, 4000, 1)],
)
def test_read_is_split_invariant(synth: SyntheticCriteo, start: int, a: int, b: int) -> None:
    whole = synth.read(start, a + b)
    assert_same(whole, cat(synth.read(start, a), synth.read(start + a, b)))
    # ... and independent of read order / cache state: a fresh source, read backwards.
    fresh = SyntheticCriteo(SMALL, chunk=1000)
    second = fresh.read(start + a, b)
    assert_same(whole, cat(fresh.read(start, a), second))


@settings(max_examples=25, deadline=None)
@given(
    start=st.integers(0, 5000),
    cuts=st.lists(st.integers(0, 50), min_size=1, max_size=6),
)
def test_read_equals_any_sequence_of_smaller_reads(start: int, cuts: list[int]) -> None:
    source = SyntheticCriteo(SMALL, chunk=17, pooling=2)
    whole = source.read(start, sum(cuts))
    parts, at = [], start
    for n in cuts:
        parts.append(source.read(at, n))
        at += n
    assert_same(whole, cat(*parts))


def test_read_returns_copies_not_cached_state(synth: SyntheticCriteo) -> None:
    b = synth.read(100, 50)
    expected = b.sparse.clone()
    b.sparse.zero_()
    b.dense.add_(1.0)
    assert torch.equal(synth.read(100, 50).sparse, expected)


def test_same_seed_same_stream_other_seed_other_stream() -> None:
    a, b, c = (SyntheticCriteo(SMALL, seed=s) for s in (0, 0, 1))
    assert_same(a.read(777, 3000), b.read(777, 3000))
    x, z = a.read(0, 3000), c.read(0, 3000)
    assert not torch.equal(x.sparse, z.sparse)
    assert not torch.equal(x.dense, z.dense)
    assert not torch.equal(x.labels, z.labels)


def test_eval_is_a_different_stream_and_the_same_every_call(synth: SyntheticCriteo) -> None:
    ev = cat(*synth.eval_batches(2500, 1000))
    train = synth.read(0, 2500)
    assert len(ev) == 2500
    assert not torch.equal(ev.sparse, train.sparse)
    assert not torch.equal(ev.dense, train.dense)
    assert_same(ev, cat(*synth.eval_batches(2500, 333)))  # batch size does not change it
    batches = list(synth.eval_batches(2500, 1000))
    assert [len(b) for b in batches] == [1000, 1000, 500]
    assert_same(synth.read(0, 2500), train)  # eval reads did not disturb training reads


def test_zipf_ids_are_skewed_and_hot_ids_are_scattered() -> None:
    source = SyntheticCriteo(SMALL, zipf_alpha=1.15)
    n_rows = SMALL[2]  # 101,313 rows
    ids = source.read(0, 100_000).sparse[:, 2, 0]
    counts = torch.bincount(ids, minlength=n_rows).sort(descending=True).values
    top_share = counts[: n_rows // 100].sum().item() / len(ids)
    assert top_share > 0.6  # top 1% of rows take most lookups (about 0.75 in theory)
    hottest = torch.bincount(ids, minlength=n_rows).argsort(descending=True)[:100]
    # a rank-ordered layout would put all 100 hottest rows in the first 0.1% of the table
    assert (hottest < n_rows // 10).float().mean() < 0.5
    assert hottest.float().std() > n_rows / 10

    flat = SyntheticCriteo(SMALL, zipf_alpha=0.5).read(0, 100_000).sparse[:, 2, 0]
    flat_counts = torch.bincount(flat, minlength=n_rows).sort(descending=True).values
    assert flat_counts[: n_rows // 100].sum().item() / len(flat) < top_share / 2


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.0 + 1e-12, 2.5])
def test_any_alpha_gives_valid_ids(alpha: float) -> None:
    b = SyntheticCriteo(SMALL, zipf_alpha=alpha).read(0, 4000)
    assert_valid(b, SMALL, pooling=1)


def test_full_size_tables_cost_no_table_sized_memory() -> None:
    full = table_sizes(1.0)
    tracemalloc.start()
    try:
        source = SyntheticCriteo(full)
        b = source.read(0, 4096)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert_valid(b, full, pooling=1)
    assert peak < 150 * 2**20  # a table-sized array for the 10M table alone would be 80 MB
    assert b.sparse[:, 2].max() > 2**20  # ids reach far into the 10M-row table


def test_pooling_gives_bags_of_ids() -> None:
    source = SyntheticCriteo(SMALL, pooling=4, chunk=500)
    b = source.read(250, 1000)
    assert_valid(b, SMALL, pooling=4)
    assert not torch.equal(b.sparse[:, 2, 0], b.sparse[:, 2, 1])  # P independent draws
    assert_same(b, cat(source.read(250, 251), source.read(501, 749)))


def test_positive_rate_and_teacher_auc_are_criteo_like(synth: SyntheticCriteo) -> None:
    assert 0.20 <= synth.positive_rate(100_000) <= 0.35
    assert 0.20 <= synth.read(0, 20_000).labels.mean().item() <= 0.35
    assert 0.78 <= synth.teacher_auc(100_000) <= 0.90
    other = SyntheticCriteo(table_sizes(0.001), zipf_alpha=1.0, seed=7)
    assert 0.20 <= other.positive_rate(50_000) <= 0.35


def test_a_simple_learner_finds_much_of_the_signal_quickly() -> None:
    """A wide model (a bias per id + linear dense) trained on 120k samples beats AUC 0.70."""
    from sklearn.metrics import roc_auc_score

    torch.manual_seed(0)
    source = SyntheticCriteo(SMALL)
    offsets = torch.tensor([0, *np.cumsum(SMALL)[:-1].tolist()]).view(1, -1, 1)
    bias = torch.nn.EmbeddingBag(sum(SMALL), 1, mode="sum")
    torch.nn.init.zeros_(bias.weight)
    dense = torch.nn.Linear(NUM_DENSE, 1)
    opt = torch.optim.Adagrad([*bias.parameters(), *dense.parameters()], lr=0.1)

    def logits(b: ClickBatch) -> torch.Tensor:
        flat = (b.sparse + offsets).view(len(b), -1)
        return (bias(flat) + dense(b.dense)).squeeze(1)

    for step in range(60):
        b = source.read(step * 2048, 2048)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits(b), b.labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    ev = cat(*source.eval_batches(20_000, 10_000))
    with torch.no_grad():
        auc = roc_auc_score(ev.labels.numpy(), logits(ev).numpy())
    assert auc > 0.70


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        SyntheticCriteo(SMALL, pooling=0)
    with pytest.raises(ValueError):
        SyntheticCriteo(SMALL, zipf_alpha=0.0)
    with pytest.raises(ValueError):
        SyntheticCriteo([0, 5])
    with pytest.raises(ValueError):
        SyntheticCriteo(SMALL).read(-1, 5)
    assert len(SyntheticCriteo(SMALL).read(10, 0)) == 0


# ---------------------------------------------------------------------------------- files

SIZES = (1000,) * 13 + (7,) * 13  # small tables so the modulo is visible


def row(label: int, ints: Sequence[str] | None = None, cats: Sequence[str] | None = None) -> list[str]:
    """One Criteo row as its 40 text fields."""
    ints = list(ints) if ints is not None else [str(label + j) for j in range(NUM_DENSE)]
    cats = list(cats) if cats is not None else [f"{label * 97 + j:08x}" for j in range(NUM_SPARSE)]
    return [str(label), *ints, *cats]


def write_tsv(path: Path, rows: Sequence[Sequence[str]]) -> Path:
    path.write_text("".join("\t".join(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: Sequence[Sequence[str]], *, int_cats: bool = False) -> Path:
    names = ["label", *(f"I{j}" for j in range(1, 14)), *(f"C{j}" for j in range(1, 27))]
    cols: dict[str, pa.Array] = {"label": pa.array([int(r[0]) for r in rows], pa.int8())}
    for j in range(1, 14):
        cols[f"I{j}"] = pa.array([int(r[j]) if r[j] else None for r in rows], pa.int64())
    for j in range(14, 40):
        values = [r[j] or None for r in rows]
        if int_cats:
            cols[names[j]] = pa.array([int(v, 16) if v else None for v in values], pa.int64())
        else:
            cols[names[j]] = pa.array(values, pa.string())
    pq.write_table(pa.table(cols), path, row_group_size=4)
    return path


def expected_batch(rows: Sequence[Sequence[str]], sizes: Sequence[int] = SIZES) -> ClickBatch:
    ints = [[max(int(v), 0) if v else 0 for v in r[1:14]] for r in rows]
    ids = [[int(v, 16) % s if v else 0 for v, s in zip(r[14:], sizes, strict=True)] for r in rows]
    return ClickBatch(
        torch.log1p(torch.tensor(ints, dtype=torch.float64)).float(),
        torch.tensor(ids, dtype=torch.int64).unsqueeze(2),
        torch.tensor([float(r[0]) for r in rows]),
    )


MIXED_ROWS = [
    row(1),
    row(0, ints=["", "-3", "5", "0", "123456789", *["7"] * 8]),  # missing, negative, big
    row(1, cats=["", "68fd1e64", "FFFFFFFF", *["0"] * 23]),  # missing, mixed case
    *(row(i % 2) for i in range(3, 12)),
]


@pytest.mark.parametrize("fmt", ["tsv", "parquet", "parquet-int-cats"])
def test_file_round_trip(tmp_path: Path, fmt: str) -> None:
    if fmt == "tsv":
        source: CriteoTSV | CriteoParquet = CriteoTSV(write_tsv(tmp_path / "d.tsv", MIXED_ROWS), SIZES)
    else:
        path = write_parquet(tmp_path / "d.parquet", MIXED_ROWS, int_cats=fmt.endswith("int-cats"))
        source = CriteoParquet(path, SIZES)
        source.block_rows = 5  # several record batches
    b = source.read(0, len(MIXED_ROWS))
    assert_valid(b, SIZES, pooling=1)
    assert_same(b, expected_batch(MIXED_ROWS))
    assert b.dense[1, 1] == 0.0  # -3 clamped
    assert b.sparse[2, 1, 0] == 0x68FD1E64 % 1000 and b.sparse[2, 0, 0] == 0  # hashed, missing
    assert b.sparse[2, 2, 0] == 0xFFFFFFFF % 1000
    assert source.pooling == 1


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
def test_file_reads_wrap_around_and_are_split_invariant(tmp_path: Path, fmt: str) -> None:
    rows = [row(i % 2, ints=[str(i)] * 13) for i in range(10)]
    make = file_source_factory(tmp_path, fmt, rows)
    source = make()
    two_epochs = source.read(0, 25)
    assert_same(two_epochs.slice(0, 10), two_epochs.slice(10, 20))  # epoch 2 == epoch 1
    assert_same(two_epochs.slice(0, 10), expected_batch(rows))
    # split anywhere, including across the end of the file and out of order
    for start, a, b in [(0, 3, 4), (8, 4, 9), (3, 0, 5), (17, 13, 2)]:
        fresh = make()
        whole = fresh.read(start, a + b)
        assert_same(whole, cat(source.read(start, a), source.read(start + a, b)))
    assert_same(source.read(5, 3), two_epochs.slice(5, 8))  # a backwards seek reopens the file


def file_source_factory(
    tmp_path: Path, fmt: str, rows: Sequence[Sequence[str]], eval_samples: int = 0
) -> Callable[[], CriteoTSV | CriteoParquet]:
    """Writes `rows` as `fmt` and returns a maker of fresh sources over the file."""
    if fmt == "tsv":
        tsv = write_tsv(tmp_path / "w.tsv", rows)
        return lambda: CriteoTSV(tsv, SIZES, eval_samples=eval_samples)
    parquet = write_parquet(tmp_path / "w.parquet", rows)

    def make() -> CriteoParquet:
        source = CriteoParquet(parquet, SIZES, eval_samples=eval_samples)
        source.block_rows = 3  # several record batches, and reads that cross them
        return source

    return make


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ("1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12", "expected 40 tab-separated fields"),
        ("\t".join(row(2)), "label must be 0 or 1, found '2'"),
        ("\t".join(row(1, ints=["1", "x1", *["0"] * 11])), "I2 must be an integer"),
        ("\t".join(row(1, cats=["0"] * 25 + ["zz"])), "C26 must be a hex string"),
        ("", "found 1"),
    ],
)
def test_malformed_tsv_line_names_file_line_problem_and_fix(tmp_path: Path, bad_line: str, problem: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("\t".join(row(1)) + "\n" + "\t".join(row(0)) + "\n" + bad_line + "\n")
    source = CriteoTSV(path, SIZES)
    with pytest.raises(DataError) as info:
        source.read(0, 3)
    message = str(info.value)
    assert f"{path}:3:" in message
    assert problem in message
    assert "skip_malformed" in message
    assert isinstance(info.value, InputError)


def test_the_documented_field_count_message(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "short.tsv", [row(1), ["1"] * 12])
    with pytest.raises(
        DataError,
        match=r"short\.tsv:2: expected 40 tab-separated fields "
        r"\(label, 13 integer, 26 categorical\), found 12; fix the file or set "
        r"data\.skip_malformed=true",
    ):
        CriteoTSV(path, SIZES).read(0, 2)


def test_skip_malformed_skips_and_counts_each_line_once(tmp_path: Path) -> None:
    good = [row(i % 2, ints=[str(i)] * 13) for i in range(6)]
    lines = [good[0], ["1", "2"], good[1], good[2], row(5), good[3], good[4], good[5]]
    path = write_tsv(tmp_path / "some-bad.tsv", lines)
    source = CriteoTSV(path, SIZES, skip_malformed=True)
    assert_same(source.read(0, 6), expected_batch(good))
    assert source.malformed_lines == 2
    source.read(6, 12)  # two more epochs re-read the same bad lines
    assert source.malformed_lines == 2


@pytest.mark.parametrize("skip", [False, True])
def test_tsv_malformed_lines_across_read_blocks_keep_their_line_numbers(tmp_path: Path, skip: bool) -> None:
    good = [row(i % 2, ints=[str(i)] * 13) for i in range(40)]
    lines: list[list[str]] = []
    bad_at = {7: ["1", "2"], 19: row(3), 20: [""], 33: row(1, cats=["0"] * 25 + ["zz"])}  # 1-based lines
    it = iter(good)
    for n in range(1, len(good) + len(bad_at) + 1):
        lines.append(bad_at.get(n) or next(it))
    path = write_tsv(tmp_path / "blocks.tsv", lines)
    source = CriteoTSV(path, SIZES, skip_malformed=skip)
    source.block_bytes = 700  # a few rows per Arrow block, so bad lines fall in different blocks
    if not skip:
        with pytest.raises(DataError, match=r"blocks\.tsv:7: expected 40 tab-separated fields .*found 2"):
            source.read(0, 10)
        return
    assert_same(source.read(0, 40), expected_batch(good))
    assert source.malformed_lines == 4


def test_tsv_bad_bytes_and_crlf(tmp_path: Path) -> None:
    rows = [row(1), row(0)]
    crlf = tmp_path / "crlf.tsv"
    crlf.write_bytes(b"".join("\t".join(r).encode() + b"\r\n" for r in rows))
    assert_same(CriteoTSV(crlf, SIZES).read(0, 2), expected_batch(rows))
    raw = tmp_path / "bytes.tsv"
    bad = "\t".join(row(1, ints=["1", "2", *["0"] * 11])).encode().replace(b"\t2\t", b"\t2\xff\t", 1)
    raw.write_bytes("\t".join(row(0)).encode() + b"\n" + bad + b"\n")
    with pytest.raises(DataError, match=r"bytes\.tsv:2: I2 must be an integer or empty, found '2\ufffd'"):
        CriteoTSV(raw, SIZES).read(0, 2)


def test_malformed_parquet_row_names_file_and_row(tmp_path: Path) -> None:
    rows = [row(i % 2) for i in range(9)]
    path = tmp_path / "bad.parquet"
    write_parquet(path, rows)
    table = pq.read_table(path)
    labels = table.column("label").to_pylist()
    labels[6] = 3
    table = table.set_column(0, "label", pa.array(labels, pa.int8()))
    pq.write_table(table, path, row_group_size=4)
    with pytest.raises(DataError, match=re.escape(f"{path}:7: column label: the label must be 0")):
        CriteoParquet(path, SIZES).read(0, 9)
    skipping = CriteoParquet(path, SIZES, skip_malformed=True)
    assert_same(skipping.read(0, 8), expected_batch(rows[:6] + rows[7:]))
    assert skipping.malformed_lines == 1


def test_parquet_without_criteo_columns_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"label": [0, 1], "x": [1, 2]}), path)
    with pytest.raises(DataError, match="missing column"):
        CriteoParquet(path, SIZES)
    not_parquet = write_tsv(tmp_path / "text.parquet", [row(1)])
    with pytest.raises(DataError, match="not a readable Parquet file"):
        CriteoParquet(not_parquet, SIZES)


@pytest.mark.parametrize("reader", [CriteoTSV, CriteoParquet])
def test_missing_file_is_a_data_error_naming_the_path(tmp_path: Path, reader: type) -> None:
    missing = tmp_path / "nope" / "train.data"
    with pytest.raises(DataError, match=r"train\.data: no such file"):
        reader(missing, SIZES)
    existing = write_tsv(tmp_path / "t.tsv", [row(1)])
    with pytest.raises(DataError, match=r"held\.data: no such file"):
        reader(existing, SIZES, eval_path=tmp_path / "held.data")


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
def test_held_out_eval_rows_are_disjoint_from_training(tmp_path: Path, fmt: str) -> None:
    rows = [row(i % 2, ints=[str(i)] * 13) for i in range(10)]
    source = file_source_factory(tmp_path, fmt, rows, eval_samples=4)()
    ev = cat(*source.eval_batches(4, 3))
    assert_same(ev, expected_batch(rows[:4]))
    assert_same(cat(*source.eval_batches(4, 4)), ev)  # the same every call
    train = source.read(0, 12)
    assert_same(train.slice(0, 6), expected_batch(rows[4:]))  # training starts after eval rows
    assert_same(train.slice(6, 12), expected_batch(rows[4:]))  # and wraps to there, not row 0
    with pytest.raises(DataError, match="eval_samples=4"):
        list(source.eval_batches(5, 5))


def test_eval_path_is_the_eval_set(tmp_path: Path) -> None:
    train_rows = [row(1, ints=["1"] * 13)] * 5
    eval_rows = [row(0, ints=[str(i)] * 13) for i in range(3)]
    train = write_tsv(tmp_path / "train.tsv", train_rows)
    held = write_tsv(tmp_path / "eval.tsv", eval_rows)
    source = CriteoTSV(train, SIZES, eval_path=held)
    assert_same(cat(*source.eval_batches(3, 2)), expected_batch(eval_rows))
    assert_same(source.read(0, 5), expected_batch(train_rows))
    with pytest.raises(DataError, match="has only 3 valid rows"):
        list(source.eval_batches(4, 2))


def test_file_with_too_few_rows_for_eval_is_a_data_error(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "tiny.tsv", [row(1), row(0)])
    with pytest.raises(DataError, match="no valid training rows after the 2 held out"):
        CriteoTSV(path, SIZES, eval_samples=2).read(0, 1)
    with pytest.raises(DataError, match="has only 2 valid rows, fewer than the 3 held out"):
        CriteoTSV(path, SIZES, eval_samples=3).read(0, 1)
    empty = write_tsv(tmp_path / "empty.tsv", [])
    with pytest.raises(DataError, match="no valid training rows"):
        CriteoTSV(empty, SIZES).read(0, 1)


def test_gzipped_tsv_reads_like_plain(tmp_path: Path) -> None:
    import gzip

    rows = MIXED_ROWS[:4]
    gz = tmp_path / "d.tsv.gz"
    with gzip.open(gz, "wt") as f:
        f.write("".join("\t".join(r) + "\n" for r in rows))
    assert_same(CriteoTSV(gz, SIZES).read(0, 4), expected_batch(rows))


@pytest.mark.parametrize("seed", range(4))
def test_the_column_reader_reads_what_the_line_parser_reads(tmp_path: Path, seed: int) -> None:
    """The TSV reader converts whole columns (pyarrow); every line must come out as the
    line-by-line parser `_parse_tsv_line` (Python's int) reads it: odd but valid values (`+5`,
    ` 7`, `0x1f`, 20-digit hex, huge counts), missing ones, and malformed lines skipped and counted."""
    from elastune.data.criteo import _Malformed, _parse_tsv_line

    rng = random.Random(seed)
    odd_ints = ["+5", " 7", "-0", "00012", "1_000", "99999999999999999999999", "x1", "٣", "1.5", ""]
    odd_hex = ["0x1f", "ABCDEF", "f" * 20, "0" * 16, " a", "zz", "g1", ""]
    lines = []
    for _ in range(400):
        ints = [rng.choice(odd_ints) if rng.random() < 0.1 else str(rng.randint(-3, 10**6)) for _ in range(NUM_DENSE)]
        cats = [rng.choice(odd_hex) if rng.random() < 0.1 else f"{rng.getrandbits(32):08x}" for _ in range(NUM_SPARSE)]
        label = rng.choice(["0", "1", "1", "0", "2"]) if rng.random() < 0.2 else rng.choice(["0", "1"])
        fields = [label, *ints, *cats]
        if rng.random() < 0.03:
            fields = fields[: rng.randint(0, 39)]
        lines.append("\t".join(fields))
    path = tmp_path / "odd.tsv"
    path.write_text("\n".join(lines) + "\n")
    parsed = []
    for line in lines:
        try:
            parsed.append(_parse_tsv_line(line, SIZES))
        except _Malformed:
            continue
    source = CriteoTSV(path, SIZES, skip_malformed=True)
    got = source.read(0, len(parsed))
    assert source.malformed_lines == len(lines) - len(parsed) > 0
    counts = np.maximum(np.array([p[1] for p in parsed], dtype=np.float64), 0.0)
    assert torch.equal(got.dense, torch.from_numpy(np.log1p(counts).astype(np.float32)))
    assert torch.equal(got.sparse, torch.tensor([p[2] for p in parsed], dtype=torch.int64).unsqueeze(2))
    assert torch.equal(got.labels, torch.tensor([float(p[0]) for p in parsed]))
