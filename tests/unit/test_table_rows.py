"""`data.table_rows`: synthetic tables of the shapes a user has, priced and trained before any data
exists (one table per entry, instead of the Criteo cardinalities x rows_scale)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.embeddings import spec_for
from elastune.validate import load_run_config
from elastune.workloads import build_workload

from tests.conftest import TINY


def _args(*sets: str) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def test_one_million_rows_of_512_fp32_are_2048000000_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--format", "json", *_args("data.table_rows=[1000000]", "model.embedding_dim=512")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["tables"] == {"count": 1, "rows": 1_000_000, "bytes": 2_048_000_000}
    # the traced parameters are the table plus the MLPs: a few hundred kB more, never less
    assert 2_048_000_000 <= out["breakdown"]["parameters"] < 2_048_000_000 + 2**20


def test_the_table_line_follows_the_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    sets = ["data.table_rows=[1000000]", "model.embedding_dim=512", "embedding.strategy=half"]
    sets += ["optimizer.sparse=rowwise_adagrad"]
    assert main(["estimate", "--format", "json", *_args(*sets)]) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = load_run_config(None, sets)
    expected = spec_for(cfg.embedding).state_bytes((1_000_000,), 512, cfg.embedding, "rowwise_adagrad")
    assert out["tables"]["bytes"] == expected and 1_024_000_000 <= expected < 2_048_000_000


def test_a_run_builds_and_trains_exactly_the_tables_given() -> None:
    from elastune.training.loop import train

    cfg = load_run_config(None, [*TINY, "data.table_rows=[1000,50,7]"])
    workload = build_workload(cfg)
    assert workload.table_sizes == (1000, 50, 7)
    assert workload.build_model().embeddings.table_sizes == (1000, 50, 7)  # type: ignore[union-attr]
    assert workload.data_source().read(0, 64).sparse.shape[1] == 3
    result = train(cfg)
    assert result.samples > 0 and result.metrics["logloss"] > 0


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["data.table_rows=[1]"], "data.table_rows.0"),
        (["data.table_rows=[]"], "data.table_rows"),
        ([f"data.table_rows=[{2**41}]"], "data.table_rows.0"),
        (["data.table_rows=[" + ",".join(["10"] * 1025) + "]"], "data.table_rows"),
        (["data.table_rows=[100, -5]"], "data.table_rows.1"),
    ],
)
def test_bad_table_rows_name_the_entry(
    sets: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["estimate", *_args(*sets)]) == 2
    assert named in capsys.readouterr().err


def test_table_rows_are_for_synthetic_data_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "train.tsv"
    data.write_text("")
    assert main(["estimate", *_args("data.source=criteo_tsv", f"data.path={data}", "data.table_rows=[10]")]) == 2
    said = capsys.readouterr().err
    assert "data.table_rows" in said and "data.source=synthetic" in said


def test_a_cache_larger_than_the_given_tables_says_which_tables(capsys: pytest.CaptureFixture[str]) -> None:
    sets = ["data.table_rows=[100,20]", "embedding.strategy=cached", "embedding.cache_rows=500"]
    sets += ["optimizer.sparse=rowwise_adagrad"]
    assert main(["estimate", *_args(*sets)]) == 2
    said = capsys.readouterr().err
    assert "120 rows" in said and "data.table_rows=[100, 20]" in said
