"""What runs inside each fresh process: check the code, run the cohort kind, record the end.

The lifecycle of one attempt is a small state machine whose every terminal state is a
``processes`` row written by the process itself::

    start ──source hash differs──▶ source_drift
      │
      └─▶ pin to launcher.cpus ─▶ context ─▶ run kind ──returns──▶ context ─▶ completed
                                                     └─raises───▶ context ─▶ failed (exception
                                                                  type, message, traceback)

The context readings at both ends of the kind (load, CPUs, other processes' CPU share, GPU
clocks; :mod:`stateaware.launch.context`) land in the same row.

A process that dies without reaching a terminal state (SIGKILL, the OOM killer, a node
failure) writes nothing; the launcher then records it as ``lost``. Failures are data,
returned to the launcher as a :class:`ProcessResult`, never re-raised: a raising job
would send submitit's debug executor into pdb and tell the launcher nothing it cannot
read from the row.
"""

from __future__ import annotations

import contextlib
import os
import socket
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from stateaware.launch.spec import ProcessSpec
from stateaware.records.writer import Identity, RecordWriter, part_path

__all__ = ["ProcessResult", "run_one_process", "status_row", "attempts_so_far"]


@dataclass(frozen=True)
class ProcessResult:
    process_index: int
    status: str
    attempt: int
    pid: int
    message: str = ""


def identity_of(spec: ProcessSpec) -> Identity:
    return Identity(spec.run_id, spec.cohort, spec.process_index, spec.source_hash, spec.hardware_name, spec.scale)


def attempts_so_far(spec: ProcessSpec) -> int:
    """How many attempts of this process came before this one.

    Counted from the status rows, and from Slurm's ``SLURM_RESTART_COUNT`` when a task was
    requeued: an attempt killed by a requeue or preemption writes no row of its own.
    """
    folder = part_path(spec.out, "processes", spec.cohort, spec.run_id, spec.process_index, "a").parent
    rows = len(list(folder.glob(f"p{spec.process_index:06d}-a*.parquet")))
    return max(rows, _int_or_none(os.environ.get("SLURM_RESTART_COUNT")) or 0)


def status_row(spec: ProcessSpec, status: str, attempt: int, started: datetime, *, pid: int | None = None,
               exc: BaseException | None = None, message: str | None = None) -> dict:
    """The ``processes`` row of one attempt (written by the worker, or by the launcher for ``lost``)."""
    finished = datetime.now(timezone.utc)
    return {
        "status": status,
        "attempt": attempt,
        "node": socket.gethostname(),
        "pid": pid if pid is not None else os.getpid(),
        "launcher": spec.launcher,
        "slurm_job_id": slurm_job_id(),
        "slurm_array_task_id": _int_or_none(os.environ.get("SLURM_ARRAY_TASK_ID")),
        "started_at": started,
        "finished_at": finished,
        "wall_s": (finished - started).total_seconds(),
        "exception_type": type(exc).__name__ if exc is not None else None,
        "exception_message": message if message is not None else (str(exc) if exc is not None else None),
        "traceback": "".join(traceback.format_exception(exc)) if exc is not None else None,
        "spec_json": spec.to_json(),
    }


def run_one_process(spec: ProcessSpec) -> ProcessResult:
    """Run one attempt of process ``spec.process_index`` and record how it ended."""
    started = datetime.now(timezone.utc)
    attempt = attempts_so_far(spec) + 1
    writer = RecordWriter(spec.out, identity_of(spec), {"attempt": str(attempt)})
    _remove_stale_temporaries(spec)

    from stateaware.source import source_hash

    current = source_hash()
    if current != spec.source_hash:
        message = (
            f"source drift: the launcher hashed the code as {spec.source_hash[:12]}, but this process "
            f"finds {current[:12]}; the files changed after submission. Re-run the cohort command to "
            f"start a run of the current code."
        )
        writer.write("processes", [status_row(spec, "source_drift", attempt, started, message=message)], part=f"a{attempt:03d}")
        return ProcessResult(spec.process_index, "source_drift", attempt, os.getpid(), message)

    from stateaware.cohorts import load_kind
    from stateaware.launch import context

    status, error = "completed", None
    gpu = context.nvml_index(str(spec.hardware.get("device", "cpu")), os.environ.get("CUDA_VISIBLE_DEVICES"))
    before = after = None
    try:
        with pinned(spec):
            before = context.snapshot(gpu_index=gpu)
            try:
                load_kind(spec.kind).run(spec, writer)
            finally:
                after = context.snapshot(gpu_index=gpu)
    except Exception as exc:  # noqa: BLE001 - every failure (a refused pinning too) becomes a recorded outcome
        status, error = "failed", exc
    row = status_row(spec, status, attempt, started, exc=error)
    if before is not None and after is not None:
        row.update(context.context_columns(before, after))
    writer.write("processes", [row], part=f"a{attempt:03d}")
    return ProcessResult(spec.process_index, status, attempt, os.getpid(), row["exception_message"] or "")


@contextlib.contextmanager
def pinned(spec: ProcessSpec) -> Iterator[None]:
    """Pin this process to ``spec.cpus`` (``launcher.cpus``) for the body, before anything is timed.

    A fresh process stays pinned until it exits; an inline run (the launcher's own
    interpreter) gets its earlier affinity back afterwards. The launcher validated the
    set against its own affinity at plan time; a worker that finds the OS refusing it
    (another machine, a cgroup changed since) raises, and the attempt is recorded failed.
    """
    if not spec.cpus:
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, spec.cpus)
    try:
        yield
    finally:
        if spec.launcher == "inline":
            os.sched_setaffinity(0, previous)


def _remove_stale_temporaries(spec: ProcessSpec) -> None:
    """Delete temporary files an earlier, killed attempt of this process left behind."""
    prefix = f".p{spec.process_index:06d}-"
    for table_dir in Path(spec.out).iterdir():
        run_dir = table_dir / f"cohort={spec.cohort}" / f"run_id={spec.run_id}"
        if run_dir.is_dir():
            for tmp in run_dir.glob(f"{prefix}*.tmp-*"):
                tmp.unlink(missing_ok=True)


def slurm_job_id() -> str | None:
    """This process's Slurm job id as ``squeue``/``scancel`` name it: ``<array>_<task>`` in an array."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None

