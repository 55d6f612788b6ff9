"""docs/workloads.md opens with a complete workload: its first Python block, saved as the page says
(`ratings.py`), trains, is judged by the default metric (its eval loss) and is estimated, as written there. Its
section "Your own torch Dataset" holds another (`visits.py`): a Dataset plugged in as it is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"


def _first_block(after: str = "") -> str:
    """The page's first python block (after the heading `after`, when given)."""
    text = DOC.read_text()
    if after:
        assert f"\n{after}\n" in text, f"docs/workloads.md has no heading {after!r}"
        text = text.split(f"\n{after}\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found is not None, f"docs/workloads.md has no python block after {after!r}"
    return found.group(1)


def _elastune(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(folder), "ELASTUNE_HOME": str(folder / "home")}
    return subprocess.run(
        [sys.executable, "-m", "elastune.cli", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_minimal_workload_of_the_docs_trains_and_estimates(tmp_path: Path) -> None:
    code = _first_block()
    assert len(code.strip().splitlines()) <= 40  # "about 30 lines", the model and data included
    (tmp_path / "ratings.py").write_text(code)
    sets = ["workload=ratings:RatingWorkload", "embedding.strategy=hashed", "steps=60", "warmup_steps=5",
            "batch.micro=256", "eval.samples=4096", "device=cpu"]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    trained = _elastune(tmp_path, "train", "--format", "json", *args)
    assert trained.returncode == 0, trained.stderr[-3000:]
    result = json.loads(trained.stdout)
    assert (result["quality_metric"], result["quality_direction"]) == ("loss", "min")  # the default
    # The ratings are sin(u/10) + cos(3i/10): predicting their mean scores a mean squared error of
    # about 1 (their variance); 60 steps of the dot product must do clearly better.
    assert result["quality"] == result["metrics"]["loss"] < 0.9, result["metrics"]
    estimated = _elastune(tmp_path, "estimate", "--format", "json", *args)
    assert estimated.returncode == 0, estimated.stderr[-3000:]
    assert json.loads(estimated.stdout)["estimated_peak_bytes"] > 0


def test_the_dataset_workload_of_the_docs_trains_and_estimates(tmp_path: Path) -> None:
    code = _first_block(after="## Your own torch Dataset")
    assert "def dataset(self)" in code and "def data_source" not in code  # the Dataset is the data
    (tmp_path / "visits.py").write_text(code)
    sets = ["workload=visits:VisitWorkload", "steps=60", "warmup_steps=5", "batch.micro=256", "eval.samples=4096",
            "device=cpu", "threads=1"]  # fmt: skip
    args = [a for s in sets for a in ("--set", s)]
    trained = _elastune(tmp_path, "train", "--format", "json", *args)
    assert trained.returncode == 0, trained.stderr[-3000:]
    result = json.loads(trained.stdout)
    assert (result["quality_metric"], result["quality_direction"]) == ("accuracy", "max")
    # Three kinds of visit, about a third each: guessing scores about 1/3; the kind is the store's id
    # mod 3, shifted for one visit in six, so 60 steps of the store's embedding must do far better.
    assert result["quality"] == result["metrics"]["accuracy"] > 0.6, result["metrics"]
    estimated = _elastune(tmp_path, "estimate", "--format", "json", *args)
    assert estimated.returncode == 0, estimated.stderr[-3000:]
    assert json.loads(estimated.stdout)["estimated_peak_bytes"] > 0
