"""Build the folder of wheels that a sweep needs on the GPU machine, which has no package index.

The GPU machine (the `device` tool's H100/H200 image) has Python 3.12 with torch, numpy, pandas,
pyarrow and some 200 other packages (GPU_MACHINE_HAS below), but no Ray, MLflow, Optuna or
pydantic, and what travels to it with the repository is capped at 64 MiB. Ray's wheel alone is
77 MiB, 31 of them a Java jar that a Python sweep never loads. So this script:

1. downloads the cp312 manylinux wheels of what elastune's sweep path imports, at the versions
   installed here (what CI tests), with everything they need (`pip download`, resolved for the
   GPU machine's platform, not this one's);
2. drops the wheels of packages that machine already has, and the ones a sweep never imports
   (NOT_IMPORTED: mlflow-skinny's Databricks and server dependencies);
3. strips Ray's wheel of what a sweep never loads (the jar, the dashboard's built web client,
   RLlib, Serve, the LLM library, a vendored aiohttp; its binaries' symbol tables) and rewrites its
   RECORD to match;
4. adds setuptools, so that `pip install --no-build-isolation .` builds elastune there whatever
   setuptools the machine has, and checks that the folder plus the repository stay under LIMIT.

    python bench/gpu_pack.py                  # -> .gpu-pack/ (ignored by git; `carry` it)
    python bench/gpu_pack.py --out DIR

Then `bash bench/gpu.sh --pack .gpu-pack` installs the folder (pip --no-index) before its steps.
`make gpu-pack-check` tests the folder here, in a Python 3.12 environment standing in for the GPU
machine: the install from the folder alone and bench/gpu.sh's CPU dry run.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20
LIMIT = 58 * MiB  # the device tool carries 64 MiB in all (repository included); the rest is room to spare
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
]
# What the sweep path imports that the GPU machine lacks; each pinned to the version installed here.
# mlflow-skinny is `mlflow` without its server and UI (the full wheel is 30 MiB); a SQLite store
# needs SQLAlchemy and Alembic beside it.
WANTED = {
    "ray": "ray[train,tune]",
    "optuna": "optuna",
    "mlflow": "mlflow-skinny",
    "sqlalchemy": "sqlalchemy",
    "alembic": "alembic",
    "pydantic": "pydantic",
    "setuptools": "setuptools",
}
# The GPU machine's packages, as its image listed them on 2026-11-17,
# normalized. Their wheels are left out; the machine's own versions are used.
GPU_MACHINE_PACKAGES = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
    botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
    cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
    einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
    gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
    iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
    lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
    matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
    mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-ml-py
    onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx
    optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
    prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
    pyproject-hooks pyre-extensions pytest python-dateutil pytorch-lightning pyyaml regex requests
    rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers shellingham simplejson six sortedcontainers statsmodels
    sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken
    timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
    transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
    wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"""
GPU_MACHINE_HAS = set(GPU_MACHINE_PACKAGES.split())
# Required by mlflow-skinny's metadata, never imported by a sweep that logs to a SQLite store:
# Google auth (Databricks' SDK imports it only to sign in), git (source version
# tags), the tracking server's ASGI server and .env reader. bench/gpu.sh's first step imports every
# module a sweep needs, so a wrong entry here fails there at once, by name.
NOT_IMPORTED = {
    "google-auth",
    "pyasn1",
    "pyasn1-modules",
    "gitpython",
    "gitdb",
    "smmap",
    "uvicorn",
    "python-dotenv",
}
# Parts of Ray's wheel a Python sweep never loads (prefixes and suffixes of member names).
STRIP_PREFIXES = (
    "ray/jars/",
    "ray/dashboard/client/build/",
    "ray/rllib/",
    "ray/serve/",
    "ray/llm/",
    # the runtime-env agent's own aiohttp: without it, it imports the machine's (as Ray's dashboard
    # agent always does)
    "ray/_private/runtime_env/agent/thirdparty_files/",
)
STRIP_SUFFIXES = (".map",)
# Ray's three big binaries carry their symbol tables (a quarter of their size), which only a
# debugger or a crash's symbolized stack trace reads; `strip --strip-unneeded` keeps what runs.
STRIP_SYMBOLS = ("ray/_raylet.so", "ray/core/src/ray/gcs/gcs_server", "ray/core/src/ray/raylet/raylet")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_name(path: Path) -> str:
    return _normalize(path.name.split("-")[0])


