"""Joint-alias stress test (paper §7, Table 3): 50 seed keys x 3 patterns x dimensions
32/64 = 300 programs of 16 operations, each combining float storage with integer reads,
strided and partially overlapping typed aliases, mutation and replay.

Program ``i`` (seed ``first_seed + i``, seed key ``i // 6``): pattern
``PATTERNS[i % 3]``, dimension ``(32, 64)[(i // 3) % 2]``, sparse writes, declared
aliases. Rows (``check_name='joint_alias'``):

- one per engine: ``match`` when the recovery agrees in restored bytes, generator state,
  every declared alias view, and a repeated backward (bitwise), and the reconstructed
  gradient is within tolerance of the forward Jacobian (``max_error``);
- one ``method='admission'`` row for the program's integer-write variant (an int32 XOR
  into its slots at a seeded position): ``unsupported``, decided before execution; no
  gradient is computed for it.
"""

from __future__ import annotations

from typing import Any

from stateaware.cohorts._finite_common import MAX_PROGRAMS, base_row, detail, program_range, slice_expand
from stateaware.cohorts.engines import engine_rows

from stateaware.finite.admission import admit
from stateaware.finite.derivatives import forward_jacobian
from stateaware.finite.generate import PATTERNS, integer_write_variant, workload_program
from stateaware.finite.interpret import execute
from stateaware.finite.program import Program
from stateaware.kinds import Param, ProcessSpec
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params).
PARAMS = {"programs": Param(int, minimum=1, maximum=MAX_PROGRAMS)}

__all__ = ["PROGRAMS", "OPERATIONS", "check_program", "expand", "program_for", "run"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.sections.finite_checks",)

SEED_KEYS = 50
PROGRAMS = SEED_KEYS * 3 * 2
OPERATIONS = 16
_DIMENSIONS = (32, 64)


def program_for(index: int, first_seed: int) -> Program:
    """Program ``index`` of the study (see the module docstring)."""
    return workload_program(
        first_seed + index, PATTERNS[index % 3], "sparse", _DIMENSIONS[(index // 3) % 2], OPERATIONS, aliases=True
    )


def check_program(program: Program) -> list[dict[str, Any]]:
    """Five engine rows for ``program`` and one admission row for its integer-write variant."""
    trace = execute(program, keep_prestates=True)
    _, reference = forward_jacobian(program, trace.draws)
    rows = engine_rows(program, trace, reference, "joint_alias", repeat=True)
    variant = integer_write_variant(program, program.seed)
    decision = admit(variant)
    # An admitted variant would be a bug in admission; it is recorded as a divergence, never run.
    rows.append(
        {
            **base_row(variant, "joint_alias", "admission"),
            "outcome": "unsupported" if not decision.supported else "diverge",
            "writes": program.writes,
            "detail": detail(reason=decision.reason),
        }
    )
    return rows


def expand(cohort: dict, hardware: dict, processes: int) -> list[dict]:
    return slice_expand(cohort, processes, PROGRAMS)


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    rows = []
    for i in program_range(spec):
        rows += check_program(program_for(i, int(spec.params["first_seed"])))
    writer.write("records", rows, part="joint_alias")
