"""The model matrix (``tests/model_zoo.py``) side by side: peaks and CPU time per step.

Per model, every block (the zoo's block type) runs under each method, all built from one
seeded model:

* ``eager`` — no checkpointing;
* ``torch`` — torch's ``checkpoint_wrapper`` (non-reentrant) on every block;
* ``ours, none declared`` — our checkpoint on every block with nothing declared (refused,
  and shown so, where a block writes state such as BatchNorm statistics);
* ``ours, block declared`` — our checkpoint on every block declaring the block (its
  buffers, attributes and numbers preserved whole);
* ``auto@50%`` — ``stateaware.auto.wrap`` (Hugging Face models:
  ``stateaware.integrations.transformers.enable``) at a 50 % budget: the budget loop's
  plan, with its prediction and measured peak.

Timing pairs in time: the methods take turns step by step for ``--steps`` rounds and the
median thread CPU time (``time.thread_time``) per method is kept, so a busy machine slows
every method alike. The peak is one step's measured peak (``stateaware.auto.step_peak_bytes``:
the CPU profiler's memory records, the CUDA allocator on a GPU). The speed targets are
printed at the end: ours with nothing declared at most 1.00x torch's time,
ours with the block declared at most 1.10x.

Usage: ``python bench/bench_models.py [--steps 7] [--models resnet18,gpt2,...]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import stateaware.auto as auto  # noqa: E402
from bench.bench_auto import _torch_variant  # noqa: E402
from stateaware.auto.segment import select_segments  # noqa: E402
from stateaware.torch_replay import UndeclaredStateError  # noqa: E402
from tests import model_zoo as zoo  # noqa: E402

TARGETS = {"ours, none declared": 1.00, "ours, block declared": 1.10}


def _methods(case: zoo.Case) -> dict[str, tuple[torch.nn.Module, Any]]:
    model = case.build()
    if case.hugging_face:  # torch's checkpoint through Hugging Face's own door, as HF users run it
        torch_model = case.build()
        torch_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        torch_model = _torch_variant(case.build(), select_segments(model, zoo.block_of(case)))
    return {
        "eager": (model, None),
        "torch": (torch_model, None),
        "ours, none declared": (zoo.checkpoint_blocks(case, declare=False), None),
        "ours, block declared": (zoo.checkpoint_blocks(case, declare=True), None),
        "auto@50%": zoo.automatic(case),
    }


def _step(case: zoo.Case, model: torch.nn.Module, batch: zoo.Batch) -> None:
    for p in model.parameters():
        p.grad = None
    case.loss(model, batch).backward()


def run_case(case: zoo.Case, steps: int) -> list[dict[str, Any]]:
    """Every method on one model: measured peak and median CPU ms per step, paired in time."""
    methods = _methods(case)
    batches = [case.batch(i) for i in range(steps + 1)]
    usable: dict[str, torch.nn.Module] = {}
    refused: dict[str, str] = {}
    for name, (model, _) in methods.items():
        try:
            _step(case, model, batches[0])  # warm-up; a method that cannot run says why
            usable[name] = model
        except UndeclaredStateError as error:  # ours: the state it writes, named
            refused[name] = str(error).splitlines()[1].strip()
        except RuntimeError as error:  # torch's: e.g. a block that writes its own input in place
            refused[name] = f"error: {str(error).splitlines()[0][:120]}"
    cpu: dict[str, list[float]] = {name: [] for name in usable}
    for index in range(steps):
        for name, model in usable.items():
            start = time.thread_time()
            _step(case, model, batches[index + 1])
            cpu[name].append((time.thread_time() - start) * 1e3)
    args, _ = case.example()
    rows = []
    for name, (model, plan) in methods.items():
        row: dict[str, Any] = {"model": case.name, "method": name, "refused": refused.get(name)}
        if name in usable:
            # The batch exists before the step, as a data loader's does: only the step's bytes count.
            row["peak"] = auto.step_peak_bytes(model, args, lambda m=model: _step(case, m, batches[0]))
            row["cpu_ms"] = statistics.median(cpu[name])
        row["plan"] = plan
        rows.append(row)
    eager, torch_row = rows[0], rows[1]
    for row in rows:
        if row["refused"] is None:
            row["peak_ratio"] = row["peak"] / eager["peak"]
            row["cpu_ratio"] = row["cpu_ms"] / eager["cpu_ms"]
            row["vs_torch"] = row["cpu_ms"] / torch_row["cpu_ms"] if torch_row["refused"] is None else None
    return rows


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of ``rows``."""
    kib = 1024.0
    lines = [
        "| model | method | measured peak KiB (×eager) | CPU ms/step (×eager) | ×torch "
        "| auto: budget / measured by the loop / prior prediction / closed prediction KiB | policy |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["refused"] is not None:
            lines.append(f"| {r['model']} | {r['method']} | refused: {r['refused']} | | | | |")
            continue
        plan, budget, policy = r["plan"], "", ""
        if plan is not None:
            budget = " / ".join(
                f"{b / kib:.0f}"
                for b in (
                    plan.budget_bytes,
                    plan.measured_peak_bytes,
                    plan.prior_prediction_bytes,
                    plan.predicted_peak_bytes,
                )
            )
            policy = " ".join(o[0] for o in plan.policy)
        lines.append(
            f"| {r['model']} | {r['method']} | {r['peak'] / kib:.0f} ({r['peak_ratio']:.3f}) | "
            f"{r['cpu_ms']:.1f} ({r['cpu_ratio']:.2f}) | {_ratio(r['vs_torch'])} | {budget} | {policy} |"
        )
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]]) -> str:
    """Each speed target: the worst model's ratio to torch's time, and whether it holds."""
    lines = []
    for method, limit in TARGETS.items():
        ratios = [(r["vs_torch"], r["model"]) for r in rows if r["method"] == method and r.get("vs_torch") is not None]
        if not ratios:
            continue
        worst, model = max(ratios)
        median = statistics.median(r for r, _ in ratios)
        verdict = "holds" if worst <= limit else "MISSED"
        lines.append(
            f"{method}: CPU time vs torch's checkpoint median {median:.2f}x, worst {worst:.2f}x ({model}); "
            f"target <= {limit:.2f}x: {verdict}"
        )
    return "\n".join(lines)


