"""A workload written against the protocol before `elastune.Workload` (the click-triple `Batch`
from `elastune.workloads.data`, `predict`, no base class) keeps working for a release, with a
DeprecationWarning naming what replaces each part (tests/unit/plugin_workload/old_protocol.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from elastune.validate import load_run_config
from elastune.workloads.legacy import LegacyWorkload, adopt

from tests.conftest import ANY_TINY as TINY

OLD = "tests.unit.plugin_workload.old_protocol"


def _run(command: str) -> subprocess.CompletedProcess[str]:
    # A process of its own: each warning is given once per process, and the test suite turns
    # DeprecationWarnings into errors; here they are shown (-W always) and read.
    sets = [a for s in [*TINY, f"workload={OLD}:make_workload", "embedding.strategy=hashed"] for a in ("--set", s)]
    return subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-m", "elastune.cli", command, "--format", "json", *sets],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("command", ["train", "estimate"])
def test_an_old_protocol_workload_still_runs_and_is_told_what_replaces_it(command: str) -> None:
    done = _run(command)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert "DeprecationWarning: elastune.workloads.data.Batch is deprecated" in done.stderr
    assert "use elastune.data.ClickBatch" in done.stderr
    assert "follows the old workload protocol" in done.stderr and "metrics() and eval_step()" in done.stderr
    if command == "train":  # scored as before: a binary classifier from predict()
        assert 0 < out["val_auc"] <= 1 and out["quality_metric"] == "logloss" and out["samples"] > 0
    else:
        assert out["estimated_peak_bytes"] > 0


@pytest.mark.filterwarnings("ignore:elastune.workloads.data.Batch is deprecated:DeprecationWarning")
def test_the_old_protocol_is_wrapped_behind_the_new_hooks() -> None:
    from tests.unit.plugin_workload.old_protocol import TowerOptions, make_workload

    old = make_workload(load_run_config(None, TINY), TowerOptions())
    with pytest.warns(DeprecationWarning, match="subclass elastune.Workload"):
        wrapped = adopt(type("Fresh", (type(old),), {})(old.cfg, old.options))  # a type not warned about yet
    assert isinstance(wrapped, LegacyWorkload) and wrapped.table_sizes == (500, 300)
    assert adopt({"model": "towers"}) is None  # neither a Workload nor the old protocol
