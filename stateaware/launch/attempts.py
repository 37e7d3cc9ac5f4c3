"""Every attempt on record: the attempts of a Slurm task that Slurm requeued before they wrote a row.

A requeued attempt (``scontrol requeue``, a preemption, submitit's requeue at the time
limit) is killed mid-run and writes nothing. The next attempt of the same Slurm job knows
it came after one: ``SLURM_RESTART_COUNT`` counts them, and ``sacct -D`` (duplicates: every
record of a requeued job, oldest first) says how each earlier one ended. Before it runs,
that next attempt writes one ``processes`` row per earlier attempt of its job that left
none — status ``requeued`` (Slurm requeued it) or ``lost`` (it ended otherwise: a node
failure) — numbered as the attempt it was, so ``SELECT … FROM attempts`` holds the whole
history and the latest-attempt view (``processes``) still picks the attempt that runs now.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime

import pyarrow.parquet as pq

from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import highest_recorded_attempt, record_status, slurm_job_id, status_row
from stateaware.records.part_names import status_parts
from stateaware.records.writer import part_path

__all__ = ["REQUEUED_STATES", "earlier_records", "record_requeued_attempts"]

#: ``sacct`` states of an attempt that Slurm put back in the queue.
REQUEUED_STATES = ("REQUEUED", "PREEMPTED", "REQUEUE_HOLD", "REQUEUE_FED", "TIMEOUT")

_FIELDS = ("JobID", "State", "Reason", "NodeList", "Start", "End", "ExitCode")


def earlier_records(job_id: str) -> list[dict[str, str]]:
    """``sacct -D``'s records of ``job_id`` that have ended, oldest first (``[]`` without accounting)."""
    if shutil.which("sacct") is None:
        return []
    try:
        done = subprocess.run(
            ["sacct", "-D", "-X", "-n", "-P", "-j", job_id, "-o", ",".join(_FIELDS)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    records = []
    for line in done.stdout.splitlines():
        values = line.split("|")
        if len(values) != len(_FIELDS):
            continue
        record = dict(zip(_FIELDS, values, strict=True))
        if record["State"].split(" ")[0] not in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING"):
            records.append(record)
    return records


def record_requeued_attempts(spec: ProcessSpec) -> list[int]:
    """Write a row for each earlier attempt of this Slurm job that left none; their attempt numbers.

    Nothing to do off Slurm or on a job's first attempt. The attempts of this job that
    recorded nothing are its last ``SLURM_RESTART_COUNT - (rows this job has)`` ones; they
    get the next free attempt numbers, oldest first, and the state ``sacct -D`` gives each.
    """
    restarts = _int(os.environ.get("SLURM_RESTART_COUNT"))
    job = slurm_job_id()
    if not restarts or job is None:
        return []
    unrecorded = restarts - _rows_of_job(spec, job)
    if unrecorded <= 0:
        return []
    records = earlier_records(job)[-unrecorded:]
    records = [{}] * (unrecorded - len(records)) + records  # sacct lagging or absent: state unknown
    first = highest_recorded_attempt(spec) + 1
    numbers = []
    for offset, record in enumerate(records):
        state = record.get("State", "").split(" ")[0]
        # A restart means Slurm requeued the job; only a record that says it ended otherwise
        # (NODE_FAIL, OUT_OF_MEMORY: requeued by JobRequeue after a crash) makes it lost.
        status = "requeued" if not state or state in REQUEUED_STATES else "lost"
        reason = record.get("Reason", "")
        said = f"sacct: {record.get('State')}" + (f", reason {reason}" if reason and reason != "None" else "")
        said += f", exit code {record['ExitCode']}" if record.get("ExitCode") else ""
        what = "Slurm requeued this attempt" if status == "requeued" else "this attempt ended"
        message = (
            f"{what} ({said if state else 'sacct gave no record'}) before it recorded a status; "
            f"Slurm job {job} ran again (restart {restarts})"
        )
        row = status_row(spec, status, first + offset, _time(record.get("Start")) or datetime.now(UTC), message=message)
        row.update(node=record.get("NodeList") or None, pid=-1)
        ended = _time(record.get("End"))
        if ended is not None:
            row.update(finished_at=ended, wall_s=(ended - row["started_at"]).total_seconds())
        numbers.append(record_status(spec, row))
    return numbers


def _rows_of_job(spec: ProcessSpec, job: str) -> int:
    """How many status rows of this process name Slurm job ``job`` (attempts of it recorded so far)."""
    folder = part_path(spec.out, "processes", spec.cohort, spec.run_id, spec.process_index, "a").parent
    count = 0
    for path in status_parts(folder, spec.process_index):
        try:
            count += pq.read_table(path, columns=["slurm_job_id"]).column("slurm_job_id").to_pylist().count(job)
        except (OSError, ValueError, KeyError):
            continue
    return count


def _time(text: str | None) -> datetime | None:
    """A ``sacct`` time (local time, ``2026-12-02T14:03:11``) as an aware datetime; ``None`` for Unknown."""
    try:
        return datetime.fromisoformat(text).astimezone(UTC) if text else None
    except ValueError:
        return None


def _int(text: str | None) -> int:
    try:
        return int(text) if text else 0
    except ValueError:
        return 0
