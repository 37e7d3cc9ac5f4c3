"""A demonstration cohort kind: seeded NumPy matrix products, timed, with a checksum.

Not part of the paper's programme; it exists so the launcher, the record store and the
SQL can be tried in seconds on any machine. Peaks come from ``tracemalloc`` (a real
measurement of Python-allocated bytes), and say so in ``peak_source``.
"""

from __future__ import annotations

import hashlib
import tracemalloc

import numpy as np

from stateaware.clocks import StepTime, collector_paused, time_step, timing_rows
from stateaware.kinds import Param, ProcessSpec
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params). The size bound keeps the
#: three float64 matrices of a process under 0.5 GiB: a demo, not a stress test.
PARAMS = {
    "size": Param(int, minimum=1, maximum=4096, required=True),  # matrix side
    "warmup": Param(int, minimum=0, maximum=100_000, required=True),
    "steps": Param(int, minimum=1, maximum=100_000, required=True),
}


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    size, warmup, steps = int(spec.params["size"]), int(spec.params["warmup"]), int(spec.params["steps"])
    rng = np.random.default_rng(spec.seed)
    a, b = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    product: dict[str, np.ndarray] = {}  # each step's result replaces the last, as a plain assignment would
    times, peaks = [], []
    with collector_paused():  # NOTE [ No garbage collection inside a timed step ] (stateaware.clocks)
        for i in range(warmup + steps):
            tracemalloc.start()
            wall_ms, cpu_ms = time_step(lambda: product.__setitem__("c", a @ b))
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            times.append(StepTime(i < warmup, i if i < warmup else i - warmup, wall_ms, cpu_ms))
            peaks.append(peak)
    c = product["c"]
    rows = [
        {**row, "peak_allocated_bytes": peak}
        for row, peak in zip(
            timing_rows(
                times,
                method="matmul",
                precision="fp64",
                peak_source="tracemalloc",
                device="cpu",
                seed=spec.seed,
                width=size,
            ),
            peaks,
            strict=True,
        )
    ]
    writer.write("timings", rows, part="matmul")
    digest = hashlib.sha256(c.tobytes()).hexdigest()
    writer.write(
        "records",
        [
            {
                "backend": "numpy",
                "method": "matmul",
                "family": "demo",
                "precision": "fp64",
                "seed": spec.seed,
                "outcome": "match",
                "sha256": digest,
                "max_error": float(abs(c.sum() - (a.sum(axis=0) @ b.sum(axis=1)))),
            }
        ],
        part="main",
    )
