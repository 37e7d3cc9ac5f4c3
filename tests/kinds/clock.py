"""Test cohort kind: sleeps, then records when and where it ran (JSON in ``detail``) and a few timing rows.

params: pad_kib (int: that many KiB of random hex text in the records row, to fill a disk),
sleep_s (float), sleep_index (int or -1: only that process sleeps), sleep_once_dir
(sleep only the first time, remembered by a marker file there), rows (int),
fail_index (int or -1), die_index (int or -1) with
marker_dir: the process with index die_index SIGKILLs itself the first time it runs
(it leaves a marker file so the retry survives).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def run(spec, writer) -> None:
    params = spec.params
    started = time.time()
    rows = int(params.get("rows", 3))
    writer.write(
        "timings",
        {
            "method": ["m"] * rows,
            "step": list(range(rows)),
            "warmup": [False] * rows,
            "step_ms": [float(i) for i in range(rows)],
        },
        part="m",
    )
    if int(params.get("sleep_index", -1)) in (-1, spec.process_index):
        once = params.get("sleep_once_dir")
        marker = Path(once) / f"slept-{spec.process_index}" if once else None
        if marker is None or not marker.exists():
            if marker is not None:
                marker.touch()
            time.sleep(float(params.get("sleep_s", 0.0)))
    if spec.process_index == int(params.get("fail_index", -1)):
        raise ValueError(f"deliberate failure in process {spec.process_index}")
    if spec.process_index == int(params.get("die_index", -1)):
        marker = Path(params["marker_dir"]) / f"died-{spec.process_index}"
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    pad = os.urandom(int(params.get("pad_kib", 0)) * 512).hex()
    seen = {
        "pad": pad,
        "started": started,
        "ended": time.time(),
        "pid": os.getpid(),
        "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_RESTART_COUNT")},
    }
    writer.write(
        "records", [{"method": "clock", "outcome": "match", "seed": spec.seed, "detail": json.dumps(seen)}], part="main"
    )
