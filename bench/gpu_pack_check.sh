#!/usr/bin/env bash
# The GPU pack, tested here before a GPU machine is asked for: a fresh Python 3.12 environment with
# what the GPU machine's image has (torch 2.11, numpy, pandas, pyarrow, ...; GPU_MACHINE_PACKAGES in
# bench/gpu_pack.py) and nothing else, then bench/gpu.sh --dry-run --pack .gpu-pack in it: the pack
# installs from its folder alone (pip --no-index) and every step runs, on the CPU, tiny.
#
#     make gpu-pack-check      # after `make gpu-pack`; PYTHON312=... names the interpreter
#
# The environment's torch comes from PyPI (a CUDA build, about 3 GB with its libraries; it runs on
# the CPU here): pip's cache makes the second run quick.
set -euo pipefail
cd "$(dirname "$0")/.."
python312() {
    if [[ -n ${PYTHON312:-} ]]; then echo "$PYTHON312"
    elif command -v pyenv >/dev/null && prefix=$(pyenv prefix 3.12 2>/dev/null); then echo "$prefix/bin/python3.12"
    else command -v python3.12 || true
    fi
}
PY312=$(python312)
"$PY312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null || { echo "bench/gpu_pack_check.sh: no Python 3.12 found; set PYTHON312=/path/to/python3.12" >&2; exit 2; }
[[ -f .gpu-pack/MANIFEST.json ]] || { echo "bench/gpu_pack_check.sh: no .gpu-pack/ yet; run make gpu-pack" >&2; exit 2; }
ENV=$(mktemp -d /tmp/elastune-gpu312-XXXX)
trap 'rm -rf "$ENV" /tmp/elastune-site' EXIT
"$PY312" -m venv "$ENV"
# the GPU machine's image, as far as a sweep touches it
"$ENV/bin/pip" install -q torch==2.11.0 numpy pandas pyarrow pyyaml typer rich scikit-learn torchmetrics \
    matplotlib tokenizers jinja2 psutil click requests aiohttp grpcio protobuf msgpack filelock packaging \
    fsspec attrs cloudpickle prometheus-client tqdm typing-extensions pytest hypothesis wheel
rm -rf /tmp/elastune-site
PYTHON=$ENV/bin/python bash bench/gpu.sh --dry-run --pack .gpu-pack "${1:-/tmp/elastune-gpu-dry}"
