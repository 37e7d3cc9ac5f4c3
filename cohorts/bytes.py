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

from typing import Any

from stateaware.cohorts._finite_common import base_row, detail

# What the suite shares with the other finite kind: parameters, program count, slices, report.
from stateaware.cohorts._finite_suite import PARAMS, PROGRAMS, REPORT, expand, program_maker, run_suite

from stateaware.finite.interpret import execute
from stateaware.finite.program import Program
from stateaware.finite.replay import region_undo, snapshot_replay, wrong_rng_replay
from stateaware.kinds import ProcessSpec
from stateaware.records.writer import RecordWriter

__all__ = ["PARAMS", "PROGRAMS", "REPORT", "check_program", "expand", "program_for", "run"]

program_for = program_maker(integer_writes=True)


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


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    run_suite(spec, writer, program_for, check_program, part="bytes")
