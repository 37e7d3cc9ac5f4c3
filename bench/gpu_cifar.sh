#!/usr/bin/env bash
# GPU run of the CIFAR-100 dense-queue application (paper §12, Table 9, Figure 3C) for ONE
# observed training seed at the paper's protocol (hardware=h100: width 64, batch 128, 64 MiB
# queue, 1,024 MiB selection budget, allocator peaks before every per-step reset): it freezes
# the encoder's profile card on this device first (so the seven processes plan from one card),
# runs the seven methods as seven processes, then writes the report and Figure 3C beside the
# records under bench/results/cifar-<hardware>-seed<SEED>-e<EPOCHS>/ (commit that folder).
#
#   bench/gpu_cifar.sh                          # seed 2702, 100 encoder + 25 probe epochs
#   ENCODER_EPOCHS=2 PROBE_EPOCHS=1 bench/gpu_cifar.sh   # what a 15-minute lease allows (said so)
#   ARCHIVE=/data/cifar-100-python.tar.gz SEED=2703 OUT=... bench/gpu_cifar.sh
#   HARDWARE=cpu GENERATE=1 bench/gpu_cifar.sh  # the same steps on the CPU profile (a dry run)
#   COMMIT=1 bench/gpu_cifar.sh                 # and commit the folder (records, card, report, figure, scores)
#   bench/gpu_cifar.sh KEY=VALUE...             # extra Hydra overrides; PYTHON names the interpreter
#
# ARCHIVE must be the official archive (its MD5 is checked). Without one (a machine with no
# network), GENERATE=1 writes a same-format archive (50,000 + 10,000 generated images on
# h100) and runs with the checksum off: every row then says checksum_verified=false and the
# scores measure nothing about CIFAR — only memory, time and byte identity. GENERATE_TRAIN and
# GENERATE_TEST size it (with fit/validation/test overrides to match, as bench/gpu_run.sh does). The paper's seed
# 2701 is quality-only (unobserved) on h100, hence the default 2702.
set -euo pipefail
cd "$(dirname "$0")/.."
SEED="${SEED:-2702}"
HARDWARE="${HARDWARE:-h100}"
ENCODER_EPOCHS="${ENCODER_EPOCHS:-100}"
PROBE_EPOCHS="${PROBE_EPOCHS:-25}"
ARCHIVE="${ARCHIVE:-data/cifar-100-python.tar.gz}"
OUT="${OUT:-bench/results/cifar-${HARDWARE}-seed${SEED}-e${ENCODER_EPOCHS}}"
PYTHON="${PYTHON:-python}"
VERIFY="${VERIFY:-true}"    # VERIFY=false: a generated archive you made yourself (recorded in every row)
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"
DEVICE="CPU"
if [ "$HARDWARE" != cpu ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  DEVICE="$("$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device: this run needs a GPU'; print(torch.cuda.get_device_name(0))")"
fi
if [ ! -f "$ARCHIVE" ]; then
  if [ "${GENERATE:-0}" = 1 ]; then
    ARCHIVE="$(mktemp -d)/cifar-100-python.tar.gz"
    if [ "$HARDWARE" = cpu ]; then
      "$PYTHON" -m stateaware.app.data "$ARCHIVE"
    else
      "$PYTHON" -m stateaware.app.data "$ARCHIVE" --train "${GENERATE_TRAIN:-50000}" --test "${GENERATE_TEST:-10000}"
    fi
    VERIFY=false
  else
    echo "no CIFAR-100 archive at $ARCHIVE: put the official cifar-100-python.tar.gz there, set ARCHIVE, or GENERATE=1" >&2
    exit 2
  fi
fi
mkdir -p "$OUT"
OVERRIDES=()
if [ "$HARDWARE" != cpu ]; then
  # Freeze this device's card (conf/cards/cifar-<hardware>-<digest12>.json; the launch then
  # snapshots it with the code) and keep a copy beside the records.
  CARD_LINE="$("$PYTHON" -m stateaware.app.encoder_card --hardware "$HARDWARE")"
  echo "$CARD_LINE"
  CARD="$(echo "$CARD_LINE" | sed -E 's/^[^:]+: ([0-9a-f]+).*/\1/')"
  cp "$(echo "$CARD_LINE" | sed -E 's/.*\((.*)\)$/\1/')" "$OUT/"
  OVERRIDES+=("cohort.params.protocols.$HARDWARE.card=$CARD")
fi
"$PYTHON" -m stateaware cohort=cifar hardware="$HARDWARE" launcher=local processes=7 out="$OUT" \
  "cohort.params.seeds=[$SEED]" "cohort.params.archive=$ARCHIVE" \
  "cohort.params.protocols.$HARDWARE.verify_checksum=$VERIFY" \
  "cohort.params.protocols.$HARDWARE.quality_only_seeds=[]" \
  "cohort.params.protocols.$HARDWARE.encoder_epochs=$ENCODER_EPOCHS" \
  "cohort.params.protocols.$HARDWARE.probe_epochs=$PROBE_EPOCHS" "${OVERRIDES[@]}" "$@" 2>&1 | tee "$OUT/run.log"
{
  echo "# cifar, seed $SEED on $DEVICE ($HARDWARE profile): $ENCODER_EPOCHS encoder + $PROBE_EPOCHS probe epochs (paper: 100 + 25), checksum verified: $VERIFY"
  echo
  "$PYTHON" -m stateaware.analysis.application --results "$OUT" --figure "$OUT/figure3c.png"
} > "$OUT/report.md"
cat "$OUT/report.md"
if [ "${COMMIT:-0}" = 1 ]; then
  # Everything but the code snapshot and submitit's pickles (the records name the commit's
  # source hash) and the encoder checkpoints (45 MB each at width 64; the artifacts table
  # keeps their SHA-256, and the committed score files are what the probe wrote from them).
  git add -- "$OUT" conf/cards ":(exclude)$OUT/.snapshots" ":(exclude)$OUT/.submitit" \
    ":(exclude)$OUT/artifacts/**/encoder.bin"
  git commit -m "bench/results: cifar seed $SEED on $DEVICE ($HARDWARE), $ENCODER_EPOCHS + $PROBE_EPOCHS epochs, checksum verified: $VERIFY" -- "$OUT" conf/cards
fi
