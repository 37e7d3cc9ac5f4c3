"""The random-program suite the derivative and byte kinds share (paper §6).

Both kinds check the same grid of 1,024 programs by default: program ``i`` (seed
``first_seed + i``) has dimension ``dimensions[i % len(dimensions)]``, the next
``operations`` entry every ``len(dimensions)`` programs and the next family (strided /
overlapping / gather) every ``len(dimensions) * len(operations)``. What differs is the rule
the programs are drawn under (an overwritten dependence for derivatives, typed-alias integer
writes for bytes) and the rows each program gives: a kind passes its own rule, its own
``check_program`` and its part name, and the suite does the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stateaware.cohorts._finite_common import MAX_PROGRAMS, program_range, slice_expand

from stateaware.finite.generate import FAMILIES, random_program
from stateaware.finite.program import Program
from stateaware.kinds import Param, ProcessSpec
from stateaware.records.writer import RecordWriter

__all__ = ["DIMENSIONS", "OPERATIONS", "PARAMS", "PROGRAMS", "REPORT", "expand", "program_maker", "run_suite"]

#: The report section that renders both kinds (REPORT: stateaware.kinds.Kind).
REPORT = ("stateaware.analysis.sections.finite_checks",)

#: The paper's program count per suite.
PROGRAMS = 1024
#: The default shape grid: dimensions and operation counts the programs cycle through.
DIMENSIONS = (4, 8, 16)
OPERATIONS = (8, 12, 16)

#: Checked when the run is planned (stateaware.launch.params).
PARAMS = {
    "programs": Param(int, minimum=1, maximum=MAX_PROGRAMS),  # generated programs, split across the processes
    "dimensions": Param(list, item=int, minimum=1, maximum=1024, unique=True),
    "operations": Param(list, item=int, minimum=1, maximum=1024, unique=True),
}


def program_maker(**rule: bool) -> Callable[..., Program]:
    """A kind's ``program_for(index, first_seed, dimensions=DIMENSIONS, operations=OPERATIONS)``:
    program ``index`` of the grid (see the module docstring) drawn under ``rule``
    (``random_program``'s keyword: ``overwritten_dependence=True`` or ``integer_writes=True``)."""

    def program_for(
        index: int, first_seed: int, dimensions: Sequence[int] = DIMENSIONS, operations: Sequence[int] = OPERATIONS
    ) -> Program:
        return random_program(
            first_seed + index,
            int(dimensions[index % len(dimensions)]),
            int(operations[(index // len(dimensions)) % len(operations)]),
            FAMILIES[(index // (len(dimensions) * len(operations))) % len(FAMILIES)],
            **rule,
        )

    program_for.__doc__ = (
        f"Program ``index`` of the suite, drawn with {', '.join(f'{k}={v}' for k, v in rule.items())}."
    )
    return program_for


def expand(cohort: dict, hardware: dict, processes: int) -> list[dict]:
    """Contiguous slices of the suite's programs, one per process (``programs`` overrides the count)."""
    return slice_expand(cohort, processes, PROGRAMS)


def run_suite(
    spec: ProcessSpec,
    writer: RecordWriter,
    program_for: Callable[[int, int, Sequence[int], Sequence[int]], Program],
    check_program: Callable[[Program], list[dict[str, Any]]],
    part: str,
) -> None:
    """Check this process's slice of the suite: ``check_program(program_for(i, ...))`` for each
    program ``i``, all rows written as one ``records`` part named ``part``."""
    dims = spec.params.get("dimensions", DIMENSIONS)
    ops = spec.params.get("operations", OPERATIONS)
    rows = []
    for i in program_range(spec):
        rows += check_program(program_for(i, int(spec.params["first_seed"]), dims, ops))
    writer.write("records", rows, part=part)
