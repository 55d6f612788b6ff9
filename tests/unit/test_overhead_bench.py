"""bench/overhead.py: its bare loop is timed as elastune's loop times a run, each side of a config
runs with the same `--set` list, and a `--quick` run of one config gives a record of positive ratios
(written to a throw-away folder: a smoke test's figures are not results)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import overhead  # noqa: E402


def test_the_steady_rate_leaves_out_warm_up_windows_as_the_loop_does() -> None:
    steady = [(100, 1.0)] * 4
    assert overhead.steady_rate(steady, 450, 4.5) == (100.0, 0)  # the whole stretch, partial window too
    slow_start = [(100, 4.0), *steady]  # a first window 4x slower: still warming up
    assert overhead.steady_rate(slow_start, 500, 8.0) == (100.0, 1)


def test_both_sides_of_a_config_run_the_same_settings_the_configs_own_last() -> None:
    sets = overhead.overrides(["batch.micro=4096"], steps=50, device="cpu", quick=True)
    assert sets[-3:] == ["batch.micro=4096", "steps=50", "device=cpu"]
    assert "batch.micro=64" in sets  # quick's, overridden by the config's own
    lm = overhead.overrides(["workload=lm", "batch.micro=32"], steps=50, device="cpu", quick=True)
    assert lm.index("batch.micro=16") > lm.index("batch.micro=32")  # the LM's quick shape wins there
    assert overhead.overrides([], steps=200, device="cpu", quick=False) == [*overhead.BASE, "steps=200", "device=cpu"]


def test_ratios_are_the_median_of_each_rounds_pair() -> None:
    runs = {
        "elastune": [{"samples_per_s": v} for v in (90.0, 100.0, 50.0)],
        "materialized": [{"samples_per_s": v} for v in (100.0, 100.0, 100.0)],
    }
    got = overhead.summarize(runs, ["materialized"])
    assert got["elastune"] == 90.0 and got["rounds"] == 3
    assert got["materialized"]["ratios"] == [0.9, 1.0, 0.5]
    assert got["materialized"]["ratio"] == 0.9


def test_a_quick_run_writes_a_record_of_positive_ratios(tmp_path: Path) -> None:
    out = tmp_path / "raw.json"
    env = {**os.environ, "ELASTUNE_BENCH_RECORDS": str(tmp_path)}
    cmd = [sys.executable, str(BENCH / "overhead.py"), "--quick", "--only", "0", "--allow-dirty", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    raw = json.loads(out.read_text())
    (label,) = raw["results"]
    result = raw["results"][label]
    assert result["rounds"] == 1 and result["elastune"] > 0
    assert result["materialized"]["samples_per_s"] > 0 and result["materialized"]["ratio"] > 0
    assert raw["settings"]["torch_threads"] == [1]  # --quick: one thread on both sides
    (path,) = tmp_path.glob("overhead-cpu-*.json")
    record = json.loads(path.read_text())
    (figure,) = record["figures"]
    assert figure["target"] == ">= 0.97" and figure["value"] > 0 and figure["met"] == (figure["value"] >= 0.97)
    assert record["table"]["rows"][0][0] == label


@pytest.mark.parametrize("bad", ["nothing", "materialized,sideways"])
def test_an_unknown_bare_data_is_refused(bad: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "overhead.py"), "--bare-data", bad], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--bare-data" in done.stderr


def test_each_side_runs_first_in_every_other_round() -> None:
    sides = ["elastune", "materialized", "read"]
    assert [overhead.order(sides, r) for r in range(4)] == [
        ["elastune", "materialized", "read"],
        ["read", "materialized", "elastune"],
        ["elastune", "materialized", "read"],
        ["read", "materialized", "elastune"],
    ]
    assert sides == ["elastune", "materialized", "read"]  # the caller's list is left as it was
