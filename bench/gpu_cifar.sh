#!/usr/bin/env bash
# GPU run of the CIFAR-100 dense-queue application (paper §12, Table 9, Figure 3C) for ONE
# training seed at the paper's protocol (hardware=h100: width 64, batch 256, 64 MiB queue,
# 1,024 MiB selection budget): the seven methods as seven processes, then the report and
# Figure 3C beside the records under bench/results/cifar-<hardware>-seed<SEED>-e<EPOCHS>/
# (commit that folder).
#
#   bench/gpu_cifar.sh                          # seed 2701, 100 encoder + 25 probe epochs
#   ENCODER_EPOCHS=2 PROBE_EPOCHS=1 bench/gpu_cifar.sh   # what a 15-minute lease allows (said so)
#   ARCHIVE=/data/cifar-100-python.tar.gz SEED=2702 OUT=... bench/gpu_cifar.sh
#
# ARCHIVE must be the official archive (its MD5 is checked). Without one (a machine with no
# network), GENERATE=1 writes a same-format archive of 50,000 + 10,000 random images and
# runs with the checksum off: every row then says checksum_verified=false and the scores
# measure nothing about CIFAR — only memory, time and byte identity.
set -euo pipefail
cd "$(dirname "$0")/.."
SEED="${SEED:-2701}"
HARDWARE="${HARDWARE:-h100}"
ENCODER_EPOCHS="${ENCODER_EPOCHS:-100}"
PROBE_EPOCHS="${PROBE_EPOCHS:-25}"
ARCHIVE="${ARCHIVE:-data/cifar-100-python.tar.gz}"
OUT="${OUT:-bench/results/cifar-${HARDWARE}-seed${SEED}-e${ENCODER_EPOCHS}}"
VERIFY="${VERIFY:-true}"    # VERIFY=false: a generated archive you made yourself (recorded in every row)
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"
if [ "$HARDWARE" = h100 ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device: this run needs a GPU'"
fi
if [ ! -f "$ARCHIVE" ]; then
  if [ "${GENERATE:-0}" = 1 ]; then
    ARCHIVE="$(mktemp -d)/cifar-100-python.tar.gz"
    python -m stateaware.app.data "$ARCHIVE" --train 50000 --test 10000
    VERIFY=false
  else
    echo "no CIFAR-100 archive at $ARCHIVE: put the official cifar-100-python.tar.gz there, set ARCHIVE, or GENERATE=1" >&2
    exit 2
  fi
fi
mkdir -p "$OUT"
python -m stateaware cohort=cifar hardware="$HARDWARE" launcher=local processes=7 out="$OUT" \
  "cohort.params.seeds=[$SEED]" "cohort.params.archive=$ARCHIVE" \
  "cohort.params.protocols.$HARDWARE.verify_checksum=$VERIFY" \
  "cohort.params.protocols.$HARDWARE.encoder_epochs=$ENCODER_EPOCHS" \
  "cohort.params.protocols.$HARDWARE.probe_epochs=$PROBE_EPOCHS" 2>&1 | tee "$OUT/run.log"
{
  echo "# cifar, seed $SEED on $HARDWARE: $ENCODER_EPOCHS encoder + $PROBE_EPOCHS probe epochs (paper: 100 + 25), checksum verified: $VERIFY"
  echo
  python -m stateaware.analysis.application --results "$OUT" --figure "$OUT/figure3c.png"
} > "$OUT/report.md"
cat "$OUT/report.md"
