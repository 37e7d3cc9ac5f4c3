"""Rule 6's cost per step: reads recorded on every call vs learned on the first call.

Runs the cost runtime's feature-queue workload (64 small segments, CPU, one thread) with
every segment ``eager``, ``whole`` or ``region``, alternating the two read-recording
modes (``stateaware.torch_replay.set_read_recording``) round by round so both see the
same machine, and prints the median CPU (thread) time per step of each and their ratio.

    .venv/bin/python bench/read_recording.py [--rounds 7] [--steps 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from stateaware.cost_runtime.methods import forward
from stateaware.cost_runtime.workloads import Shape, build, seed_step, step_rows
from stateaware.torch_replay import set_read_recording

SHAPE = Shape(
    workload="feature_queue",
    buffer_bytes=524288,
    write_fraction=0.001,
    live_segments=64,
    granularity_bytes=4096,
    width=16,
    batch=8,
    rank=1,
)


def ms_per_step(workload, shape: Shape, method: str, steps: int, start: int) -> float:
    """CPU (thread) ms per training step of ``workload`` with ``method`` on every segment."""
    cpu = torch.device("cpu")
    began = time.thread_time()
    for i in range(start, start + steps):
        rows = step_rows(shape, seed=0, step=i, device=cpu)
        seed_step(0, i)
        loss, _ = forward(workload, rows, (method,) * shape.live_segments)
        loss.backward()
        for p in workload.params:
            p.grad = None
    return (time.thread_time() - began) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    workload = build(SHAPE, seed=0, device=torch.device("cpu"))
    print(f"{'method':8} {'every_call ms':>14} {'first_call ms':>14} {'ratio':>6}")
    for method in ("eager", "whole", "region"):
        times: dict[str, list[float]] = {"every_call": [], "first_call": []}
        for r in range(args.rounds + 1):
            for mode in times:
                set_read_recording(mode)
                t = ms_per_step(workload, SHAPE, method, args.steps, start=r * args.steps)
                if r:  # round 0 warms up both
                    times[mode].append(t)
        every, first = (statistics.median(times[m]) for m in times)
        print(f"{method:8} {every:14.1f} {first:14.1f} {first / every:6.3f}")
    set_read_recording("first_call")


if __name__ == "__main__":
    main()
