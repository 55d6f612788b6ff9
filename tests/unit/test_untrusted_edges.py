"""Edges of what a remote client may send (elastune/untrusted.py) that the UI's own tests reach only
through the API: a workload that is not a name, and a job id that would climb out of the jobs folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from elastune.untrusted import client_checkpoint, override_problems, stored_config_problems


@pytest.mark.parametrize("value", ["3", "[dlrm]", "{a: 1}", "true"])
def test_a_workload_that_is_not_a_name_is_refused(value: str) -> None:
    (problem,) = override_problems([f"workload={value}"])
    assert problem.path == "sets.workload"
    (stored,) = [p for p in stored_config_problems({"workload": 3}) if p.path == "from_sweep.workload"]
    assert stored.value == 3


@pytest.mark.parametrize("job_id", ["..", ".", "../../etc", "a/../../b", "/abs", "..\\x", ""])
def test_a_job_id_never_names_a_folder_outside_the_jobs_folder(
    job_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ELASTUNE_HOME", str(tmp_path))
    path = client_checkpoint(job_id)
    jobs = (tmp_path / "jobs").resolve()
    assert path.parent.resolve().parent == jobs and path.name == "checkpoint.pt"
    assert path.parent.name not in {"", ".", ".."} and "/" not in path.parent.name