def budgets(rows: list[dict[str, Any]]) -> str:
    """The budget loop across the matrix: kept budgets, and how far its predictions landed."""
    auto_rows = [r for r in rows if r["plan"] is not None]
    if not auto_rows:
        return ""
    plans = [r["plan"] for r in auto_rows]
    kept = sum(p.measured_peak_bytes <= p.budget_bytes for p in plans)
    prior = [abs(p.measured_peak_bytes - p.prior_prediction_bytes) / p.measured_peak_bytes for p in plans]
    closed = [abs(p.measured_peak_bytes - p.predicted_peak_bytes) / p.measured_peak_bytes for p in plans]
    worst = auto_rows[prior.index(max(prior))]["model"]
    return (
        f"budget loop: measured peak within budget on {kept} of {len(plans)} models; prediction before measuring "
        f"within 5 % on {sum(e <= 0.05 for e in prior)} (worst {max(prior):.1%}, {worst}); closed loop's "
        f"prediction within 5 % on {sum(e <= 0.05 for e in closed)}; re-plans {sum(p.replans for p in plans)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=7, help="timed rounds (each method one step per round)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--models", default=",".join(zoo.CASES), help=f"comma-separated, of: {', '.join(zoo.CASES)}")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in zoo.CASES]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; valid models are: {', '.join(zoo.CASES)}")
    torch.set_num_threads(args.threads)
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        start = time.perf_counter()
        rows += run_case(zoo.CASES[name], args.steps)
        print(f"{name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} rounds", end="; ")
    print("e=eager w=whole r=region o=offload\n")
    print(table(rows))
    print()
    print(targets(rows))
    print(budgets(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
