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

from typing import Any

import numpy as np
from stateaware.cohorts._finite_common import base_row, detail

# What the suite shares with the other finite kind: parameters, program count, slices, report.
from stateaware.cohorts._finite_suite import PARAMS, PROGRAMS, REPORT, expand, program_maker, run_suite

from stateaware.finite.derivatives import forward_jacobian, gradient_tolerance, graph_output, reverse_versions
from stateaware.finite.interpret import execute
from stateaware.finite.program import Program
from stateaware.kinds import ProcessSpec
from stateaware.records.writer import RecordWriter

__all__ = ["PARAMS", "PROGRAMS", "REPORT", "check_program", "expand", "program_for", "run"]

program_for = program_maker(overwritten_dependence=True)


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


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    run_suite(spec, writer, program_for, check_program, part="derivative")
