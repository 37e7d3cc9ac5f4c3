"""A cohort kind that does nothing: it measures what the backbone itself costs per process
(interpreter start, submitit, source-hash check, status row)."""

from __future__ import annotations

from stateaware.kinds import Param

PARAMS: dict[str, Param] = {}  # it takes none


def run(spec, writer) -> None:
    """Write nothing; the worker still records the terminal status."""
