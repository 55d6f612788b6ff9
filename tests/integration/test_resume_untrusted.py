"""`elastune sweep --resume` against a planted store: the attacks of the trust audit, through the real CLI.

Anyone who can write the team's MLflow store can rewrite a sweep's record. Here the victim has an
interrupted sweep (its record in a real SQLite store, its own state folder under ELASTUNE_HOME)
and the record is rewritten as an attacker would: a `sweep_id` that is a folder holding a pickle,
a `ray_address` of a listener that records who dials it, and a spec whose data is a private file.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elastune.tracking.encoding import record_tags
from elastune.tracking.mlflow import SweepTracker, load_sweep
from elastune.tracking.records import SweepRecord
from elastune.tuning.spec import validate_sweep_spec
from mlflow import MlflowClient

from tests.integration.sweep_specs import tiny_spec

pytestmark = pytest.mark.integration

SWEEP_ID = "tiny-20261126-120000-ab12"
SPEC = tiny_spec(budget={"max_trials": 1, "max_concurrent": 1, "trial_samples": 768})


class Planted:
    """Unpickling it creates `marker`: proof that a pickle from the planted folder was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def victim(tmp_path: Path, **planted: Any) -> tuple[str, dict[str, str]]:
    """The victim's interrupted sweep (store record and own state folder), then the record rewritten
    with `planted`; the store URI and the environment the victim's commands run in."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = validate_sweep_spec(SPEC).model_dump(mode="json")
    record = SweepRecord(sweep_id=SWEEP_ID, spec=spec, status="interrupted", started_at=time.time())
    tracker = SweepTracker(uri)
    run_id = tracker.start_sweep(record)
    tracker.finish_sweep(record)
    state = tmp_path / "home" / "sweeps" / SWEEP_ID
    state.mkdir(parents=True, mode=0o700)
    (state / "spec.json").write_text(json.dumps(spec))  # what the sweep kept when it started
    fields = {k: v for k, v in record.to_dict().items() if k != "trials"} | planted
    for key, value in record_tags(fields).items():
        MlflowClient(uri).set_tag(run_id, key, value)
    env = {**os.environ, "ELASTUNE_HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    return uri, env


def resume(tmp_path: Path, uri: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "elastune.cli", "sweep", "--resume", SWEEP_ID, "--tracking-uri", uri],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def listener() -> Iterator[tuple[str, list[bytes]]]:
    """A TCP server on 127.0.0.1 that records every connection (what it was sent first)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[bytes] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    seen.append(conn.recv(4096))
                except OSError:
                    seen.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", seen
    finally:
        done.set()
        thread.join(timeout=5)
        server.close()


def test_a_record_pointing_tune_at_a_planted_pickle_runs_nothing(tmp_path: Path) -> None:
    # The folder can be a run's own artifact folder: write access to the store is enough to fill it.
    evil = tmp_path / "artifacts" / "evil"
    evil.mkdir(parents=True)
    marker = tmp_path / "pwned"
    (evil / "tuner.pkl").write_bytes(pickle.dumps(Planted(marker)))
    uri, env = victim(tmp_path, sweep_id=str(evil))

    resumed = resume(tmp_path, uri, env, timeout=400)

    assert not marker.exists(), "a pickle named by the store was loaded"
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    assert "names another sweep id" in resumed.stderr


def test_a_resume_dials_no_stored_cluster_and_reads_no_stored_file(
    tmp_path: Path, listener: tuple[str, list[bytes]]
) -> None:
    address, dialled = listener
    private = tmp_path / "private.csv"
    emails = [f"person{i}@example.org" for i in range(600)]
    private.write_text("label,email\n" + "".join(f"{i % 2},{e}\n" for i, e in enumerate(emails)))
    planted_spec = tiny_spec(
        base={
            "data": {
                "source": "table",
                "path": str(private),
                "schema": {"label": "label", "categorical": ["email"]},
                "min_count": 1,
            }
        }
    )
    uri, env = victim(tmp_path, ray_address=address, spec=planted_spec)

    resumed = resume(tmp_path, uri, env, timeout=400)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert dialled == [], "the resume dialled the cluster address read from the store"
    assert address in resumed.stderr and "never dials" in resumed.stderr  # said as a hint
    assert "store's copy of the spec differs" in resumed.stderr
    record = load_sweep(SWEEP_ID, uri)
    assert record.status == "finished" and record.spec["base"] == SPEC["base"]
    # Nothing of the private file reached the store: not as a vocabulary artifact, not anywhere.
    client = MlflowClient(uri)
    assert "vocabulary" not in {a.path for a in client.list_artifacts(record.mlflow_run_id or "")}
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p != private)
    assert b"person1@example.org" not in stored
