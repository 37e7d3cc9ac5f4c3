#!/usr/bin/env bash
# One command on a bare, offline GPU machine (Python 3.12 + torch, torchvision, numpy, pyarrow,
# scipy, matplotlib, tqdm; nothing else): install the wheels bench/gpu_prepare.sh put in
# .gpu-wheels/ into a temporary site (pip --no-index --no-deps --target), preflight (every
# import resolves from there, CUDA is visible, one tiny step), then the two checks at the
# short protocol, each under its own timeout:
#   fair44  bench/gpu_check.sh, BATCH=16384 STEPS=10 WARMUP=3 (paper Table 6 at a quarter batch)
#   cifar   bench/gpu_cifar.sh, ENCODER_EPOCHS=2 PROBE_EPOCHS=1 on a generated archive (Table 9)
# and write OUT (default bench/results/gpu-<device>-<date>/) with at most 8 entries:
#   summary.md report.md figures/ records.tar env.txt nvidia-smi.txt run.log lock.txt
#
#   bench/gpu_run.sh                    # everything, ~6 minutes on an H200
#   PREFLIGHT=1 bench/gpu_run.sh        # install + preflight only (under a minute)
#   PARTS=cifar OUT=<folder> bench/gpu_run.sh   # rerun one part into an earlier folder
#   HARDWARE=cpu bench/gpu_run.sh       # the CPU dry run of the same wiring (CI runs it)
#
# Environment: PYTHON (python3), WHEELS (.gpu-wheels/cp<XY>), FAIR44_TIMEOUT (210 s),
# CIFAR_TIMEOUT (240 s); FAIR44_ARGS / CIFAR_ARGS: extra Hydra overrides (the dry run's sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
HARDWARE="${HARDWARE:-h100}"
PARTS="${PARTS:-fair44,cifar}"
PYTHON="${PYTHON:-python3}"
TAG="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
WHEELS="${WHEELS:-.gpu-wheels/$TAG}"
if [ ! -f "$WHEELS/lock.txt" ]; then
  echo "no wheels at $WHEELS: run bench/gpu_prepare.sh (PY=${TAG#cp3}) on a machine with network first" >&2
  exit 2
fi
if [ "$HARDWARE" = cpu ]; then
  DEVICE=cpu
else
  # The folder's name only; the preflight is what refuses a machine without CUDA.
  DEVICE="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | sed 's/-*$//')"
  DEVICE="${DEVICE:-gpu}"
fi
OUT="${OUT:-bench/results/gpu-${DEVICE}-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
SITE="$SCRATCH/site"
WORK="$SCRATCH/records"  # the parts' folders; records.tar at the end
mkdir -p "$WORK"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== gpu_run $(date -u +%FT%TZ): hardware $HARDWARE, parts $PARTS, wheels $WHEELS, out $OUT"

# The wheels shadow nothing the image has beyond their own names; PYTHONSAFEPATH keeps the
# checkout's stateaware/ (run from the repository root) from shadowing the installed wheel.
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1 PYTHON
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"
"$PYTHON" bench/gpu_wheels.py install --wheels "$WHEELS" --target "$SITE"
cp "$WHEELS/lock.txt" "$OUT/lock.txt"
"$PYTHON" bench/gpu_preflight.py --site "$SITE" --hardware "$HARDWARE" --env "$OUT/env.txt"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
else
  echo "no nvidia-smi on this machine (hardware $HARDWARE)" > "$OUT/nvidia-smi.txt"
fi
if [ "${PREFLIGHT:-0}" = 1 ]; then
  echo "== preflight passed; PREFLIGHT=1 stops here"
  exit 0
fi

# A rerun of one part keeps the other parts' records from the earlier run.
if [ -f "$OUT/records.tar" ]; then
  tar -xf "$OUT/records.tar" -C "$WORK"
fi
STATUS=0
run_part() {  # name timeout command...: one part under its own timeout, its failure logged, not fatal
  local name="$1" limit="$2"
  shift 2
  rm -rf "${WORK:?}/$name"
  echo "== part $name (timeout ${limit}s)"
  local rc=0 start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "== part $name FAILED after $((SECONDS - start)) s (exit $rc$([ "$rc" = 124 ] && echo ', timed out'))"
    STATUS=1
  else
    echo "== part $name done in $((SECONDS - start)) s"
  fi
}
# shellcheck disable=SC2086  # *_ARGS are space-separated Hydra overrides
case ",$PARTS," in *,fair44,*)
  run_part fair44 "${FAIR44_TIMEOUT:-210}" env HARDWARE="$HARDWARE" BATCH=16384 STEPS="${STEPS:-10}" \
    WARMUP="${WARMUP:-3}" OUT="$WORK/fair44" bash bench/gpu_check.sh ${FAIR44_ARGS:-} ;;
esac
# The generated archive is sized to fit the lease: a quarter of CIFAR's images (the paper's
# shapes otherwise: width 64, batch 128, 64 MiB queue), said in report.md's header via the rows.
if [ "$HARDWARE" = cpu ]; then
  CIFAR_SIZE=()
else
  CIFAR_SIZE=(GENERATE_TRAIN=12500 GENERATE_TEST=2500)
  CIFAR_ARGS="${CIFAR_ARGS-cohort.params.protocols.$HARDWARE.fit=10000 cohort.params.protocols.$HARDWARE.validation=2500}"
fi
# shellcheck disable=SC2086
case ",$PARTS," in *,cifar,*)
  run_part cifar "${CIFAR_TIMEOUT:-240}" env HARDWARE="$HARDWARE" ENCODER_EPOCHS=2 PROBE_EPOCHS=1 GENERATE=1 \
    "${CIFAR_SIZE[@]}" ARCHIVE="$SCRATCH/none.tar.gz" OUT="$WORK/cifar" bash bench/gpu_cifar.sh ${CIFAR_ARGS:-} ;;
esac

# The parts' reports, one file; the summary and figures from the records.
for part in fair44 cifar; do
  if [ -f "$WORK/$part/report.md" ]; then cat "$WORK/$part/report.md"; echo; fi
done > "$OUT/report.md"
rm -rf "$OUT/figures"
"$PYTHON" bench/gpu_summary.py --fair44 "$WORK/fair44" --cifar "$WORK/cifar" --out "$OUT" \
  --header "GPU lease on $DEVICE ($HARDWARE profile), $(date -u +%F): ours beside the paper's" || STATUS=1
# Code snapshots and submitit pickles stay out: the records name the source hash (lock.txt).
tar -cf "$OUT/records.tar" -C "$WORK" --exclude=.snapshots --exclude=.submitit --exclude='encoder.bin' .
echo "== done $(date -u +%FT%TZ) after $SECONDS s, status $STATUS: $(ls "$OUT" | tr '\n' ' ')"
exit "$STATUS"
