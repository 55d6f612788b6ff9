#!/usr/bin/env bash
# The checks that need a GPU, in one go, most valuable first:
#
#   parity     dlrm_quick swept under a local Ray on the GPU, two trials per GPU under EDO
#              (--gpus-per-trial 0.5), through its confirmation stage; then its winner rerun with
#              `elastune train --from-sweep` against its trial (bench/parity.py)
#   edo        EDO where memory binds: trials whose cached tables grow with their grant, EDO vs a
#              static 1/2 split vs one at a time (bench/edo.py --mix cached --quick)
#   lm         the LM quick sweep, the same way (bench/parity.py --spec search_spaces/lm_quick.yaml)
#   estimator  predicted vs measured peaks on CUDA over the estimator's zoo (twelve workloads, its
#              fit and held-out halves apart)
#   margin     the CUDA screening margin, fitted on the zoo record's fit half, and its held-out half
#              scored (bench/fit_overhead.py --probes cuda): runs with `estimator`
#   check      the same over the zoo's check set (bench/estimator.py --suite zoo_check: configs in
#              neither half, never measured on a GPU)
#   tests      the tests that need CUDA
#
# Each step runs under its own time limit and only while the call's budget (BUDGET_S, default 530
# s) has room for it; each benchmark writes its record to bench/records/, and every new record is
# copied to RECORDS_DIR as soon as its step ends, so a call cut short keeps what finished. Then,
# where the records land in this checkout, `python bench/render.py`.
#
#     bash bench/gpu.sh [--dry-run] [--pack DIR] [--only STEP,...] [RECORDS_DIR]
#
# --pack DIR  first install the wheels `python bench/gpu_pack.py` put in DIR (pip --no-index, into
#             /tmp/elastune-site), then elastune and the example workloads from this checkout: for a
#             machine with torch but no Ray, MLflow, Optuna or pydantic, and no package index
# --dry-run   the same steps on the CPU, tiny (records go to a throw-away folder): what
#             `make gpu-pack-check` runs here before a GPU machine is asked for
# --only      a comma-separated subset of the steps above, in their order
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0 PACK="" ONLY="parity,edo,lm,estimator,check,tests"
while [[ $# -gt 0 ]]; do
    case $1 in
        --dry-run) DRY=1; shift ;;
        --pack) PACK=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "bench/gpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
[[ ",$ONLY," == *",estimator,"* ]] && ONLY="$ONLY,margin"  # the zoo record's CUDA margin, printed at once
OUTDIR=${1:-/tmp/elastune-gpu-records}
LOG=/tmp/elastune-gpu
rm -rf "$LOG"; mkdir -p "$OUTDIR" "$LOG"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-530}
START=$SECONDS
RECORDS=bench/records
if [[ $DRY == 1 ]]; then
    RECORDS=$(mktemp -d)
    export ELASTUNE_BENCH_RECORDS=$RECORDS  # bench/record.py writes here instead
    export ELASTUNE_BENCH_ALLOW_DIRTY=1  # a rehearsal of uncommitted work; its records are thrown away
fi
touch "$LOG/start"
SWEEPS=${ELASTUNE_HOME:-$HOME/.elastune}/sweeps

