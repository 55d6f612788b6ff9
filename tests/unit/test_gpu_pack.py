"""bench/gpu_pack.py rewrites Ray's wheel without what a sweep never loads: what is left must still
be a wheel pip installs (its RECORD lists each member with its hash), and what was cut is gone."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
KEPT = {"ray/__init__.py": b"VERSION = '0.0'\n", "ray/_private/runtime_env/agent/main.py": b"pass\n"}
CUT = {
    "ray/jars/ray_dist.jar": b"\x00" * 4096,
    "ray/dashboard/client/build/static/js/main.js": b"js",
    "ray/train/page.js.map": b"{}",
    "ray/_private/runtime_env/agent/thirdparty_files/aiohttp/__init__.py": b"",
    "ray/rllib/__init__.py": b"",
}


def _ray_wheel(folder: Path) -> Path:
    wheel = folder / "ray-0.0-py3-none-any.whl"
    info = "ray-0.0.dist-info"
    members = {
        **KEPT,
        **CUT,
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: ray\nVersion: 0.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as out:
        for name, data in members.items():
            out.writestr(name, data)
        out.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in members))
    return wheel


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_the_stripped_wheel_lists_what_it_keeps_and_installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import gpu_pack

    wheel = _ray_wheel(tmp_path)
    assert gpu_pack.strip_wheel(wheel) > 0
    with zipfile.ZipFile(wheel) as stripped:
        names = set(stripped.namelist())
        record = stripped.read("ray-0.0.dist-info/RECORD").decode().splitlines()
    assert not names & set(CUT), "a member a sweep never loads is still there"
    listed = {line.split(",")[0]: line.split(",")[1] for line in record}
    assert set(listed) == names
    assert all(listed[name] == _hash(data) for name, data in KEPT.items())

    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site), str(wheel)]
    done = subprocess.run(pip, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (site / "ray" / "__init__.py").read_bytes() == KEPT["ray/__init__.py"]
    assert not (site / "ray" / "jars").exists()
