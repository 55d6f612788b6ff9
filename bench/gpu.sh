#!/usr/bin/env bash
# The checks that need a GPU, in one go: the test that needs CUDA, the estimator on the non-DLRM
# workloads, the GPT-2-small-shaped LM of search_spaces/lm_full.yaml predicted against measured,
# the data loader with pinned memory, and the language model's knobs. On one H200 with 16 cores
# the first four take about 6 minutes and bench/lm.py at its GPU shape about 8 more, so it comes
# last. Each benchmark writes its record to bench/records/, and each new record is copied to
# RECORDS_DIR as soon as it is written (a run cut short keeps what it finished). Then, where the
# records land in this checkout, `python bench/render.py`.
#
#     bash bench/gpu.sh [RECORDS_DIR]      # elastune installed, a CUDA build of torch
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-/tmp/elastune-gpu-records}
LOG=/tmp/elastune-gpu
mkdir -p "$OUTDIR" "$LOG"
touch "$LOG/start"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
step() {
    find bench/records -newer "$LOG/start" -name '*.json' -exec cp {} "$OUTDIR/" \;
    echo "=== $(date +%T) $*"
}

step "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

step "tests that need CUDA"
timeout 120 $PY -m pytest -q -p no:cacheprovider -o addopts="" tests/unit/test_batches.py \
    tests/unit/test_estimate.py tests/unit/test_loop.py 2>&1 | tail -15

step "estimator, two-tower example"
timeout 150 $PY bench/estimator.py --suite two_tower --device cuda --jobs 8 --repeat 2 \
    --json "$LOG/two_tower.json" 2>&1 | tail -14

step "estimator, language model"
timeout 180 $PY bench/estimator.py --suite lm --device cuda --jobs 8 --repeat 2 \
    --json "$LOG/lm.json" 2>&1 | tail -16

step "lm_full's shape (GPT-2 small): predicted vs measured"
LM_FULL=(--set workload=lm --set "workload_options={layers: 12, heads: 12, context: 1024, vocab: 50257, mean_length: 300}"
    --set model.embedding_dim=768 --set steps=30 --set warmup_steps=10 --set eval.samples=256 --set device=cuda)
for extra in "batch.micro=8 batch.accum=8" "batch.micro=16 batch.accum=4 precision=bf16 data.padding=packed model.activation_checkpointing=every_block"; do
    sets=(); for kv in $extra; do sets+=(--set "$kv"); done
    timeout 90 $PY -m elastune.cli train --format json "${LM_FULL[@]}" "${sets[@]}" >"$LOG/lm_full.json" 2>"$LOG/lm_full.err" \
        && $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], {k: r[k] for k in ('samples_per_s','units_per_s','peak_memory_bytes','estimated_peak_bytes','quality')})" "$LOG/lm_full.json" "$extra" \
        || tail -5 "$LOG/lm_full.err"
done

step "data loader and pinned memory (bench/loader.py)"
timeout 150 $PY bench/loader.py --device cuda --repeat 1 --steps 40 2>&1 | tail -16
step "language model knobs (bench/lm.py)"
timeout 600 $PY bench/lm.py --device cuda --repeat 1 --steps 40 2>&1 | tail -20

step "done"
