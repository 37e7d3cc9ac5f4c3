"""Test cohort kind: sleeps, then records when it ran and a few timing rows.

params: sleep_s (float), rows (int), fail_index (int or -1), die_index (int or -1) with
marker_dir: the process with index die_index SIGKILLs itself the first time it runs
(it leaves a marker file so the retry survives).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def run(spec, writer) -> None:
    params = spec.params
    started = time.time()
    time.sleep(float(params.get("sleep_s", 0.0)))
    if spec.process_index == int(params.get("fail_index", -1)):
        raise ValueError(f"deliberate failure in process {spec.process_index}")
    rows = int(params.get("rows", 3))
    writer.write("timings", {"method": ["m"] * rows, "step": list(range(rows)), "warmup": [False] * rows,
                             "step_ms": [float(i) for i in range(rows)]}, part="m")
    if spec.process_index == int(params.get("die_index", -1)):
        marker = Path(params["marker_dir"]) / f"died-{spec.process_index}"
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    writer.write("records", [{"method": "clock", "outcome": "match", "seed": spec.seed,
                              "detail": f"{started!r} {time.time()!r} {os.getpid()}"}], part="main")
