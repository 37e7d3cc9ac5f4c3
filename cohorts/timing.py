"""The timing cohort kind: profile or load a card, plan, check, then time every method.

A thin adapter: the protocol lives in the library (``stateaware.cost_runtime.cells`` for
grids, cells, cards and budgets; ``stateaware.cost_runtime.timing_process`` for what one process
runs). One process runs one workload cell (paper §8–§11): it obtains the cell's profile card
(the frozen card its hardware profile names, or a profiling pass in this process), places
the budget, plans every method on the card, records the plans (``policies``; infeasible
plans included, never executed), runs the FP32/FP64 semantic checks (``records``), and
times each executable method that passed both: warm-ups, measured steps and the measured
peak of one extra step (``timings``).

Cohort ``params`` (see ``conf/cohort/{calibration,pressure,fair44,confirm44,confirm32,
three_workload}.yaml``):

``cells``        cell names from the hardware profile's ``cost_runtime.cells`` (one per process,
                 cycled), or ``grid: calibration`` / ``grid: three_workload``.
``methods``      method names (``stateaware.cost_runtime.METHODS``).
``budget_gib``   the paper's budget; ``placement`` says how a profile turns it into bytes:
                 ``relative`` (at ``hardware.cost_runtime.budget_rule: relative``, the budget's
                 position between the paper anchors ``anchor_gib`` is applied to the
                 ``anchor_cell``'s card; NOTE [ Budget positions ] in ``cost_runtime.plans``)
                 or ``scaled`` (``budget_gib`` times ``cost_runtime.byte_scale``). At
                 ``budget_rule: absolute`` (h100) the budget is ``budget_gib`` GiB.
``card``         ``frozen`` (refuse to run without the frozen card the profile names),
                 ``auto`` (frozen if named, else measure) or ``measure``.
``shuffle``      run the methods in an order drawn from the process seed (default true).
``warmup``, ``steps``  per method; ``hardware.cost_runtime.overrides.<cohort>`` may reduce them
                 on a profile (recorded in the semantic records rows' detail, and the report says so).
"""

from __future__ import annotations

from typing import Any

from stateaware.cost_runtime import METHODS
from stateaware.cost_runtime.cells import GRIDS, cells_of, check_references, effective_params, process_cells
from stateaware.kinds import Param, ProcessSpec
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params); see the module docstring.
PARAMS = {
    "grid": Param(str, choices=GRIDS),
    "cells": Param(list, item=str, unique=True),
    "methods": Param(list, item=str, choices=METHODS, unique=True),
    "budget_gib": Param(float, minimum=0, maximum=2**20, required=True),  # up to a PiB
    "placement": Param(str, choices=("relative", "scaled")),
    "anchor_cell": Param(str),
    "anchor_gib": Param(dict),
    "card": Param(str, choices=("frozen", "auto", "measure")),
    "shuffle": Param(bool),
    "warmup": Param(int, minimum=0, maximum=100_000, required=True),
    "steps": Param(int, minimum=1, maximum=100_000, required=True),
}

__all__ = ["PARAMS", "expand", "run", "summary"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.sections.timing",)


def expand(cohort: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """One cell per process (``stateaware.cost_runtime.cells.process_cells``), plus the effective params;
    what the params refer to (anchor, cards) is checked here, before launch (``check_references``)."""
    params = effective_params(cohort, hardware)
    shared = {k: v for k, v in params.items() if k != "cells"}
    cells = process_cells(params, hardware, processes)
    check_references(params, hardware, cells_of(params, hardware))
    return [{**shared, "cell": cell} for cell in cells]


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    """One timing process (``stateaware.cost_runtime.timing_process.run_cell``); an inline run leaves
    its caller's thread count as it was."""
    # lazy: it imports torch; the submitting process loads this kind without it
    from stateaware.cost_runtime.timing_process import run_cell

    run_cell(
        spec.params,
        spec.hardware,
        writer.write,
        seed=spec.seed,
        cohort=spec.cohort,
        keep_threads=spec.launcher == "inline",
    )


def summary(out: str, cohort: str) -> str:
    """What the command prints after a run: per method, mean step time, measured and
    predicted peak and fits, then the prespecified ratios with their intervals."""
    # lazy: duckdb only for the end-of-run summary; the launcher imports a kind to read its params
    from stateaware.analysis.sections.timing import summary as timing_summary

    return timing_summary(out, cohort)
