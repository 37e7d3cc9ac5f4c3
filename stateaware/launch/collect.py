"""The result of a finished submitit job, whichever executor ran it.

Its own module because both the launcher's local loop and the Slurm array wait on jobs
and turn each into a ``ProcessResult``: living in either would make them import each
other.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import ProcessResult, attempts_so_far, record_status, recorded_result, status_row
from stateaware.records.writer import DiskFullError, as_disk_full, disk_full

__all__ = ["collect"]


def collect(job: Any, spec: ProcessSpec, *, state: str | None = None) -> ProcessResult:
    """The result a finished job returned, the row a failed one recorded, or a ``lost`` row if it died without one.

    A fresh process that failed raised after writing its row (so it exits non-zero,
    ``run_or_raise``): its result is the row this job
    recorded. ``state``: Slurm's final state of the job, when the caller already read it
    (no second ``sacct`` call, and no wait for a result file a job without one never
    writes). Never raises for a full disk: the result then carries the message, with
    nothing recorded.
    """
    exc: BaseException | None = None
    if state is not None and not job.paths.result_pickle.exists():
        said = f"Slurm state {state}" if state else "Slurm no longer lists the job"
        message = f"died without recording a status ({said})"
    else:
        try:
            result = job.result()
            if isinstance(result, ProcessResult):
                return result
            message = f"process returned {result!r} instead of a ProcessResult"
        except Exception as error:  # noqa: BLE001 - the job died or failed: read or record it, keep going
            recorded = recorded_result(spec, str(job.paths.stdout))
            if recorded is not None:
                return recorded
            message, exc = f"died without recording a status: {error}", error
        state = str(getattr(job, "state", "") or "")
    # A scheduler that ended the job on purpose (scancel, preemption) is not a crash.
    status = "cancelled" if state.upper().startswith(("CANCELLED", "PREEMPTED")) else "lost"
    attempt = attempts_so_far(spec) + 1
    row = status_row(spec, status, attempt, datetime.now(UTC), pid=_job_pid(job), exc=exc, message=message)
    if status == "cancelled" or spec.launcher == "slurm":
        row.update(node=None, slurm_job_id=str(job.job_id))
    if spec.launcher != "inline":
        row.update(stdout_path=str(job.paths.stdout), stderr_path=str(job.paths.stderr))
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
