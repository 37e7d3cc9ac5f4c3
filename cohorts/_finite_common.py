"""Shared plumbing of the finite cohorts (derivative, bytes, engines, joint_alias).

Record convention (one row per program x method or check, ``backend='finite'``):

- ``seed``: the program's seed, one per program (``first_seed + program index``);
  ``family``: its pattern; ``check_name``: the suite (``derivative``, ``bytes``, ``engines``,
  ``complex_step``, ``joint_alias``); ``dimension``/``operations``: its shape.
- ``outcome``: ``match`` when the check holds; ``diverge`` when it does not. For the
  deliberate controls (``final_storage_control``, ``wrong_rng_control``) a ``diverge`` is
  the *expected* result: "detected N/N" means every control row diverged. ``unsupported``
  marks an integer-write program refused by admission before execution.
- ``max_error``: the largest absolute gradient difference from the forward-Jacobian
  reference (null for byte checks); ``tolerance``: the bound it was judged against.

Each cohort's ``expand`` gives every process a contiguous slice ``[start, stop)`` of the
program indices. The hardware profile and its scale do not change these programs: the
finite domain is exact and small, and runs the paper's program counts on any CPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from stateaware.kinds import ProcessSpec

__all__ = ["MAX_PROGRAMS", "base_row", "detail", "program_range", "slice_expand"]

#: The most programs a finite-program cohort may generate: far above the paper's (1,200),
#: low enough that a typo (``programs=10**12``) is refused before launch rather than run for years.
MAX_PROGRAMS = 1_000_000


def slice_expand(cohort: dict, processes: int, total: int) -> list[dict]:
    """Contiguous, near-equal slices of ``total`` program indices, one per process."""
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    total = int(cohort.get("params", {}).get("programs", total))
    bounds = [round(i * total / processes) for i in range(processes + 1)]
    return [{"start": bounds[i], "stop": bounds[i + 1], "first_seed": int(cohort["seed"])} for i in range(processes)]


def program_range(spec: ProcessSpec) -> Iterator[int]:
    """The program indices this process runs (``start``..``stop`` from ``expand``)."""
    try:
        return iter(range(int(spec.params["start"]), int(spec.params["stop"])))
    except KeyError as exc:
        raise ValueError(
            f"spec.params lacks {exc.args[0]!r}; finite cohorts need start, stop and first_seed (given by expand())"
        ) from None


def base_row(program: Any, check: str, method: str) -> dict[str, Any]:
    return {
        "backend": "finite",
        "precision": "fp64",
        "seed": int(program.seed),
        "family": program.family,
        "check_name": check,
        "method": method,
        "dimension": int(program.n),
        "operations": len(program.ops),
    }


def detail(**fields: Any) -> str:
    return json.dumps(fields, sort_keys=True, default=str)
