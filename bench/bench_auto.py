"""Benchmark ``stateaware.auto`` against no checkpointing and torch's activation checkpointing.

Side by side in one run, on two stateful models (the examples' models):

* ResNet-18 (torchvision, BatchNorm in every block; 16 images of 32x32), segments its
  eight BasicBlocks;
* the MoCo-style queue model (``examples/auto_queue.py``: conv blocks with BatchNorm, a
  contrast head writing a ring feature queue and a Python int pointer), segments its
  encoder blocks and the head.

Methods: ``eager`` (no checkpointing); ``torch`` (torch's
``apply_activation_checkpointing`` — ``checkpoint_wrapper``, non-reentrant — on every
segment); ``ours@25%/50%/75%`` (``stateaware.auto``: one profile, a plan at each budget,
applied). For each: the measured peak of one training step (bytes live at its start plus
the CPU profiler's window peak — the cost runtime's CPU method; the CUDA allocator's
peak on a GPU), the median step time over ``--steps`` timed steps after a warm-up, both
as wall time and as CPU time of the thread (``time.thread_time``; the machine may be
shared), the predicted peak where there is a plan, and whether ``--check-steps`` training
steps leave parameters, buffers and (for the queue model) the queue and its pointer
byte-identical to eager's.

Usage: ``python bench/bench_auto.py [--steps 5] [--check-steps 3] [--threads 1]``; prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import stateaware.auto as auto

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BUDGETS = ("25%", "50%", "75%")


def _example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resnet() -> dict[str, Any]:
    ex = _example("auto_resnet")

    def step(model: torch.nn.Module, index: int) -> None:
        x, y = ex.batch(index)
        F.cross_entropy(model(x), y).backward()

    return {
        "name": "ResNet-18 (16x3x32x32)",
        "model": ex.build(),
        "segments": ex.SEGMENTS,
        "example": (ex.batch(0)[0],),
        "step": step,
        "extra": lambda m: {},
    }


def _queue() -> dict[str, Any]:
    ex = _example("auto_queue")
    torch.manual_seed(0)
    model = ex.Moco()

    def step(model: torch.nn.Module, index: int) -> None:
        logits = model(*ex.batch(index))
        F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.int64)).backward()

    def extra(m: torch.nn.Module) -> dict[str, Any]:
        contrast = m.get_submodule("contrast")
        inner = getattr(contrast, "_checkpoint_wrapped_module", contrast)
        return {"ptr": inner.ptr}

    return {
        "name": "MoCo-style queue model",
        "model": model,
        "segments": model.segment_names(),
        "example": ex.batch(0),
        "step": step,
        "extra": extra,
    }


def _torch_variant(model: torch.nn.Module, segments: list[str]) -> torch.nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    targets = {id(model.get_submodule(name)) for name in segments}
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
        check_fn=lambda m: id(m) in targets,
    )
    return model


def _state(model: torch.nn.Module, extra: Callable[[torch.nn.Module], dict[str, Any]]) -> dict[str, Any]:
    # checkpoint_wrapper's state_dict hook strips its prefix, so keys compare across methods.
    return {**{k: v.detach().clone() for k, v in model.state_dict().items()}, **extra(model)}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


def _train(model: torch.nn.Module, step, steps: int) -> None:
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
    for index in range(steps):
        optimizer.zero_grad(set_to_none=False)
        step(model, index)
        optimizer.step()
        if hasattr(model, "momentum_update"):
            model.momentum_update()


def _timed(model: torch.nn.Module, step, steps: int) -> tuple[float, float]:
    """Median wall and thread-CPU milliseconds of ``steps`` steps after one warm-up."""
    for p in model.parameters():
        p.grad = None
    step(model, 0)
    wall, cpu = [], []
    for index in range(steps):
        for p in model.parameters():
            p.grad = None  # gradients as a step with zero_grad(set_to_none=True) has them
        w, c = time.perf_counter(), time.thread_time()
        step(model, index + 1)
        cpu.append((time.thread_time() - c) * 1e3)
        wall.append((time.perf_counter() - w) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def run_model(spec: dict[str, Any], steps: int, check_steps: int) -> list[dict[str, Any]]:
    """Every method on one model: peak, times, prediction and the correctness check."""
    base, step, example = spec["model"], spec["step"], spec["example"]
    t0 = time.perf_counter()
    card = auto.profile(copy.deepcopy(base), example, segments=spec["segments"])
    profile_s = time.perf_counter() - t0
    methods: dict[str, tuple[torch.nn.Module, Any]] = {
        "eager": (copy.deepcopy(base), None),
        "torch (every block)": (_torch_variant(copy.deepcopy(base), spec["segments"]), None),
    }
    for budget in BUDGETS:
        chosen = auto.plan(card, budget)
        methods[f"ours@{budget}"] = (auto.apply(copy.deepcopy(base), chosen), chosen)

    reference = copy.deepcopy(base)
    torch.manual_seed(1)
    _train(reference, step, check_steps)
    want = _state(reference, spec["extra"])
    rows = []
    for name, (model, chosen) in methods.items():
        probe = copy.deepcopy(model)
        peak = auto.step_peak_bytes(probe, example, functools.partial(step, probe, 0))
        wall, cpu = _timed(copy.deepcopy(model), step, steps)
        trained = copy.deepcopy(model)
        torch.manual_seed(1)
        _train(trained, step, check_steps)
        rows.append(
            {
                "model": spec["name"],
                "method": name,
                "peak_bytes": peak,
                "predicted_peak_bytes": None if chosen is None else chosen.predicted_peak_bytes,
                "policy": None if chosen is None else chosen.policy,
                "wall_ms": wall,
                "cpu_ms": cpu,
                "identical": _same(_state(trained, spec["extra"]), want),
                "profile_s": profile_s,
            }
        )
    eager = rows[0]
    for row in rows:
        row["peak_ratio"] = row["peak_bytes"] / eager["peak_bytes"]
        row["wall_ratio"] = row["wall_ms"] / eager["wall_ms"]
        row["cpu_ratio"] = row["cpu_ms"] / eager["cpu_ms"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of ``rows``."""
    mib = float(1 << 20)
    lines = [
        "| model | method | measured peak MiB (×eager) | predicted MiB | step wall ms (×eager) | "
        "step CPU ms (×eager) | equals eager after training | policy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        predicted = "" if r["predicted_peak_bytes"] is None else f"{r['predicted_peak_bytes'] / mib:.2f}"
        policy = "" if r["policy"] is None else " ".join(o[0] for o in r["policy"])
        lines.append(
            f"| {r['model']} | {r['method']} | {r['peak_bytes'] / mib:.2f} ({r['peak_ratio']:.3f}) | {predicted} | "
            f"{r['wall_ms']:.1f} ({r['wall_ratio']:.2f}) | {r['cpu_ms']:.1f} ({r['cpu_ratio']:.2f}) | "
            f"{'yes' if r['identical'] else 'NO'} | {policy} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per method (median kept)")
    parser.add_argument("--check-steps", type=int, default=3, help="training steps compared with eager")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--models", default="resnet,queue", help="comma-separated: resnet, queue")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    builders = {"resnet": _resnet, "queue": _queue}
    rows = []
    for key in args.models.split(","):
        spec = builders[key]()
        rows += run_model(spec, args.steps, args.check_steps)
        print(f"{spec['name']}: profiled in {rows[-1]['profile_s']:.1f} s", flush=True)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} timed steps, "
        f"{args.check_steps} training steps checked; policy letters: e=eager w=whole r=region o=offload\n"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
