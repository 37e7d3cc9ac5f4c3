"""What compiling per block costs against compiling the whole model, at equal partitioner budgets.

``stateaware.auto``'s compiled arm compiles each segment by itself (and the code between
the segments), so it cannot fuse across a block boundary as whole-model compilation can.
This bench measures that cost alone, with no plan of ours: on ``bench_budget``'s GPT-2 and
ViT-tiny, side by side in one process,

* ``compile@B`` — ``torch.compile`` (inductor) of the whole model at
  ``activation_memory_budget`` B (``bench_budget``'s rival);
* ``per block@B`` — each block compiled by itself at budget B, the code between the blocks
  compiled too, each block's call a graph break (``stateaware.auto.compiled``'s way,
  nothing recomputed by us).

for B in 1.0, 0.7, 0.5. Clock and memory as ``bench_budget``'s: thread CPU time on one
thread, the median of seeded shuffled rounds, glibc keeping freed memory, peaks by
``stateaware.auto.step_peak_bytes``. The last column is per block's CPU time over
``compile@B``'s: the share of the compiled arm's gap to ``compile@B`` that no plan can
close.

Usage: ``python bench/bench_regional.py [--rounds 9] [--models gpt2,vit] [--budgets 1.0,0.7,0.5]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_budget import (  # noqa: E402
    MALLOC_DOC,
    MODELS,
    TRANSFORMERS,
    Row,
    _compiled,
    _first_step,
    _machine,
    _step,
    _zero,
    model_keys,
    steady_malloc,
)
from stateaware import auto  # noqa: E402
from stateaware.auto.compiled import compiled_forward  # noqa: E402
from stateaware.auto.segment import select_segments  # noqa: E402
from stateaware.torch_replay._torch_compat import dynamo_disable  # noqa: E402

INDUCTOR = {"backend": "inductor"}


def per_block(model: torch.nn.Module, names: list[str], budget: float) -> torch.nn.Module:
    """``model`` with each block ``names`` compiled by itself at ``budget`` and its own
    forward compiled around them, a graph break at each block's call."""
    for name in names:
        block = model.get_submodule(name)
        block.forward = dynamo_disable(compiled_forward(block, INDUCTOR, budget))
    model.forward = compiled_forward(model, INDUCTOR, budget)
    return model


def run(key: str, budgets: list[float], rounds: int) -> str:
    spec = MODELS[key](False)
    names = select_segments(spec.build(), spec.segments)
    torch._dynamo.reset()
    rows = [Row("eager", "rival", spec.build())]
    for budget in budgets:
        rows.append(Row(f"compile@{budget}", "rival", _compiled(spec.build(), budget, "inductor")))
        rows.append(Row(f"per block@{budget}", "rival", per_block(spec.build(), names, budget)))
    for row in rows:
        _first_step(row, spec.example)
        row.peak = auto.step_peak_bytes(row.model, spec.example)
    order = random.Random(0)
    for _ in range(rounds):
        for row in order.sample(rows, len(rows)):
            _zero(row.model)
            start = time.thread_time()
            _step(row.model, spec.example)
            row.cpu.append((time.thread_time() - start) * 1e3)
    eager_peak, eager_cpu = rows[0].peak, statistics.median(rows[0].cpu)
    lines = [
        f"### {spec.name}",
        "",
        "| method | peak MiB (×eager) | CPU ms (×eager) | per block / compile@B (CPU) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cpu = statistics.median(row.cpu)
        ratio = ""
        if row.method.startswith("per block@"):
            whole = next(r for r in rows if r.method == f"compile@{row.method.split('@')[1]}")
            ratio = f"{cpu / statistics.median(whole.cpu):.3f}"
        lines.append(
            f"| {row.method} | {row.peak / 2**20:.2f} ({row.peak / eager_peak:.3f}) | "
            f"{cpu:.1f} ({cpu / eager_cpu:.2f}) | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="shuffled timing rounds (median kept)")
    parser.add_argument("--models", default=",".join(TRANSFORMERS), help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--budgets", default="1.0,0.7,0.5", help="activation_memory_budget values, comma-separated")
    args = parser.parse_args(argv)
    keys = model_keys(parser, args.models)
    try:
        budgets = [float(b) for b in args.budgets.split(",")]
    except ValueError:
        parser.error(f"--budgets: {args.budgets!r} is not a comma-separated list of numbers, e.g. 1.0,0.7,0.5")
    if not all(0.0 <= b <= 1.0 for b in budgets):
        parser.error(f"--budgets: {args.budgets!r}; each budget lies in [0, 1]")
    malloc = steady_malloc(argv)
    torch.set_num_threads(1)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    print(f"{_machine()}; torch {torch.__version__}; 1 thread; medians of {args.rounds} shuffled rounds; "
          f"clock: thread CPU time; malloc: {MALLOC_DOC[malloc]}\n")  # fmt: skip
    for key in keys:
        print(run(key, budgets, args.rounds), "\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
