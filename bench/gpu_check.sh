#!/usr/bin/env bash
# GPU check of the cost runtime: run the fair44 cohort (seven methods, one process, paper §10 /
# Table 6) on a CUDA device with the h100 profile, then write the report beside its records
# under bench/results/fair44-<profile>-b<batch>/ (commit that folder).
#
#   bench/gpu_check.sh                 # batch 16384 (a quarter of the paper's; fits a 15-minute lease)
#   BATCH=65536 bench/gpu_check.sh     # the paper's shapes (width 4096, batch 65536, 1 GiB queue)
#   STEPS=20 WARMUP=3 BATCH=... OUT=... bench/gpu_check.sh
#   COMMIT=1 bench/gpu_check.sh        # and commit the folder
#
# The profile card is measured in the process (no frozen h100 card exists yet) and the budget
# is the paper's 44 GiB scaled by BATCH/65536 with the activations (said in the report header),
# so a reduced batch keeps the budget's position relative to the activation pressure.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH="${BATCH:-16384}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-3}"
OUT="${OUT:-bench/results/fair44-h100-b${BATCH}}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python - "$BATCH" <<'PY'
import sys, torch
assert torch.cuda.is_available(), "no CUDA device: this check needs a GPU"
print("torch", torch.__version__, "device", torch.cuda.get_device_name(0), "batch", sys.argv[1])
PY
BUDGET=$(python -c "print(44 * int('$BATCH') / 65536)")
mkdir -p "$OUT"
python -m stateaware cohort=fair44 hardware=h100 out="$OUT" \
  cohort.params.steps="$STEPS" cohort.params.warmup="$WARMUP" cohort.params.budget_gib="$BUDGET" \
  hardware.params.cost_runtime.cells.large_sparse.batch="$BATCH" 2>&1 | tee "$OUT/run.log"
{
  echo "# fair44 on $(python -c 'import torch; print(torch.cuda.get_device_name(0))'), batch $BATCH (paper: 65536), budget $BUDGET GiB (paper: 44 GiB at batch 65536), $WARMUP + $STEPS steps"
  echo
  python -m stateaware.analysis.timing --results "$OUT"
} > "$OUT/report.md"
cat "$OUT/report.md"
if [ "${COMMIT:-0}" = 1 ]; then
  git add -- "$OUT" ":(exclude)$OUT/.snapshots" ":(exclude)$OUT/.submitit"  # code and pickles: the records keep the source hash
  git commit -m "bench/results: fair44 on $(python -c 'import torch; print(torch.cuda.get_device_name(0))'), batch $BATCH" -- "$OUT"
fi
