"""The CLI as a user meets it: exit codes, JSON fields, errors that say how to fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from elastune.cli import main
from elastune.validate import load_run_config

from tests.conftest import TINY

JSON_FIELDS = {
    "samples_per_s", "peak_memory_bytes", "estimated_peak_bytes", "val_logloss", "val_auc", "steps",
    "samples", "micro_batch", "accum", "effective_batch", "oom_retries", "config",
}  # fmt: skip


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def test_train_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *sets(*TINY), "--format", "json"]) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload.keys() >= JSON_FIELDS
    assert payload["effective_batch"] == payload["micro_batch"] * payload["accum"]
    assert "step" in captured.err  # progress goes to stderr, so stdout stays parseable


def test_train_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *sets(*TINY)]) == 0
    captured = capsys.readouterr()
    for label in ("throughput", "peak memory, measured", "peak memory, predicted", "eval AUC"):
        assert label in captured.out
    # step lines show the running mean, which the table's steady rate is not: they say so
    steps = [line for line in captured.err.splitlines() if line.lstrip().startswith("step ")]
    assert steps and all(line.endswith(("samples/s running mean", "warming up")) for line in steps), steps


def test_bad_config_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "run.ckpt"
    code = main(["train", *sets(*TINY, "batch.micro=-1", "precison=bf16", f"checkpoint.path={ckpt}")])
    assert code == 2
    err = capsys.readouterr().err
    assert "batch.micro=-1: must be ≥ 1" in err
    assert "did you mean 'precision'" in err
    assert not ckpt.exists()


def test_malformed_tsv_exits_2_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a long path: the error line must not be wrapped inside it (rich wraps at the terminal width)
    (tmp_path / ("long_" * 16)).mkdir()
    data = tmp_path / ("long_" * 16) / "day_0.tsv"
    good = "\t".join(["1", *["3"] * 13, *["68fd1e64"] * 26])
    data.write_text("\n".join([good] * 5 + ["0\t1\t2"] + [good] * 5) + "\n")
    code = main(["train", *sets(*TINY, "data.source=criteo_tsv", f"data.path={data}", "eval.samples=256")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{data}:6" in err


def test_estimate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", *sets(*TINY), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["estimated_peak_bytes"] == sum(payload["breakdown"].values())


def test_estimate_says_where_the_peak_is(capsys: pytest.CaptureFixture[str]) -> None:
    """A workload whose evaluation gathers more than a training step holds (tests/unit/test_estimate.py):
    the table's activations are the evaluation's, and the JSON names the phase."""
    gathering = [*TINY, "workload=tests.unit.test_estimate:GatheringDLRM", "eval.samples=16384"]
    assert main(["estimate", *sets(*gathering), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_phase"] == "evaluation"
    assert main(["estimate", *sets(*TINY), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_phase"] == "training"
    assert main(["estimate", *sets(*gathering)]) == 0
    assert "activations (at the evaluation's peak)" in capsys.readouterr().out


def test_config_show_and_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--set", "batch.micro=512", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"]["micro"] == 512
    assert main(["config", "schema"]) == 0
    assert "properties" in json.loads(capsys.readouterr().out)


def test_config_show_checks_the_components_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --check every field is checked (a bad value is refused) but not what only a component
    knows: int8 rows update themselves and need a row-wise optimizer, which the embedding registry
    says; with --check it does, as train would."""
    assert main(["config", "show", "--set", "batch.micro=lots"]) == 2
    assert "batch.micro" in capsys.readouterr().err
    int8_with_adam = ["--set", "embedding.strategy=int8", "--set", "optimizer.sparse=adam"]
    assert main(["config", "show", *int8_with_adam]) == 0
    assert "strategy: int8" in capsys.readouterr().out
    assert main(["config", "show", "--check", *int8_with_adam]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert "needs a row-wise sparse optimizer" in " ".join(said.err.split())


def test_unknown_option_is_a_usage_error() -> None:
    assert main(["train", "--no-such-flag"]) == 2


def test_default_train_learns(tmp_path: Path) -> None:
    # The README's promise: the embedded defaults reach AUC >= 0.70 and beat the constant
    # predictor clearly. A fresh process, exactly as a user runs it (about 20 s here).
    done = subprocess.run(
        [sys.executable, "-m", "elastune.cli", "train", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=tmp_path,
    )
    r = json.loads(done.stdout)
    assert r["steps"] == 300 and r["config"] == load_run_config(None, []).to_dict()
    assert r["val_auc"] >= 0.70
    assert r["val_logloss"] < 0.9 * r["val_baseline_logloss"]
    assert r["quality_metric"] == "logloss" and r["quality"] == r["val_logloss"] == r["metrics"]["logloss"]
    assert "step   300/300" in done.stderr  # the progress line
