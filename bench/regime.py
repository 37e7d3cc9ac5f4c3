"""Does a CPU shape keep the H100's cost regime? Per-step costs of the three workloads.

The three-workload result (paper Table 8: regions/whole .3954 / .6085 / .4895) is decided
by how a whole-state copy compares with a segment's compute and the per-segment fixed
cost. The paper's Table 10 gives that regime on the H100 at 64 live segments and 0.1%
writes: from 64 MiB to 1024 MiB the whole method goes from 2.8x to 7.6x eager (the copies
take over), while regions stay ~3x eager. This script measures, on this machine, the
memory bandwidth (a 64 MiB ``copy_``), then for each workload and buffer size the step
time of ``eager``, ``whole`` and ``region`` on every segment (one thread, CPU time,
rounds alternating methods) and prints whole/eager, region/eager and region/whole —
the numbers to hold beside the H100's when choosing the CPU profile's shape.

``--live`` and ``--fraction`` pick another of the calibration grid's cells (Table 10: 1 or
64 live segments, 0.1 % or 100 % writes); the last column then quotes Table 10's time/whole
at 1,024 MiB for that cell. ``--width/--batch/--rank`` give the pressure cells' shapes.

    .venv/bin/python bench/regime.py [--mib 0.5 2 8] [--live 64] [--fraction 0.001] [--steps 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from read_recording import ms_per_step  # bench/ is the script's own folder, first on sys.path
from stateaware.analysis.sections.timing import PAPER_T8, PAPER_T10  # the paper's tables, as the report quotes them

from stateaware.cost_runtime.workloads import WORKLOADS, Shape, build


def bandwidth_gb_s(mib: int = 64, repeats: int = 5) -> float:
    """Bytes moved (read + write) per second by one-thread ``copy_`` of ``mib`` MiB."""
    src = torch.ones(mib << 18)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        began = time.thread_time()
        dst.copy_(src)
        best = min(best, time.thread_time() - began)
    return 2 * src.numel() * 4 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=float, nargs="+", default=[0.5, 2, 8])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--live", type=int, default=64)
    parser.add_argument("--fraction", type=float, default=0.001)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"copy bandwidth (one thread, 64 MiB): {bandwidth_gb_s():.1f} GB/s")
    print(
        f"{'workload':20} {'MiB':>5} {'eager ms':>9} {'whole ms':>9} {'region ms':>9} "
        f"{'whole/eager':>11} {'region/eager':>12} {'region/whole':>12}  paper region/whole (H100, 1 GiB)"
    )
    for name in WORKLOADS:
        for mib in args.mib:
            shape = Shape(
                workload=name,
                buffer_bytes=int(mib * 2**20),
                write_fraction=args.fraction,
                live_segments=args.live,
                granularity_bytes=256,
                width=args.width,
                batch=args.batch,
                rank=args.rank,
            )
            workload = build(shape, seed=0)
            times: dict[str, list[float]] = {m: [] for m in ("eager", "whole", "region")}
            for r in range(args.rounds + 1):
                for method in times:
                    t = ms_per_step(workload, shape, method, args.steps, start=r * args.steps)
                    if r:  # round 0 warms up
                        times[method].append(t)
            e, w, g = (statistics.median(times[m]) for m in times)
            # Table 8 is the 64-live, 0.1 % cell; any other cell is Table 10's (its time/whole).
            t10 = PAPER_T10.get((name, 1024, args.fraction, args.live))
            paper = PAPER_T8[name][0] if (args.live, args.fraction) == (64, 0.001) else "—"
            paper = f"{paper}; T10 {t10[1]:.3f}" if t10 else paper
            print(f"{name:20} {mib:5g} {e:9.1f} {w:9.1f} {g:9.1f} {w / e:11.2f} {g / e:12.2f} {g / w:12.3f}  {paper}")


if __name__ == "__main__":
    main()
