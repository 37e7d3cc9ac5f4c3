"""Derivative suite (paper §6): version-graph reverse accumulation against a forward
Jacobian on 1,024 random finite programs, plus the final-storage control.

Program ``i`` (seed ``first_seed + i``) has dimension ``dimensions[i % 3]``,
``operations[(i // 3) % 3]`` operations and family ``FAMILIES[(i // 9) % 3]``
(strided / overlapping / gather), drawn under the suite's rule that its gradient depends
on an overwritten value (NOTE [ Overwritten dependence ] in ``stateaware.finite.generate``).
Two rows per program (``check_name='derivative'``):

- ``version_graph``: ``match`` when the version graph re-evaluates the scalar output
  bit-for-bit *and* its eq.-1 gradient is within tolerance of the forward Jacobian;
  ``max_error`` is the largest absolute gradient difference.
- ``final_storage_control``: the same reverse pass evaluating local derivatives at the
  final storage instead of historical versions; ``diverge`` = detected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from stateaware.cohorts._finite_common import MAX_PROGRAMS, base_row, detail, program_range, slice_expand

from stateaware.finite.derivatives import forward_jacobian, gradient_tolerance, graph_output, reverse_versions
from stateaware.finite.generate import FAMILIES, random_program
from stateaware.finite.interpret import execute
from stateaware.finite.program import Program
from stateaware.launch.params import Param
from stateaware.launch.spec import ProcessSpec
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params).
PARAMS = {
    "programs": Param(int, minimum=1, maximum=MAX_PROGRAMS),  # generated programs, split across the processes
    "dimensions": Param(list, item=int, minimum=1, maximum=1024, unique=True),
    "operations": Param(list, item=int, minimum=1, maximum=1024, unique=True),
}

__all__ = ["PROGRAMS", "check_program", "expand", "program_for", "run"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.finite",)

PROGRAMS = 1024
_DIMENSIONS = (4, 8, 16)
_OPERATIONS = (8, 12, 16)


def program_for(
    index: int, first_seed: int, dimensions: Sequence[int] = _DIMENSIONS, operations: Sequence[int] = _OPERATIONS
) -> Program:
    """Program ``index`` of the suite (see the module docstring)."""
    return random_program(
        first_seed + index,
        int(dimensions[index % len(dimensions)]),
        int(operations[(index // len(dimensions)) % len(operations)]),
        FAMILIES[(index // (len(dimensions) * len(operations))) % len(FAMILIES)],
        overwritten_dependence=True,
    )


def check_program(program: Program) -> list[dict[str, Any]]:
    """The suite's two rows for ``program``."""
    trace = execute(program)
    output, reference = forward_jacobian(program, trace.draws)
    tol = gradient_tolerance(reference)
    exact = bool(graph_output(trace) == trace.output())
    rows = []
    for method, operands in (("version_graph", "historical"), ("final_storage_control", "final")):
        error = float(np.max(np.abs(reverse_versions(trace, operands) - reference)))
        if method == "version_graph":
            outcome = "match" if exact and error <= tol else "diverge"
            info = detail(
                output_exact=exact, reference_output_exact=bool(output == trace.output()), versions=trace.graph.size
            )
        else:
            outcome = "match" if error <= tol else "diverge"
            info = detail(reference_max_abs=float(np.max(np.abs(reference))))
        rows.append(
            {
                **base_row(program, "derivative", method),
                "outcome": outcome,
                "max_error": error,
                "tolerance": tol,
                "detail": info,
            }
        )
    return rows


def expand(cohort: dict, hardware: dict, processes: int) -> list[dict]:
    return slice_expand(cohort, processes, PROGRAMS)


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    dims = spec.params.get("dimensions", _DIMENSIONS)
    ops = spec.params.get("operations", _OPERATIONS)
    rows = []
    for i in program_range(spec):
        rows += check_program(program_for(i, int(spec.params["first_seed"]), dims, ops))
    writer.write("records", rows, part="derivative")
