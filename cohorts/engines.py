"""Engine study (paper §7, Tables 1 and 3): the five preservation engines on 1,200
feature-queue, prototype-memory and unrolled-recurrence programs, with gradients
reconstructed from the recovered traces and a complex-step check on 96 of them.

Program ``i`` (seed ``first_seed + i``): pattern ``PATTERNS[i % 3]``, writes
``WRITES[(i // 3) % 2]``, dimension ``(32, 64)[(i // 6) % 2]``, operations
``(8, 12, 16)[(i // 12) % 3]``. Rows (``check_name='engines'``), one per engine: ``match``
when the engine recovered exactly the forward pass's reads, restored the live storage,
and its reconstructed gradient is within tolerance of the forward Jacobian;
``max_error`` that gradient's largest absolute difference; ``retained_bytes`` what the
engine kept; ``writes``/``write_fraction`` the write density. Programs
``i < complex_step_programs`` add a ``check_name='complex_step'`` row comparing the
complex-step derivative of every input coordinate (``coordinates``) with the forward
Jacobian.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stateaware.cohorts._finite_common import MAX_PROGRAMS, base_row, detail, program_range, slice_expand

from stateaware.finite.derivatives import complex_step, forward_jacobian, gradient_tolerance
from stateaware.finite.engines import ENGINES, verify_engine
from stateaware.finite.generate import PATTERNS, WRITES, workload_program
from stateaware.finite.interpret import Trace, execute
from stateaware.finite.program import Program
from stateaware.kinds import Param, ProcessSpec
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params).
PARAMS = {
    "programs": Param(int, minimum=1, maximum=MAX_PROGRAMS),
    "complex_step_programs": Param(
        int, minimum=0, maximum=MAX_PROGRAMS
    ),  # the first ones also get a complex-step check
}

__all__ = ["PROGRAMS", "COMPLEX_STEP_PROGRAMS", "check_program", "engine_rows", "expand", "program_for", "run"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.sections.finite_checks",)

PROGRAMS = 1200
COMPLEX_STEP_PROGRAMS = 96
_DIMENSIONS = (32, 64)
_OPERATIONS = (8, 12, 16)


def program_for(index: int, first_seed: int) -> Program:
    """Program ``index`` of the study (see the module docstring)."""
    return workload_program(
        first_seed + index,
        PATTERNS[index % 3],
        WRITES[(index // 3) % 2],
        _DIMENSIONS[(index // 6) % 2],
        _OPERATIONS[(index // 12) % 3],
    )


def write_fraction(trace: Trace) -> float:
    return float(np.mean([e.dst.size / trace.program.n for e in trace.events]))


def engine_rows(program: Program, trace: Trace, reference: np.ndarray, check: str, repeat: bool) -> list[dict]:
    """One row per engine: recovery, restoration and reconstructed-gradient error."""
    tol = gradient_tolerance(reference)
    fraction = write_fraction(trace)
    rows = []
    for engine in ENGINES:
        result = verify_engine(engine, trace, repeat=repeat)
        error = float(np.max(np.abs(result.gradient - reference)))
        ok = result.recovered and error <= tol
        rows.append(
            {
                **base_row(program, check, engine),
                "outcome": "match" if ok else "diverge",
                "max_error": error,
                "tolerance": tol,
                "retained_bytes": result.retained_bytes,
                "writes": program.writes,
                "write_fraction": fraction,
                "detail": detail(
                    reads_match=result.reads_match,
                    storage_restored=result.storage_restored,
                    aliases_restored=result.aliases_restored,
                    rng_restored=result.rng_restored,
                    repeat_match=result.repeat_match,
                    storage_bytes=program.nbytes,
                ),
            }
        )
    return rows


def check_program(program: Program, with_complex_step: bool) -> list[dict[str, Any]]:
    """The study's rows for ``program``."""
    trace = execute(program, keep_prestates=True)
    _, reference = forward_jacobian(program, trace.draws)
    rows = engine_rows(program, trace, reference, "engines", repeat=False)
    if with_complex_step:
        derivative = complex_step(program, trace.draws)
        tol = gradient_tolerance(reference)
        error = float(np.max(np.abs(derivative - reference)))
        rows.append(
            {
                **base_row(program, "complex_step", "complex_step"),
                "outcome": "match" if error <= tol else "diverge",
                "max_error": error,
                "tolerance": tol,
                "coordinates": int(derivative.size),
                "writes": program.writes,
            }
        )
    return rows


def expand(cohort: dict, hardware: dict, processes: int) -> list[dict]:
    return slice_expand(cohort, processes, PROGRAMS)


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    complex_programs = int(spec.params.get("complex_step_programs", COMPLEX_STEP_PROGRAMS))
    rows = []
    for i in program_range(spec):
        rows += check_program(program_for(i, int(spec.params["first_seed"])), i < complex_programs)
    writer.write("records", rows, part="engines")