# the new records; and, to diagnose a failed trial afterwards, the steps' logs and the error file Tune
# kept for each failed trial (its whole traceback), as logs/<sweep>-<trial>.txt
copy_records() {
    find "$RECORDS" -newer "$LOG/start" -name '*.json' -exec cp {} "$OUTDIR/" \;
    mkdir -p "$OUTDIR/logs"
    cp "$LOG"/*.err "$OUTDIR/logs/" 2>/dev/null
    local f rel
    while IFS= read -r f; do
        rel=${f#"$SWEEPS"/}
        tail -c 20000 "$f" > "$OUTDIR/logs/$(dirname "$rel" | tr '/' '-').txt"
    done < <(find "$SWEEPS" -newer "$LOG/start" -name 'error.txt' 2>/dev/null)
}
# step NAME LIMIT_S COMMAND...: run COMMAND under LIMIT_S if the budget still has that much room.
step() {
    local name=$1 limit=$2; shift 2
    [[ ",$ONLY," == *",$name,"* ]] || return 0
    local left=$((BUDGET_S - (SECONDS - START)))
    if ((left < limit)); then
        echo "=== $(date +%T) $name: skipped, ${left}s left of the budget and it needs ${limit}s"
        return 0
    fi
    echo "=== $(date +%T) $name (limit ${limit}s)"
    timeout "$limit" "$@"
    local rc=$?
    echo "=== $(date +%T) $name: exit $rc$( ((rc == 124)) && echo ' (its time limit)')"
    # a sweep's own progress and errors (bench/parity.py --log), where the step failed or ran out of time
    if ((rc != 0)) && [[ -s $LOG/$name.err ]]; then tail -25 "$LOG/$name.err"; fi
    copy_records
}

if [[ -n $PACK ]]; then
    echo "=== $(date +%T) install $PACK"
    SITE=/tmp/elastune-site
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$PACK"/*.whl || exit 1
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    export PATH=$SITE/bin:$PATH
    # with the pack's setuptools: the machine's own may predate this pyproject's license fields
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "$SITE" \
        . examples/*/ 2>&1 | grep -v "already exists" || true
fi
$PY - <<'EOF' || { echo "the sweep's packages do not import: build the pack again (bench/gpu_pack.py)"; exit 1; }
import mlflow, optuna, pydantic, ray, torch, elastune.cli, elastune.tuning.sweep  # noqa: F401
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
print("torch", torch.__version__, "| ray", ray.__version__, "| mlflow", mlflow.__version__, "| optuna",
      optuna.__version__, "| pydantic", pydantic.__version__, "|", gpu)
EOF

echo "checkout $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')${ELASTUNE_BENCH_COMMIT:+; records name commit $ELASTUNE_BENCH_COMMIT}"

if [[ $DRY == 1 ]]; then
    # CPU, tiny: three proposals, short trials, one confirmation round, one rerun
    SWEEP=(--set base.device=cpu --set budget.max_trials=3 --set budget.trial_samples=8192 --set confirm.rounds=1)
    step parity 300 $PY bench/parity.py --reruns 1 --log "$LOG/parity.err" "${SWEEP[@]}"
    step edo 300 $PY bench/edo.py --mix cached --quick --device virtual
    step lm 300 $PY bench/parity.py --spec search_spaces/lm_quick.yaml --reruns 1 --log "$LOG/lm.err" "${SWEEP[@]}" \
        --set budget.trial_samples=256
    step estimator 200 $PY bench/estimator.py --suite zoo --device cpu --only 0,40 --repeat 1
    step margin 60 $PY bench/fit_overhead.py --probes cuda  # a CPU record is no CUDA one: says so
    step check 200 $PY bench/estimator.py --suite zoo_check --device cpu --only 9 --repeat 1
    step tests 200 $PY -m pytest -q -p no:cacheprovider -o addopts="" tests/unit/test_batches.py
else
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    GPU=(--gpus-per-trial 0.5 --set base.device=cuda)
    # the H100 run of 2026-11-27: the sweep took 192 s, and 2 reruns did not fit in 240 s
    step parity 300 $PY bench/parity.py --reruns 1 --log "$LOG/parity.err" "${GPU[@]}"
    step edo 120 $PY bench/edo.py --mix cached --quick --device cuda
    # there its 8 proposals reached 5 in 280 s: 4 here
    step lm 300 $PY bench/parity.py --spec search_spaces/lm_quick.yaml --reruns 1 --log "$LOG/lm.err" "${GPU[@]}" \
        --set budget.max_trials=4
    # the zoo: twelve workloads, its fit and held-out halves reported apart
    step estimator 300 $PY bench/estimator.py --suite zoo --device cuda --jobs 8 --repeat 1
    step margin 60 $PY bench/fit_overhead.py --probes cuda
    step check 150 $PY bench/estimator.py --suite zoo_check --device cuda --jobs 8 --repeat 1
    step tests 90 $PY -m pytest -q -p no:cacheprovider -o addopts="" tests/unit/test_batches.py \
        tests/unit/test_estimate.py tests/unit/test_loop.py
fi
copy_records
echo "=== $(date +%T) done in $((SECONDS - START))s; records in $OUTDIR"
