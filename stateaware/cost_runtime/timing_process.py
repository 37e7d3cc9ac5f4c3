"""One timing process: card, budget, plans, semantic checks, then every method timed.

What one process of a timing cohort executes (paper §8–§11), as a library function: it
takes the cell's params, the hardware profile and a ``write(table, rows, part=...)``
callable (a ``RecordWriter.write``), so it knows nothing of cohorts, configs or launchers.
The steps, in order:

1. the cell's profile card (``cells.card_for``: frozen, or profiled here) and, for a
   relative budget anchored on another cell, that cell's card;
2. the budget (``cells.place_budget``) and every method's plan (``plans.plan_methods``),
   written to ``policies`` (infeasible plans included, never executed) and, for a card
   measured here, the card to ``profiles``;
3. the FP32/FP64 semantic checks of every executable method (``records``);
4. each method that passed both checks: warm-ups, measured steps and the measured peak
   of one extra step (``timings``), in an order drawn from the seed.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from typing import Any

import torch

from stateaware.clocks import timing_rows
from stateaware.cost_runtime import (
    METHODS,
    method_steps,  # called through the module: tests replace its functions
)
from stateaware.cost_runtime.cells import anchor_cell_of, card_for, cost_runtime_of, place_budget, shape_of
from stateaware.cost_runtime.plans import plan_methods
from stateaware.planner.records import policy_row, profile_rows

__all__ = ["run_cell"]

#: ``write(table, rows, part=...)``: how a process hands its rows to the record store.
Write = Callable[..., Any]


def run_cell(
    params: dict[str, Any],
    hardware: dict[str, Any],
    write: Write,
    *,
    seed: int,
    cohort: str,
    keep_threads: bool = False,
) -> None:
    """Run one timing process of ``params["cell"]`` on ``hardware``, writing through ``write``.

    ``params`` are the effective cohort params of the process (``cells.effective_params``
    plus ``cell``). The profile's thread count (``cost_runtime.threads``) applies inside;
    with ``keep_threads`` (a run inside its caller's interpreter) the caller's count comes
    back afterwards. A fresh process keeps it until it exits, so its ``processes`` row
    records the threads it timed with.
    """
    threads = torch.get_num_threads()
    try:
        _run_cell(params, hardware, write, seed=seed, cohort=cohort)
    finally:
        if keep_threads:
            torch.set_num_threads(threads)


def _run_cell(params: dict[str, Any], hardware: dict[str, Any], write: Write, *, seed: int, cohort: str) -> None:
    cost_runtime = cost_runtime_of(hardware)
    if cost_runtime.get("threads"):
        torch.set_num_threads(int(cost_runtime["threads"]))
    device = str(hardware.get("device", "cpu"))
    cell = params["cell"]
    name = cell["cell"]
    methods = list(params.get("methods") or METHODS)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"params.methods has {unknown}; valid methods are: {', '.join(METHODS)}")
    shape = shape_of(cell)
    mode = str(params.get("card", "auto"))

    card, measured_here = card_for(cell, mode, hardware, seed=seed, cohort=cohort, device=device)
    anchor_cell = anchor_cell_of(params, hardware, cell)
    anchor_card = (
        card
        if anchor_cell is None
        else card_for(anchor_cell, "auto", hardware, seed=seed, cohort=cohort, device=device)[0]
    )
    budget = place_budget(params, hardware, anchor_card)
    columns = {**shape.columns(), "cell": name, "budget_bytes": int(budget)}
    plans = plan_methods(card, budget, methods)

    warmup, steps = int(params["warmup"]), int(params["steps"])
    note = {
        "warmup": warmup,
        "steps": steps,
        "shuffle": bool(params.get("shuffle", True)),
        "reduced_from": params.get("reduced_from"),
        "card_source": "measured_in_process" if measured_here else "frozen",
        "byte_scale": cost_runtime.get("byte_scale"),
    }
    write("policies", [policy_row(row, method, **columns) for method, row in plans.items()], part=f"cell={name}")
    if measured_here:
        write("profiles", profile_rows(card, **columns), part=f"cell={name}")

    executable = {
        m: (row["policy"] if row["policy"] is not None else "functional") for m, row in plans.items() if row["feasible"]
    }
    # The checks compare every code path of every policy; their batch may be reduced on a
    # profile (cost_runtime.semantic_batch) because correctness does not depend on it and FP64
    # checks at full batch would cost a CPU cohort more than its timed steps.
    semantic_batch = cost_runtime.get("semantic_batch")
    checked = dataclasses.replace(shape, batch=min(shape.batch, int(semantic_batch))) if semantic_batch else shape
    note["semantic_batch"] = checked.batch
    checks = method_steps.semantic_checks(checked, executable, seed=seed, device=device)
    write(
        "records",
        [
            {
                "backend": "torch",
                "check_name": "semantic" if c.method in executable else "semantic_control",
                "family": "cost_runtime",
                "seed": seed,
                "workload": shape.workload,
                "detail": json.dumps({"cell": name, **note}, sort_keys=True, default=str),
                **c.row(),
            }
            for c in checks
        ],
        part=f"semantic-cell={name}",
    )
    passed = {
        m
        for m in executable
        if all(c.outcome == "match" for c in checks if c.method == m) and sum(c.method == m for c in checks) == 2
    }

    # Methods run in an order drawn from the process seed: slow drift of a shared machine
    # (load, thermal state) then spreads over every method instead of biasing the last ones.
    order = random.Random(seed).sample(methods, len(methods)) if params.get("shuffle", True) else methods
    for method in order:
        if method not in passed:
            continue  # infeasible (policies row says so) or failed its check (records row says so)
        times, peak = method_steps.measure(
            shape, executable[method], seed=seed, warmup=warmup, steps=steps, device=device
        )
        write(
            "timings",
            timing_rows(
                times,
                method=method,
                precision="fp32",
                peak_allocated_bytes=peak.allocated_bytes,
                peak_reserved_bytes=peak.reserved_bytes,
                peak_source=peak.source,
                device=device,
                seed=seed,
                **columns,
            ),
            part=f"cell={name}-method={method}",
        )
