"""The result of a finished submitit job, whichever executor ran it.

Its own module because both the launcher's local loop and the Slurm array wait on jobs
and turn each into a ``ProcessResult``: living in either would make them import each
other.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import ProcessResult, attempts_so_far, record_status, status_row
from stateaware.records.writer import DiskFullError, as_disk_full, disk_full

__all__ = ["collect"]


def collect(job: Any, spec: ProcessSpec) -> ProcessResult:
    """The result a finished job returned, or a ``lost`` row if it died without one.

    Never raises for a full disk: the result then carries the message, with nothing recorded.
    """
    try:
        result = job.result()
        if isinstance(result, ProcessResult):
            return result
        message = f"process returned {result!r} instead of a ProcessResult"
        exc: BaseException | None = None
    except Exception as error:  # noqa: BLE001 - the job died: record it, keep going
        message, exc = f"died without recording a status: {error}", error
    # A scheduler that ended the job on purpose (scancel, preemption) is not a crash.
    state = str(getattr(job, "state", "") or "").upper()
    status = "cancelled" if state.startswith(("CANCELLED", "PREEMPTED")) else "lost"
    attempt = attempts_so_far(spec) + 1
    row = status_row(spec, status, attempt, datetime.now(UTC), pid=_job_pid(job), exc=exc, message=message)
    if status == "cancelled" or spec.launcher == "slurm":
        row.update(node=None, slurm_job_id=str(job.job_id))
    try:
        attempt = record_status(spec, row)
    except DiskFullError as full:
        return ProcessResult(spec.process_index, status, attempt, row["pid"], message, disk_full=str(full))
    full_disk = str(as_disk_full(exc, under=spec.out)) if exc is not None and disk_full(exc) else ""
    return ProcessResult(spec.process_index, status, attempt, row["pid"], message, disk_full=full_disk)


def _job_pid(job: Any) -> int:
    try:
        return int(job.job_id)
    except (TypeError, ValueError):
        return -1
