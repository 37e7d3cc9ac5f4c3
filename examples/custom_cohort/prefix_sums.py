"""A user's own cohort kind: two ways to compute a prefix sum, timed in fresh processes.

This file is the whole kind; ``conf/cohort/prefix_sums.yaml`` is the whole cohort. Run
from this folder (the kind is imported from the directory the command runs in, and the
code snapshot carries this file to every worker)::

    python -m stateaware --config-dir conf cohort=prefix_sums
    python -m stateaware.analysis report

Each process times the two implementations on the same seeded vector — ``python``, a
plain loop, and ``numpy``, ``numpy.cumsum`` — in an order drawn from the process seed,
checks that both give the exact prefix sums (``records``: one row per implementation),
then records every warm-up and measured step on both clocks (``timings``) and the peak
of one extra, untimed step (``tracemalloc``). The cohort's prespecified comparison is
``numpy / python`` step time, paired by process.

The contract a kind fulfils (``stateaware.cohorts``): ``run(spec, writer)``, and
optionally ``expand(cohort, hardware, processes)`` and ``PARAMS``.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from typing import Any

from stateaware.clocks import StepTime, time_step, timing_rows
from stateaware.launch.params import Param

#: The implementations this kind can time, by the name their rows carry in ``method``.
METHODS = ("python", "numpy")

#: Checked once when the run is planned, before any process starts: a bad value fails the
#: command with one line naming ``params.KEY`` and what is allowed.
PARAMS = {
    "length": Param(int, minimum=1, maximum=10_000_000, required=True),  # elements in the vector
    "methods": Param(list, item=str, choices=METHODS, required=True),
    "warmup": Param(int, minimum=0, maximum=10_000, required=True),  # untimed-for-analysis steps
    "steps": Param(int, minimum=1, maximum=100_000, required=True),  # measured steps per method
}


def expand(cohort: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """Per process, the order its methods run in, drawn from the process's seed.

    A machine's slow drift (load, temperature) then spreads over both methods instead of
    always penalising the one that runs second. ``python -m stateaware ... dry_run=true``
    shows the orders.
    """
    methods = list(cohort["params"]["methods"])
    seed = int(cohort["seed"])
    return [{"order": random.Random(seed + i).sample(methods, len(methods))} for i in range(processes)]


def _implementations(values: list[float]) -> dict[str, Callable[[], Any]]:
    import numpy as np

    array = np.asarray(values, dtype=np.float64)

    def python() -> list[float]:
        out, total = [], 0.0
        for value in values:
            total += value
            out.append(total)
        return out

    return {"python": python, "numpy": lambda: np.cumsum(array)}


def run(spec: Any, writer: Any) -> None:
    """One process: check both implementations, then time each (warm-ups, measured steps, one peak step)."""
    from itertools import accumulate

    params = spec.params
    length, warmup, steps = int(params["length"]), int(params["warmup"]), int(params["steps"])
    rng = random.Random(spec.seed)
    # Integer-valued float64 inputs: every prefix sum is exact, so both implementations must
    # equal the integer prefix sums bit for bit.
    values = [float(rng.randint(-1000, 1000)) for _ in range(length)]
    exact = list(accumulate(int(v) for v in values))
    implementations = _implementations(values)

    checks = []
    for method in params["methods"]:
        got = [float(x) for x in implementations[method]()]
        error = (
            max((abs(g - e) for g, e in zip(got, exact, strict=True)), default=0.0)
            if len(got) == length
            else float("inf")
        )
        checks.append(
            {
                "backend": "python",
                "method": method,
                "family": "prefix_sums",
                "precision": "fp64",
                "seed": spec.seed,
                "outcome": "match" if error == 0.0 else "diverge",
                "max_error": error,
                "tolerance": 0.0,
                "dimension": length,
            }
        )
    writer.write("records", checks, part="checks")

    for method in params["order"]:
        fn = implementations[method]
        times = []
        for i in range(warmup + steps):
            wall_ms, cpu_ms = time_step(fn)
            times.append(
                StepTime(warmup=i < warmup, step=i if i < warmup else i - warmup, wall_ms=wall_ms, cpu_ms=cpu_ms)
            )
        tracemalloc.start()  # the peak of one extra step: tracing would slow the timed ones
        fn()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        writer.write(
            "timings",
            timing_rows(
                times,
                method=method,
                precision="fp64",
                peak_allocated_bytes=peak,
                peak_source="tracemalloc",
                device="cpu",
                seed=spec.seed,
                width=length,
            ),
            part=f"method={method}",
        )
