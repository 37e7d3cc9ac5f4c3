"""Byte suite (paper §6, eq. 2): exact storage bytes and generator state on 1,024 random
programs with typed-alias integer writes.

Program ``i`` (seed ``first_seed + i``) has the derivative suite's shape grid and family
cycle, plus integer writes through uint8/uint16/int32 aliases that partially overlap
float cells and slots. Three rows per program (``check_name='bytes'``):

- ``snapshot``: restore the ``(B0, R0)`` snapshot and re-execute; ``match`` = ``(BT, RT)``.
- ``region_undo``: undo the byte journal from ``(BT, RT)``; ``match`` = exactly ``(B0, R0)``,
  and redo and re-execution both give ``(BT, RT)``.
- ``wrong_rng_control``: replay from ``B0`` with ``R0`` advanced by one draw;
  ``diverge`` = detected (bytes or final generator state differ).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateaware.cohorts._finite_common import MAX_PROGRAMS, base_row, detail, program_range, slice_expand

from stateaware.finite.generate import FAMILIES, random_program
from stateaware.finite.interpret import execute
from stateaware.finite.program import Program
from stateaware.finite.replay import region_undo, snapshot_replay, wrong_rng_replay
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
        integer_writes=True,
    )


def check_program(program: Program) -> list[dict[str, Any]]:
    """The suite's three rows for ``program``."""
    trace = execute(program)
    draws = sum(op.draws for op in program.ops)
    int_writes = sum(op.kind == "int_write" for op in program.ops)
    rows = []
    for method, path in (
        ("snapshot", snapshot_replay),
        ("region_undo", region_undo),
        ("wrong_rng_control", wrong_rng_replay),
    ):
        check = path(program, trace)
        rows.append(
            {
                **base_row(program, "bytes", method),
                "outcome": "match" if check.match else "diverge",
                "detail": detail(
                    bytes_equal=check.bytes_equal,
                    rng_equal=check.rng_equal,
                    mismatched_bytes=check.mismatched_bytes,
                    drawing_ops=draws,
                    int_writes=int_writes,
                    storage_bytes=program.nbytes,
                ),
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
    writer.write("records", rows, part="bytes")
