"""Pinned side by side vs one at a time: does the headline ratio agree?

``python bench/bench_parallel.py`` (not in CI) runs ``confirm44`` twice in one invocation on
this machine's CPU profile — one process at a time (the default of a timing cohort), then
``launcher.max_parallel=P`` with ``launcher.cpus`` cut into one CPU group per running process
— each into its own results folder, then ``analysis report`` on each, and prints the
prespecified comparisons of both side by side: estimate, interval, clock, wall time of the
launch. ``--rounds R`` repeats the pair (A B A B ...) under run ids of their own, so a slow
drift of the machine does not favour one side. The agreement the issue asks for: the
step-time ratio's estimate and both interval ends within ``--tolerance`` (0.03) of the
one-at-a-time run's, in every round.

Two one-at-a-time runs of the same code differ by chance too (at 12 processes this box
read 0.738 and 0.778 in two quiet runs, bench/results/cpu-confirm44-load-2026-12-01.md):
read a disagreement beside the intervals' widths.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
COHORT = "confirm44"
HEADLINE = "joint/eager_whole step time"


def launch(out: Path, processes: int, run_id: str, extra: list[str]) -> float:
    """Seconds one ``python -m stateaware`` launch took; exits naming it when it fails."""
    command = [
        sys.executable,
        "-m",
        "stateaware",
        f"cohort={COHORT}",
        "hardware=cpu",
        f"processes={processes}",
        f"out={out}",
        f"run_id={run_id}",
        *extra,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}")
    return time.perf_counter() - started


def comparisons(out: Path, run_id: str) -> dict[str, tuple[float, float, float, str]]:
    """``comparison -> (estimate, lower, upper, clock)`` of ``run_id``, as ``analysis report`` wrote them."""
    done = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "report", "--results", str(out), "--out", str(out / "report")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        sys.exit(f"analysis report failed ({done.returncode}) on {out}")
    glob = str(out / "comparisons" / "**" / "*.parquet").replace("'", "''")
    rows = duckdb.sql(
        f"SELECT comparison, estimate, lower, upper, clock FROM read_parquet('{glob}', hive_partitioning = true) "
        f"WHERE run_id = '{run_id}'"
    ).fetchall()
    return {name: (estimate, lower, upper, clock) for name, estimate, lower, upper, clock in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=24, help="processes per run (confirm44's own: 50)")
    parser.add_argument("--parallel", type=int, default=2, help="processes at once on the pinned side")
    parser.add_argument("--cpus", default=None, help="launcher.cpus of the pinned side (default: every CPU allowed)")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs, taking turns")
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument("--work", type=Path, default=Path("/tmp/stateaware-bench-parallel"))
    args = parser.parse_args(argv)
    cpus = args.cpus or ",".join(map(str, sorted(os.sched_getaffinity(0))))
    sides = {
        "one at a time": [],
        f"{args.parallel} pinned side by side": [f"launcher.max_parallel={args.parallel}", f"launcher.cpus=[{cpus}]"],
    }
    print(
        f"# {COHORT}, {args.processes} processes per run, {args.rounds} round(s); pinned side: "
        f"launcher.max_parallel={args.parallel} launcher.cpus=[{cpus}]; load before: {os.getloadavg()}",
        flush=True,
    )
    lines = [
        "| round | side | launch s | comparison | clock | estimate | interval |",
        "|---|---|---:|---|---|---:|---|",
    ]
    agree = True
    for round_ in range(args.rounds):
        found = {}
        for index, (side, extra) in enumerate(sides.items()):
            out = args.work / f"round{round_}-side{index}"
            run_id = f"{COHORT}-bench-r{round_}s{index}"
            shutil.rmtree(out, ignore_errors=True)  # a fresh run each time: a rerun would resume, not measure
            seconds = launch(out, args.processes, run_id, extra)
            found[side] = comparisons(out, run_id)
            for name, (estimate, lower, upper, clock) in sorted(found[side].items()):
                lines.append(
                    f"| {round_} | {side} | {seconds:.0f} | {name} | {clock} | {estimate:.4f} | "
                    f"[{lower:.4f}, {upper:.4f}] |"
                )
            print(lines[-1], flush=True)
        (a, b) = (found[side][HEADLINE] for side in sides)
        gaps = [abs(x - y) for x, y in zip(a[:3], b[:3], strict=True)]
        agree &= max(gaps) <= args.tolerance
        lines.append(
            f"| {round_} | pinned − one at a time | | {HEADLINE} | | {b[0] - a[0]:+.4f} | "
            f"lower {b[1] - a[1]:+.4f}, upper {b[2] - a[2]:+.4f} |"
        )
    print("\n".join(lines))
    print(
        f"\nagreement (estimate and interval ends within {args.tolerance} in every round): "
        f"{'yes' if agree else 'no'}; load after: {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
