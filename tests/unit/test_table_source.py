"""`data.source: table`: the user's own columns from CSV or Parquet (data/table.py).

Every file is generated here, in tmp_path; every ELASTUNE_HOME (where vocabularies are cached) too.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import torch
from elastune.cli import main
from elastune.config import RunConfig
from elastune.data.clicks import concat_batches
from elastune.data.source import DataSource
from elastune.data.table import RARE_ID, TableSource, hash_id, table_layout, vocabulary_file
from elastune.errors import ConfigError
from elastune.memory.trace import distinct_rows
from elastune.validate import load_run_config
from elastune.workloads import build_workload

from tests.conftest import TINY

SCHEMA = "data.schema={label: y, dense: [x1, x2], categorical: [city, device], multi_hot: {tags: 3}}"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def rows(n: int, seed: int = 0) -> dict[str, list[object]]:
    """A planted signal: y ~ Bernoulli(sigmoid(2 x1 + the city's effect + 1.5 [t3 in tags] - 1)).
    Cities are skewed (c0 is the most frequent); some cells are missing; tag lists run to 5 items."""
    rng = np.random.default_rng(seed)
    effect = {f"c{k}": (2.0 if k % 2 else -2.0) for k in range(12)}
    out: dict[str, list[object]] = {k: [] for k in ("y", "x1", "x2", "city", "device", "tags")}
    for i in range(n):
        x1 = float(np.round(rng.normal(), 3))
        city = f"c{min(int(rng.zipf(1.6)) - 1, 11)}"
        tags = [f"t{int(t)}" for t in rng.integers(0, 8, size=int(rng.integers(0, 6)))]
        logit = 2 * x1 + effect[city] + (1.5 if "t3" in tags else 0.0) - 1.0
        out["y"].append(int(rng.random() < 1 / (1 + math.exp(-logit))))
        out["x1"].append(x1)
        out["x2"].append(None if i % 7 == 0 else int(rng.integers(0, 100)))
        out["city"].append(city)
        out["device"].append(None if i % 11 == 0 else int(rng.integers(0, 3)))
        out["tags"].append(tags)
    return out


def write_csv(path: Path, data: dict[str, list[object]]) -> Path:
    cols = list(data)
    lines = [",".join(cols)]
    for i in range(len(data["y"])):
        cells = []
        for c in cols:
            v = data[c][i]
            cells.append("|".join(map(str, v)) if isinstance(v, list) else "" if v is None else str(v))
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_parquet(path: Path, data: dict[str, list[object]]) -> Path:
    pq.write_table(pa.table(data), path, row_group_size=97)  # small row groups: many record batches
    return path


def cfg_for(path: Path, *sets: str) -> RunConfig:
    return load_run_config(None, [*TINY, "data.source=table", f"data.path={path}", SCHEMA, "eval.samples=256", *sets])


def source(cfg: RunConfig) -> DataSource:
    return build_workload(cfg).data_source()


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))


# ---- the source contract -----------------------------------------------------------------------


def test_reads_are_a_pure_function_of_position_and_epochs_wrap(tmp_path: Path) -> None:
    cfg = cfg_for(write_csv(tmp_path / "d.csv", rows(700)))
    src = source(cfg)
    assert isinstance(src, TableSource) and src.held_out == 256
    whole = src.read(100, 900)  # past the end of the 444 training rows: wraps
    parts = concat_batches([source(cfg).read(100, 7), src.read(107, 500), src.read(607, 393)])
    for field in ("dense", "sparse", "labels"):
        assert same(getattr(whole, field), getattr(parts, field))
    assert same(src.read(5, 10).sparse, src.read(5 + 444, 10).sparse)  # epoch = the training rows
    assert same(src.read(3, 4).dense, source(cfg).read(3, 4).dense)
    assert whole.dense.shape == (900, 2) and whole.sparse.shape == (900, 3, 3) and whole.labels.dtype == torch.float32


def test_eval_is_the_held_out_head_or_eval_path_and_never_trained_on(tmp_path: Path) -> None:
    data = rows(600)
    cfg = cfg_for(write_csv(tmp_path / "d.csv", data))
    src = source(cfg)
    held = concat_batches(list(src.eval_batches(256, 100)))
    assert held.labels.tolist() == [float(v) for v in data["y"][:256]]
    first_train = src.read(0, 5)
    assert first_train.dense[:, 0].tolist() == pytest.approx(data["x1"][256:261])
    other = rows(300, seed=5)
    cfg2 = cfg_for(tmp_path / "d.csv", f"data.eval_path={write_csv(tmp_path / 'e.csv', other)}")
    src2 = source(cfg2)
    assert src2.read(0, 1).dense[0, 0].item() == pytest.approx(data["x1"][0])  # all of path trains
    ev = concat_batches(list(src2.eval_batches(256, 64)))
    assert ev.labels.tolist() == [float(v) for v in other["y"][:256]]


# ---- vocabulary --------------------------------------------------------------------------------


def test_vocabulary_counts_rare_bucket_and_unseen_values(tmp_path: Path, home: Path) -> None:
    train = tmp_path / "t.csv"
    train.write_text("y,x1,x2,city,device,tags\n" + "".join(
        f"{i % 2},{i},,{c},{d},{t}\n"
        for i, (c, d, t) in enumerate(
            [("b", 1, "p|q"), ("a", 1, "q"), ("b", 2, ""), ("a", 1, "q|q|r|s"), ("b", 2, "p"), ("z", 9, "q")] * 1
            + [("a", 1, "q")] * 2
        )
    ))  # fmt: skip
    unseen = tmp_path / "u.csv"
    unseen.write_text("y,x1,x2,city,device,tags\n1,0,0,new,1,q|never\n0,0,0,,2,\n")
    cfg = cfg_for(train, f"data.eval_path={unseen}", "data.min_count=2")
    layout = table_layout(cfg.data)
    vocab = layout.vocabulary
    assert vocab is not None
    # kept: count >= 2, by descending count then value; ids from 2; z (seen once) is rare
    assert vocab.columns["city"] == ["a", "b"] and vocab.counts["city"] == [4, 3] and vocab.rare["city"] == 1
    assert vocab.columns["device"] == ["1", "2"] and vocab.rare["device"] == 1
    assert vocab.columns["tags"] == ["q", "p"] and vocab.counts["tags"] == [7, 2] and vocab.rare["tags"] == 2
    assert vocab.truncated["tags"] == 1 and vocab.rows == 8
    assert layout.sizes == (4, 4, 4) and layout.names == ("city", "device", "tags")
    stored = json.loads(vocabulary_file(cfg.data).read_text())
    assert stored["columns"]["city"]["values"] == ["a", "b"] and stored["rows"] == 8

    ev = next(source(cfg).eval_batches(2, 2))
    assert ev.sparse[0, :, :].tolist() == [[RARE_ID, 0, 0], [2, 0, 0], [2, RARE_ID, 0]]  # unseen -> 1
    assert ev.sparse[1, :, :].tolist() == [[0, 0, 0], [3, 0, 0], [0, 0, 0]]  # missing -> 0 (padding)
    src = source(cfg)
    got = src.read(0, 8)
    assert got.sparse[3, 2].tolist() == [2, 2, RARE_ID]  # q q r|s cut at 3 ids; r is rare
    assert got.sparse[5, 0, 0].item() == RARE_ID  # z was seen once: the rare bucket
    assert src.truncated_rows == 1
    src.read(0, 16)  # a second epoch re-reads the row, but it is counted once
    assert src.truncated_rows == 1


def test_vocabulary_is_deterministic_and_cached_by_fingerprint(tmp_path: Path, home: Path) -> None:
    path = write_csv(tmp_path / "d.csv", rows(500))
    cfg = cfg_for(path)
    first = table_layout(cfg.data)
    cached = vocabulary_file(cfg.data)
    assert cached.is_file() and cached.parent == home / "vocabularies"
    # The same file in another process: the cache, not a new pass. Proof: the file is changed with
    # its size and mtime kept (what the fingerprint sees), and the other process still gets the
    # vocabulary of the old contents.
    stat = path.stat()
    text = path.read_text()
    path.write_text(text.replace("c1,", "c9,"))
    assert path.stat().st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    probe = (
        "from elastune.validate import load_run_config\n"
        "from elastune.data.table import table_layout\n"
        f"sets = {[*TINY, 'data.source=table', f'data.path={path}', SCHEMA, 'eval.samples=256']!r}\n"
        "cfg = load_run_config(None, sets)\n"
        "print(table_layout(cfg.data).vocabulary.columns['city'])"
    )
    env = {**os.environ, "ELASTUNE_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout.strip().replace("'", '"')) == first.vocabulary.columns["city"]  # type: ignore[union-attr]
    # A new mtime is a new fingerprint: built again, from the new contents.
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    rebuilt = table_layout(cfg_for(path).data).vocabulary
    assert rebuilt is not None and "c9" in rebuilt.columns["city"] and "c1" not in rebuilt.columns["city"]
    assert vocabulary_file(cfg_for(path).data) != cached
    # min_count is part of the fingerprint too; a rebuild from scratch gives the same ids
    assert vocabulary_file(cfg_for(path, "data.min_count=3").data) != vocabulary_file(cfg_for(path).data)
    vocabulary_file(cfg_for(path).data).unlink()
    again = table_layout(cfg_for(path).data).vocabulary
    assert again is not None and again.columns == rebuilt.columns


# ---- hash encoding, multi-hot, formats ---------------------------------------------------------


def test_hash_encoding_is_stable_and_sized_by_hash_buckets(tmp_path: Path, home: Path) -> None:
    data = rows(400)
    cfg = cfg_for(
        write_csv(tmp_path / "d.csv", data),
        "data.encoding=hash",
        "data.hash_buckets={city: 50, device: 7, tags: 1000}",
    )
    assert build_workload(cfg).table_sizes == (50, 7, 1000)
    got = source(cfg).read(0, 100)
    i = 256  # the first training row
    assert got.sparse[0, 0, 0].item() == hash_id(str(data["city"][i]), 50)
    assert got.sparse[:, 0, 0].min() >= 1 and got.sparse[:, 0, 0].max() < 50
    assert got.sparse[:, 2].max() < 1000
    assert (
        hash_id("c1", 50)
        == 1 + int.from_bytes(__import__("hashlib").blake2b(b"c1", digest_size=8).digest(), "little") % 49
    )
    assert not (home / "vocabularies").exists()  # no vocabulary pass
    one = cfg_for(tmp_path / "d.csv", "data.encoding=hash", "data.hash_buckets=64")
    assert build_workload(one).table_sizes == (64, 64, 64)


def test_csv_and_parquet_give_identical_batches(tmp_path: Path) -> None:
    data = rows(700, seed=3)
    csv_cfg = cfg_for(write_csv(tmp_path / "d.csv", data))
    pq_cfg = cfg_for(write_parquet(tmp_path / "d.parquet", data))
    assert build_workload(csv_cfg).table_sizes == build_workload(pq_cfg).table_sizes
    a, b = source(csv_cfg), source(pq_cfg)
    for start, n in ((0, 300), (300, 400), (10, 1)):
        x, y = a.read(start, n), b.read(start, n)
        assert same(x.dense, y.dense) and same(x.sparse, y.sparse) and same(x.labels, y.labels)
    ex, ey = next(a.eval_batches(256, 256)), next(b.eval_batches(256, 256))
    assert same(ex.sparse, ey.sparse) and same(ex.dense, ey.dense)
    # multi_hot as text in Parquet too, and padded to the widest bag
    text = {**data, "tags": ["|".join(t) for t in data["tags"]]}  # type: ignore[union-attr]
    t_cfg = cfg_for(write_parquet(tmp_path / "t.parquet", text))
    assert same(source(t_cfg).read(0, 300).sparse, a.read(0, 300).sparse)


def test_multi_hot_pads_with_zero_and_truncates_to_max_ids(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    pq.write_table(
        pa.table({"y": [0, 1, 0], "k": ["a", "a", "b"], "short": [["x"], ["x", "y"], []],
                  "long": [["u"] * 6, None, ["v", "u"]]}),
        path,
    )  # fmt: skip
    cfg = load_run_config(
        None,
        [*TINY, "data.source=table", f"data.path={path}", "data.min_count=1", f"data.eval_path={path}",
         "data.schema={label: y, categorical: [k], multi_hot: {short: 2, long: 4}}"],
    )  # fmt: skip
    wl = build_workload(cfg)
    assert wl.table_sizes == (4, 4, 4) and wl.num_dense == 0  # type: ignore[attr-defined]
    src = TableSource(cfg.data, eval_samples=0)
    got = src.read(0, 3)
    assert got.sparse.shape == (3, 3, 4) and got.dense.shape == (3, 0)
    assert got.sparse[0].tolist() == [[2, 0, 0, 0], [2, 0, 0, 0], [2, 2, 2, 2]]  # 6 u's cut to 4
    assert got.sparse[1].tolist() == [[2, 0, 0, 0], [2, 3, 0, 0], [0, 0, 0, 0]]  # null list: all padding
    assert got.sparse[2].tolist() == [[3, 0, 0, 0], [0, 0, 0, 0], [3, 2, 0, 0]]
    assert src.truncated_rows == 1
    model = wl.build_model()
    assert model(got.dense, got.sparse).shape == (3,)  # DLRM with no dense column


# ---- bad input: a clear error naming the column, exit 2, nothing launched ------------------------


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], *expected: str) -> None:
    code = main(args)
    said = capsys.readouterr().err
    assert code == 2, said
    assert "Traceback" not in said
    for text in expected:
        assert text in said, said
    assert not ray.is_initialized()


def _sets(path: Path, schema: str = SCHEMA, *more: str) -> list[str]:
    return [a for s in [*TINY, "data.source=table", f"data.path={path}", schema, *more] for a in ("--set", s)]


@pytest.mark.parametrize("command", ["train", "estimate"])
@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ("y,x1,x2,city,tags\n1,0,0,a,b\n", ["'device'", "no column"]),  # a missing column
        ("y,x1,x2,city,device,tags\n1,0,oops,a,1,b\n", ["'x2'", "must hold numbers", "oops"]),
        ("y,x1,x2,city,device,tags\n", ["no data rows"]),
        ("", ["is empty"]),
        ("y,x1,x2,city,device,tags\n1,0,0,a,1,b\n2,0,0,a,1,b\n", ["'y'", "row 2", "0 or 1"]),
        ("y,x1,x2,city,device,tags\n1,0,0,a,1,b\n,0,0,a,1,b\n", ["'y'", "row 2"]),  # a missing label
    ],
    ids=["missing-column", "non-numeric-dense", "header-only", "empty", "label-2", "label-missing"],
)
def test_bad_csv_is_exit_2_naming_the_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, contents: str, expected: list[str]
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(contents)
    _refused(capsys, [command, *_sets(path)], "data.path", str(path), *expected)


def test_bad_parquet_is_exit_2_naming_the_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = rows(300)
    cases: list[tuple[object, list[str]]] = [
        ({**ok, "x1": [str(v) for v in ok["x1"]]}, ["'x1'", "dense", "numbers"]),
        ({**ok, "tags": ok["y"]}, ["'tags'", "multi_hot", "list"]),
        ({**ok, "y": [3] * 300}, ["'y'", "0 or 1", "row 1"]),
        (pa.table(ok).slice(0, 0), ["no data rows"]),
    ]
    for i, (data, expected) in enumerate(cases):
        path = tmp_path / f"bad{i}.parquet"
        pq.write_table(data if isinstance(data, pa.Table) else pa.table(data), path)
        _refused(capsys, ["train", *_sets(path)], str(path), *expected)
    not_parquet = tmp_path / "text.parquet"
    not_parquet.write_text("y,x1\n1,2\n")
    _refused(capsys, ["estimate", *_sets(not_parquet)], "not a readable Parquet file", str(not_parquet))


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["data.source=synthetic", SCHEMA], ["data.schema", "data.source=table"]),
        (["data.source=criteo_tsv", "data.encoding=hash"], ["data.encoding"]),
        (["data.source=table"], ["needs data.schema"]),
        (["data.source=table", "data.schema={label: y, dense: [x1]}"], ["at least one categorical"]),
        (["data.source=table", "data.schema={label: y, dense: [y], categorical: [c]}"], ["'y'", "more than once"]),
        (["data.source=table", SCHEMA, "data.encoding=hash"], ["data.hash_buckets"]),
        (["data.source=table", SCHEMA, "data.hash_buckets=10"], ["data.hash_buckets", "encoding=hash"]),
        (["data.source=table", SCHEMA, "data.encoding=hash", "data.hash_buckets={city: 9}"], ["'device'", "'tags'"]),
        (["data.source=table", SCHEMA, "data.table_rows=[5]"], ["data.table_rows"]),
        (["data.source=table", "data.schema={label: y, categorical: [c], extra: 1}"], ["data.schema.extra"]),
        (["data.source=table", SCHEMA, "data.shema=1"], ["did you mean 'data.schema'"]),
        (["data.source=table", SCHEMA, "data.schema.lable=y"], ["did you mean 'data.schema.label'"]),
    ],
)
def test_schema_rules_are_config_errors(tmp_path: Path, sets: list[str], expected: list[str]) -> None:
    path = write_csv(tmp_path / "d.csv", rows(10))
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [*TINY, f"data.path={path}", *sets])
    for text in expected:
        assert text in str(err.value), str(err.value)


def test_fewer_rows_than_eval_samples_is_refused_at_validation(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "d.csv", rows(300))
    with pytest.raises(ConfigError, match=r"300 data rows.*eval.samples=300"):
        cfg_for(path, "eval.samples=300")


def test_a_file_with_another_suffix_is_refused_naming_data_path(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text("{}")
    with pytest.raises(ConfigError, match=r"data.path.*CSV .*Parquet"):
        load_run_config(None, [*TINY, "data.source=table", f"data.path={path}", SCHEMA])


def test_a_sweep_spec_over_a_bad_table_is_refused_before_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("y,x1,x2,city,device,tags\n5,0,0,a,1,b\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "t",
                "base": {
                    "data": {"source": "table", "path": str(bad), "schema": {"label": "y", "categorical": ["city"]}}
                },
                "parameters": {"batch.micro": {"type": "choice", "values": [64]}},
                "budget": {"max_trials": 1},
            }
        )
    )
    _refused(capsys, ["sweep", str(spec), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"], "'y'", "0 or 1")
    assert not (tmp_path / "m.db").exists()


# ---- end to end: DLRM trains on it, estimate names its tables, the vocabulary is kept -----------


def test_dlrm_learns_a_planted_signal_from_a_csv_and_keeps_the_vocabulary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_csv(tmp_path / "d.csv", rows(4000))
    ckpt = tmp_path / "run.ckpt"
    sets = _sets(
        path,
        SCHEMA,
        "steps=80",
        "warmup_steps=1",
        "eval.samples=1024",
        "optimizer.lr=0.02",
        "optimizer.sparse=rowwise_adagrad",
        "embedding.overrides=[{match: {name: city}, strategy: half}]",  # overrides match a column's table
        f"checkpoint.path={ckpt}",
    )
    assert main(["train", "--format", "json", *sets]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["val_auc"] > 0.7, result  # the planted signal's AUC is ~0.85; chance is 0.5
    kept = json.loads((tmp_path / "run.ckpt.vocab.json").read_text())
    assert kept["columns"]["city"]["values"][0] == "c0" and kept["ids"]["rare_or_unseen"] == RARE_ID

    assert main(["estimate", "--format", "json", *sets]) == 0
    est = json.loads(capsys.readouterr().out)
    cfg = load_run_config(None, [s for s in sets if s != "--set"])
    assert distinct_rows(cfg), "the estimator counts distinct rows on the table's own first rows"
    layout = table_layout(cfg.data)
    assert est["tables"]["by_name"] == dict(zip(layout.names, layout.sizes, strict=True))
    assert est["tables"]["by_name"]["city"] == 14  # c0..c11 + missing + rare
    assert main(["estimate", *sets]) == 0
    table = capsys.readouterr().out
    for name, size in zip(layout.names, layout.sizes, strict=True):
        assert f"{name} ({size:,} rows)" in table


def test_the_sweep_parent_run_holds_the_vocabulary(tmp_path: Path) -> None:
    import time

    from elastune.tracking.mlflow import SweepTracker
    from elastune.tracking.records import SweepRecord
    from mlflow import MlflowClient

    path = write_csv(tmp_path / "d.csv", rows(400))
    base = {"data": {"source": "table", "path": str(path), "schema": {"label": "y", "categorical": ["city"]}}}
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    record = SweepRecord(sweep_id="s-table", spec={"name": "s", "base": base}, status="running", started_at=time.time())
    run_id = SweepTracker(uri).start_sweep(record)
    local = MlflowClient(uri).download_artifacts(run_id, "vocabulary/vocabulary.json", str(tmp_path))
    logged = json.loads(Path(local).read_text())
    cfg = cfg_for(path, "data.schema={label: y, categorical: [city]}")
    assert logged == json.loads(vocabulary_file(cfg.data).read_text())
    assert logged["columns"]["city"]["values"][0] == "c0"


def test_resume_refuses_a_file_whose_values_now_map_to_other_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_csv(tmp_path / "d.csv", rows(600))
    ckpt = tmp_path / "run.ckpt"
    sets = _sets(path, SCHEMA, "eval.samples=256", f"checkpoint.path={ckpt}", "checkpoint.resume=true")
    assert main(["train", "--format", "json", *sets]) == 0
    capsys.readouterr()
    assert (tmp_path / "run.ckpt.vocab.json").is_file()
    assert main(["train", "--format", "json", *[*sets, "--set", "steps=8"]]) == 0  # same data: resumes
    capsys.readouterr()
    write_csv(path, rows(600, seed=9))  # new contents: the cities' counts, so their ids, change
    # steps=8 as the checkpoint's: a step beyond `steps` is refused before the data map is compared
    _refused(capsys, ["train", *sets, "--set", "steps=8"], "checkpoint.path", "run.ckpt.vocab.json", "other rows")


def test_tsv_gz_and_a_csv_with_a_byte_order_mark_read_as_the_plain_csv(tmp_path: Path) -> None:
    import gzip

    plain = write_csv(tmp_path / "d.csv", rows(400))
    text = plain.read_text()
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    tsv = tmp_path / "d.tsv.gz"
    with gzip.open(tsv, "wt") as f:
        f.write(text.replace(",", "\t"))
    want = source(cfg_for(plain)).read(0, 144)
    for other in (bom, tsv):
        got = source(cfg_for(other)).read(0, 144)
        assert same(got.sparse, want.sparse) and same(got.dense, want.dense) and same(got.labels, want.labels)
