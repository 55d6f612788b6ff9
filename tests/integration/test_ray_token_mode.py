"""The token a local sweep makes Ray create is its user's alone (issue 37, point 6).

Ray (2.5x on) turns token authentication on for a new local cluster and, where no token exists,
writes one to ~/.ray/auth_token with a plain `open(path, "w")`: the file takes the process's umask,
0644 under the usual 022. `elastune sweep` starts its local Ray inside `private_files()` (umask 077),
so the token is 0600 and ~/.ray 0700. This runs the real command on a fresh HOME, under umask 022,
with a spec that stops right after Ray has started (a worker group no cluster of this machine holds),
and reads the modes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

# Checked once Ray is up (tuning/sweep.py: trial_concurrency), before anything else is written.
SPEC = {
    "name": "token_mode",
    "base": {
        "device": "cpu",
        "data": {"rows_scale": 0.0005},
        "model": {"embedding_dim": 8},
        "optimizer": {"sparse": "adam"},
        "batch": {"micro": 64},
        "steps": 4,
        "warmup_steps": 1,
    },
    "parameters": {"precision": {"type": "choice", "values": ["fp32"]}},
    "constraints": {"effective_batch": 256},
    "budget": {"max_trials": 1, "max_concurrent": 1},
    "resources": {"cpus_per_trial": 1000, "gpus_per_trial": 0, "workers_per_trial": 2},
}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_local_sweep_leaves_rays_token_readable_by_its_user_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    # Ray's own variables would choose another cluster, mode or token file than the one under test.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env.update(HOME=str(home), ELASTUNE_HOME=str(tmp_path / "elastune"), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    command = [sys.executable, "-m", "elastune.cli", "sweep", str(spec), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    done = subprocess.run(
        command,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=lambda: os.umask(0o022),  # what most users run with: group and others may read
    )
    assert done.returncode == 2 and "worker group" in done.stderr, done.stderr[-2000:]  # stopped after Ray started
    token = home / ".ray" / "auth_token"
    assert token.is_file(), f"Ray wrote no token where this test looks for it; {done.stderr[-2000:]}"
    assert _mode(token) == 0o600, oct(_mode(token))
    assert _mode(token.parent) == 0o700, oct(_mode(token.parent))
