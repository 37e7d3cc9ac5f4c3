"""The backbone's own cost, side by side in one run.

1. 50 no-op processes through the local launcher (fresh interpreters via submitit), at
   the default parallelism and one at a time, vs 50 bare `python -c 'import stateaware'`
   starts one after another (target from the issue: within 1.2x), and plain submitit's
   LocalExecutor running a trivial function per job, the floor under any launcher built
   on it.
2. Writing 1,000,000 timing rows as Parquet parts, then an aggregate SQL query over them
   through the read-only front end (target: under 5 s for both on 2 cores).

Usage: python bench/bench_backbone.py [--processes 50] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def bare_starts(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-c", "import stateaware"], check=True)
    return time.perf_counter() - start


def _nothing() -> None:
    return None


def plain_submitit(n: int, folder: Path) -> float:
    """The floor under any submitit-local launcher: a trivial function, one job at a time."""
    import submitit

    executor = submitit.LocalExecutor(folder)
    executor.update_parameters(timeout_min=10)
    start = time.perf_counter()
    for _ in range(n):
        job = executor.submit(_nothing)
        while not job.done():
            time.sleep(0.01)
        job.result()
    return time.perf_counter() - start


def launched(n: int, out: Path, *overrides: str) -> float:
    from hydra import compose, initialize_config_module

    from stateaware.cli import run
    from stateaware.config import register_configs

    register_configs()
    with initialize_config_module("stateaware.conf", version_base="1.3"):
        cfg = compose("config", overrides=["cohort=noop", f"processes={n}", f"out={out}", *overrides])
    start = time.perf_counter()
    code = run(cfg, progress=False)
    elapsed = time.perf_counter() - start
    assert code == 0, "the no-op cohort failed"
    return elapsed


def write_and_query(rows: int, out: Path) -> tuple[float, float]:
    import numpy as np
    from stateaware.analysis.store.sql import query

    from stateaware.cost_runtime import METHODS
    from stateaware.records.writer import Identity, RecordWriter

    per_process = rows // 50
    methods = np.array(METHODS)
    start = time.perf_counter()
    for p in range(50):
        writer = RecordWriter(out, Identity("bench", "bench", p, "0" * 64, "cpu", 1.0))
        steps = np.arange(per_process) % 23
        writer.write(
            "timings",
            {
                "method": methods[np.arange(per_process) % len(METHODS)],
                "step": steps,
                "warmup": steps < 3,
                "step_ms": np.random.default_rng(p).gamma(9.0, 1.0, per_process),
                "peak_allocated_bytes": np.full(per_process, 2**30),
            },
            part="all",
        )
    wrote = time.perf_counter() - start
    start = time.perf_counter()
    ((names, result),) = query(
        out,
        "SELECT method, count(*) n, avg(step_ms) ms, max(peak_allocated_bytes) peak "
        "FROM timings WHERE NOT warmup GROUP BY method ORDER BY method",
    )
    queried = time.perf_counter() - start
    assert sum(r[1] for r in result) == sum(1 for s in range(per_process) if s % 23 >= 3) * 50
    return wrote, queried


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=50)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.processes
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bare = bare_starts(n)
        fanned = launched(n, tmp / "a")
        serial = launched(n, tmp / "b", "launcher.max_parallel=1")
        floor = plain_submitit(n, tmp / "d")
        wrote, queried = write_and_query(args.rows, tmp / "c")
    print(
        f"{n} bare `python -c 'import stateaware'` starts, one after another: {bare:7.2f} s "
        f"({bare / n * 1e3:6.1f} ms each)"
    )
    print(
        f"{n} no-op processes, local launcher, default parallelism:      {fanned:7.2f} s  "
        f"ratio {fanned / bare:5.2f}x (target 1.2x)"
    )
    print(
        f"{n} no-op processes, local launcher, max_parallel=1:            {serial:7.2f} s  ratio {serial / bare:5.2f}x"
    )
    print(
        f"{n} trivial jobs through plain submitit LocalExecutor, serial: {floor:7.2f} s  ratio {floor / bare:5.2f}x "
        f"(submitit starts a controller and a task interpreter per job)"
    )
    print(f"write {args.rows:,} timing rows as Parquet parts:                   {wrote:7.2f} s")
    print(
        f"aggregate query over them (read-only SQL front end):           {queried:7.2f} s  "
        f"total {wrote + queried:5.2f} s (target < 5 s)"
    )


if __name__ == "__main__":
    main()
