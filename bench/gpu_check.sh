#!/usr/bin/env bash
# GPU check of the cost runtime: run the fair44 cohort (seven methods, one process, paper §10 /
# Table 6) on a CUDA device with the h100 profile, then write the report beside its records
# under bench/results/fair44-<profile>-b<batch>/ (commit that folder).
#
#   bench/gpu_check.sh                 # batch 16384 (a quarter of the paper's; fits a 15-minute lease)
#   BATCH=65536 bench/gpu_check.sh     # the paper's shapes (width 4096, batch 65536, 1 GiB queue)
#   STEPS=20 WARMUP=3 BATCH=... OUT=... bench/gpu_check.sh
#   COMMIT=1 bench/gpu_check.sh        # and commit the folder
#   HARDWARE=cpu bench/gpu_check.sh    # the same steps on the CPU profile (its own cells and budget)
#   bench/gpu_check.sh KEY=VALUE...    # extra Hydra overrides; PYTHON names the interpreter
#
# The profile card is measured in the process (no frozen h100 card exists yet) and the budget
# is the paper's 44 GiB scaled by BATCH/65536 with the activations (said in the report header),
# so a reduced batch keeps the budget's position relative to the activation pressure.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH="${BATCH:-16384}"
STEPS="${STEPS:-20}"
WARMUP="${WARMUP:-3}"
HARDWARE="${HARDWARE:-h100}"
PYTHON="${PYTHON:-python}"
OUT="${OUT:-bench/results/fair44-${HARDWARE}-b${BATCH}}"
mkdir -p "$OUT"
if [ "$HARDWARE" = cpu ]; then
  # The CPU profile's frozen card fixes its cells, and the cohort scales its own budget.
  DEVICE=CPU
  SHAPES=()
  HEADER="fair44 on CPU (cpu profile: its own cells and budget), $WARMUP + $STEPS steps"
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  DEVICE="$("$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device: this check needs a GPU'; print(torch.cuda.get_device_name(0))")"
  echo "torch device $DEVICE, batch $BATCH"
  BUDGET=$("$PYTHON" -c "print(44 * int('$BATCH') / 65536)")
  SHAPES=(cohort.params.budget_gib="$BUDGET" hardware.params.cost_runtime.cells.large_sparse.batch="$BATCH")
  HEADER="fair44 on $DEVICE, batch $BATCH (paper: 65536), budget $BUDGET GiB (paper: 44 GiB at batch 65536), $WARMUP + $STEPS steps"
fi
"$PYTHON" -m stateaware cohort=fair44 hardware="$HARDWARE" out="$OUT" \
  cohort.params.steps="$STEPS" cohort.params.warmup="$WARMUP" "${SHAPES[@]}" "$@" 2>&1 | tee "$OUT/run.log"
{
  echo "# $HEADER"
  echo
  "$PYTHON" -m stateaware.analysis.timing --results "$OUT"
} > "$OUT/report.md"
cat "$OUT/report.md"
if [ "${COMMIT:-0}" = 1 ]; then
  git add -- "$OUT" ":(exclude)$OUT/.snapshots" ":(exclude)$OUT/.submitit"  # code and pickles: the records keep the source hash
  git commit -m "bench/results: fair44 on $DEVICE, batch $BATCH" -- "$OUT"
fi