def requirements() -> list[str]:
    """The WANTED distributions at the versions installed in this environment."""
    pins = []
    for module, requirement in WANTED.items():
        installed = importlib.metadata.version(module)
        pins.append(f"{requirement}=={installed}")
    return pins


def download(pins: list[str], dest: Path) -> None:
    platform_args = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", "3.12"]
    cmd += ["--implementation", "cp", "--abi", "cp312", *platform_args, "-d", str(dest), *pins]
    subprocess.run(cmd, check=True)


def _without_symbols(binary: bytes) -> bytes:
    with tempfile.NamedTemporaryFile() as f:
        f.write(binary)
        f.flush()
        subprocess.run(["strip", "--strip-unneeded", f.name], check=True)
        return Path(f.name).read_bytes()


def strip_wheel(wheel: Path) -> int:
    """Rewrite `wheel` without the members STRIP_PREFIXES and STRIP_SUFFIXES name, STRIP_SYMBOLS'
    binaries without their symbol tables, its RECORD listing what is left; bytes saved."""
    before = wheel.stat().st_size
    stripped = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(stripped, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        kept = [
            i
            for i in src.infolist()
            if not i.filename.startswith(STRIP_PREFIXES) and not i.filename.endswith(STRIP_SUFFIXES)
        ]
        record_name = next(i.filename for i in kept if i.filename.endswith(".dist-info/RECORD"))
        lines = []
        for info in kept:
            if info.filename == record_name:
                continue
            data = src.read(info)
            if info.filename in STRIP_SYMBOLS:
                data = _without_symbols(data)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{info.filename},sha256={digest},{len(data)}")
        lines.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(lines) + "\n")
    stripped.replace(wheel)
    return before - wheel.stat().st_size


def repository_bytes() -> int:
    """What the device tool sends besides carried paths: tracked and untracked, not ignored, files."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    files = (ROOT / name for name in listed.decode().split("\0") if name)
    return sum(f.stat().st_size for f in files if f.is_file())


def build(out: Path) -> dict[str, Any]:
    pins = requirements()
    with tempfile.TemporaryDirectory() as tmp:
        download(pins, Path(tmp))
        wheels = sorted(Path(tmp).glob("*.whl"))
        keep = [w for w in wheels if _wheel_name(w) not in GPU_MACHINE_HAS | NOT_IMPORTED]
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for wheel in keep:
            shutil.copy2(wheel, out / wheel.name)
    saved = strip_wheel(next(out.glob("ray-*.whl")))
    pack = sum(w.stat().st_size for w in out.glob("*.whl"))
    manifest = {
        "requirements": pins,
        "wheels": sorted(w.name for w in out.glob("*.whl")),
        "ray_stripped_bytes": saved,
        "pack_bytes": pack,
        "repository_bytes": repository_bytes(),
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / ".gpu-pack"), help="the folder to (re)write")
    out = Path(parser.parse_args().out)
    manifest = build(out)
    pack, repo = manifest["pack_bytes"], manifest["repository_bytes"]
    print(f"{len(manifest['wheels'])} wheels in {out}:")
    for name in manifest["wheels"]:
        print(f"  {(out / name).stat().st_size / MiB:6.2f} MiB  {name}")
    print(
        f"wheels {pack / MiB:.1f} MiB (Ray's stripped of {manifest['ray_stripped_bytes'] / MiB:.1f}) "
        f"+ repository {repo / MiB:.1f} MiB = {(pack + repo) / MiB:.1f} MiB (limit {LIMIT / MiB:.0f})"
    )
    if pack + repo > LIMIT:
        sys.exit(f"over the limit by {(pack + repo - LIMIT) / MiB:.1f} MiB: strip more, or carry less")


if __name__ == "__main__":
    main()
