#!/usr/bin/env bash
# Run on a machine with network, before a GPU lease: put into .gpu-wheels/cp<XY>/ (git-ignored)
# exactly the wheels a bare GPU machine lacks for CPython PY (default 3.12, the GPU image's) on
# manylinux x86-64 — hydra-core, omegaconf, antlr4-python3-runtime (built from its sdist),
# PyYAML, submitit, cloudpickle, duckdb, nvidia-ml-py and their needs, pinned with SHA-256 in
# bench/gpu-wheels.lock — plus this checkout's own wheel (the image has no setuptools) and
# lock.txt (each file's SHA-256 and the checkout's source hash); then print the folder's size.
#
#   bench/gpu_prepare.sh              # from the committed lock (re-run after changing the code:
#                                     # bench/gpu_run.sh refuses a wheel whose source hash differs)
#   RELOCK=1 bench/gpu_prepare.sh     # re-resolve pyproject's ranges first, rewriting the lock
#   PY=3.11 DEST=/tmp/w bench/gpu_prepare.sh   # another Python (CI's dry run uses its own)
#
# The locked wheels are cached under ~/.cache/stateaware/gpu-wheels/ by the lock's hash
# ($STATEAWARE_GPU_WHEELS), so a second prepare is offline. Runs under the project's venv
# (it needs pip and setuptools): PYTHON=.venv/bin/python by default.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-3.12}"
PYTHON="${PYTHON:-.venv/bin/python}"
DEST="${DEST:-.gpu-wheels/cp${PY/./}}"
if [ "${RELOCK:-0}" = 1 ]; then
  "$PYTHON" bench/gpu_wheels.py lock
fi
"$PYTHON" bench/gpu_wheels.py fetch --python "$PY" --dest "$DEST"
SIZE_KIB=$(du -sk "$DEST" | cut -f1)
echo "$DEST: $((SIZE_KIB / 1024)) MiB on disk (a lease carries at most 64 MiB in all)"
if [ "$SIZE_KIB" -gt $((48 * 1024)) ]; then
  echo "too large to travel with the checkout: duckdb is the largest wheel; nvidia-ml-py is optional (device clocks)" >&2
  exit 1
fi
