"""What runs inside each fresh process: check the code, run the cohort kind, record the end.

The lifecycle of one attempt is a small state machine whose every terminal state is a
``processes`` row written by the process itself::

    start ──source hash differs──▶ source_drift
      │
      └─▶ pin to launcher.cpus ─▶ context ─▶ run kind ──returns──▶ context ─▶ completed
                                                     └─raises───▶ context ─▶ failed (exception
                                                                  type, message, traceback)

The context readings at both ends of the kind (load, CPUs, other processes' CPU share, GPU
clocks; ``stateaware.launch.context``) land in the same row, and so does what the attempt
wrote (``parts_json``: each part's table, name and rows), which verification and the next
launch compare with the parts they find.

Each status row claims its attempt number: the part ``a<attempt>`` is created, never
replaced, so two writers that counted the same attempts (a launcher recording ``lost``
while a slow worker still ends, a requeue racing a late row) each get a number of their
own and no attempt's row is ever overwritten.

A process that dies without reaching a terminal state (SIGKILL, the OOM killer, a node
failure) writes nothing; the launcher then records it as ``lost``, or — for a Slurm task
that was requeued — the next attempt records it (``requeued``/``lost``,
``stateaware.launch.attempts``).

Failures are data first: ``run_one_process`` records the row and returns a
``ProcessResult``. A fresh process (local or Slurm) then runs ``run_or_raise``,
which raises ``ProcessFailed`` *after* the row is written, so the process exits
non-zero with the traceback on its stderr and ``sacct`` says ``FAILED`` — what a cluster
user triages with. The inline launcher calls ``run_one_process`` itself: a raising job
would send submitit's debug executor into pdb.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from stateaware import kinds
from stateaware.kinds import user_code
from stateaware.launch import context
from stateaware.launch.snapshot import running_snapshot_problem
from stateaware.launch.spec import ProcessSpec
from stateaware.records.check import compacted_parts
from stateaware.records.damage import QUARANTINE
from stateaware.records.part_names import (
    compacted_files,
    parse_part_name,
    part_file_name,
    run_folder,
    status_parts,
    unstamped,
)
from stateaware.records.writer import (
    DiskFullError,
    Identity,
    RecordWriter,
    as_disk_full,
    disk_full,
    part_path,
    stale_temporary,
)
from stateaware.source import UserCodeError, source_hash

__all__ = [
    "ProcessResult",
    "ProcessFailed",
    "run_one_process",
    "run_or_raise",
    "recorded_result",
    "status_row",
    "attempts_so_far",
    "highest_recorded_attempt",
    "record_status",
    "record_drift",
    "log_paths",
]


@dataclass(frozen=True)
class ProcessResult:
    process_index: int
    status: str
    attempt: int
    pid: int
    message: str = ""
    disk_full: str = ""  # the one-line DiskFullError message when the disk filled up


class ProcessFailed(RuntimeError):
    """Raised by ``run_or_raise`` after an unsuccessful attempt's row is written.

    Its message is the one-line outcome followed by the kind's traceback (when there is
    one), so the process's stderr log — submitit prints it as the job's uncaught error —
    holds what ``processes.traceback`` holds.
    """

    def __init__(self, result: ProcessResult, traceback_text: str | None = None) -> None:
        first = (result.message or "").strip().splitlines()
        line = f"process {result.process_index} {result.status} (attempt {result.attempt}): {first[0] if first else ''}"
        super().__init__(line + (f"\n\nThe process's own traceback:\n{traceback_text}" if traceback_text else ""))
        self.result = result


def identity_of(spec: ProcessSpec) -> Identity:
    return Identity(spec.run_id, spec.cohort, spec.process_index, spec.source_hash, spec.hardware_name, spec.scale)


def attempts_so_far(spec: ProcessSpec) -> int:
    """How many attempts of this process came before this one.

    The highest attempt number among the status parts (``p<index>-a<attempt>``), or Slurm's
    ``SLURM_RESTART_COUNT`` when a task was requeued (an attempt killed by a requeue or a
    preemption writes no row of its own), whichever is larger. Derived from what is
    recorded — parts moved to ``OUT/.quarantine/`` included — so a gap in the numbers or a
    damaged row never makes a number reused.
    """
    return max(highest_recorded_attempt(spec), _int_or_none(os.environ.get("SLURM_RESTART_COUNT")) or 0)


def highest_recorded_attempt(spec: ProcessSpec) -> int:
    """The highest attempt number among the process's status parts (quarantined and compacted ones too); 0 if none."""
    folder = part_path(spec.out, "processes", spec.cohort, spec.run_id, spec.process_index, "a").parent
    aside = Path(spec.out) / QUARANTINE / folder.relative_to(spec.out)  # damaged rows still used their numbers
    names = [p.name for p in status_parts(folder, spec.process_index)]
    names += [unstamped(p.name) for p in status_parts(aside, spec.process_index, stamped=True)]
    names += _compacted_status_parts([folder, aside], spec.process_index)
    parsed = [parse_part_name(name) for name in names]
    numbers = [_int_or_none(p.part.removeprefix("a")) for p in parsed if p is not None]
    return max((n for n in numbers if n is not None), default=0)


def _compacted_status_parts(folders: list[Path], process_index: int) -> list[str]:
    """``p<index>-a<attempt>`` of this process's status parts a compacted file of the run holds
    (``records/compact.py``), in ``folders`` or moved aside from them (a quarantined file's
    name ends in a time stamp): their attempt numbers were used, as a quarantined part's were."""
    compacted = [path for folder in folders for path in compacted_files(folder, stamped=True)]
    if not compacted:  # the usual case
        return []
    names = []
    for path in compacted:
        try:
            listed = compacted_parts(pq.read_schema(path).metadata) or []
        except (OSError, ValueError):
            continue
        names += [part_file_name(process_index, p["part"]) for p in listed if p["process"] == process_index]
    return names


def record_status(spec: ProcessSpec, row: dict, writer: RecordWriter | None = None) -> int:
    """Write ``row`` as the status part of attempt ``row["attempt"]``, or of the next free number.

    The part is created exclusively: when another writer already recorded that attempt,
    the row takes the next number instead of overwriting it. Returns the attempt number
    recorded (``row["attempt"]`` is updated to it).
    """
    writer = writer or RecordWriter(spec.out, identity_of(spec))
    while True:
        try:
            writer.write("processes", [row], part=f"a{row['attempt']:03d}", exclusive=True)
            return row["attempt"]
        except FileExistsError:
            row["attempt"] = max(row["attempt"] + 1, attempts_so_far(spec) + 1)


def status_row(
    spec: ProcessSpec,
    status: str,
    attempt: int,
    started: datetime,
    *,
    pid: int | None = None,
    exc: BaseException | None = None,
    message: str | None = None,
) -> dict:
    """The ``processes`` row of one attempt (written by the worker, or by the launcher for ``lost``)."""
    finished = datetime.now(UTC)
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
        **dict(zip(("stdout_path", "stderr_path"), log_paths(), strict=True)),
    }


def log_paths() -> tuple[str | None, str | None]:
    """The stdout and stderr log files submitit gives this process (``None, None`` outside a submitit job)."""
    if not os.environ.get("SUBMITIT_FOLDER"):
        return None, None
    try:
        # lazy: submitit only inside a submitit job; a local worker runs without it (the ImportError below)
        import submitit

        paths = submitit.JobEnvironment().paths
        return str(paths.stdout), str(paths.stderr)
    except (KeyError, ValueError, RuntimeError):  # not a submitit job after all
        return None, None


def run_one_process(spec: ProcessSpec) -> ProcessResult:
    """Run one attempt of process ``spec.process_index`` and record how it ended.

    A full disk ends the attempt: its status row is recorded if it still fits, and the
    result carries the one-line message so the launcher stops starting processes.
    """
    started = datetime.now(UTC)
    attempt = attempts_so_far(spec) + 1
    writer = RecordWriter(spec.out, identity_of(spec), {"attempt": str(attempt)})
    _remove_stale_temporaries(spec)

    try:
        current = source_hash(user_code(spec.kind))  # the user's kind module is code too
    except UserCodeError as exc:  # the kind's module is gone from this process's path
        message = (
            f"source drift: cohort kind {spec.kind!r}: {exc}, but the launcher hashed it at submission; "
            f"run the command where the kind's module is importable (a code snapshot carries it)"
        )
        return _finish(spec, writer, status_row(spec, "source_drift", attempt, started, message=message))
    if current != spec.source_hash:
        message = (
            f"source drift: the launcher hashed the code as {spec.source_hash[:12]}, but this process "
            f"finds {current[:12]}; the files changed after submission. Re-run the cohort command to "
            f"start a run of the current code."
        )
        return _finish(spec, writer, status_row(spec, "source_drift", attempt, started, message=message))
    problem = running_snapshot_problem(spec.source_hash)
    if problem is not None:  # bytecode, a .so or a link added after the launcher checked the snapshot
        message = f"source drift: {problem}; re-run the cohort command (the launcher rebuilds the snapshot)"
        return _finish(spec, writer, status_row(spec, "source_drift", attempt, started, message=message))

    status, error = "completed", None
    gpu = context.nvml_index(str(spec.hardware.get("device", "cpu")), os.environ.get("CUDA_VISIBLE_DEVICES"))
    before = after = None
    try:
        with pinned(spec):
            before = context.snapshot(gpu_index=gpu)
            try:
                kinds.load_kind(spec.kind).run(spec, writer)  # through the module: a replaced loader is the one used
            finally:
                after = context.snapshot(gpu_index=gpu)
    except Exception as exc:  # noqa: BLE001 - every failure (a refused pinning too) becomes a recorded outcome
        status, error = "failed", exc
        if disk_full(exc) and not isinstance(exc, DiskFullError):  # a kind's own file write ran out of space
            error = as_disk_full(exc, under=spec.out)  # the file when the error names it, else the results folder
            error.__cause__ = exc
    row = status_row(spec, status, attempt, started, exc=error)
    if before is not None and after is not None:
        row.update(context.context_columns(before, after))
    return _finish(spec, writer, row)


def record_drift(spec: ProcessSpec, message: str) -> ProcessResult:
    """Record this attempt of ``spec`` as ``source_drift`` with ``message``, running nothing of the kind.

    What a worker does when the code it was given is not the code hashed at submission; also
    called by ``stateaware.launch.bootstrap`` for a snapshot refused before it was imported.
    """
    started = datetime.now(UTC)
    attempt = attempts_so_far(spec) + 1
    writer = RecordWriter(spec.out, identity_of(spec), {"attempt": str(attempt)})
    return _finish(spec, writer, status_row(spec, "source_drift", attempt, started, message=message))


def _finish(spec: ProcessSpec, writer: RecordWriter, row: dict) -> ProcessResult:
    row["parts_json"] = json.dumps(writer.parts_written(), separators=(",", ":"))
    full = row["exception_message"] if row["exception_type"] == DiskFullError.__name__ else ""
    try:
        attempt = record_status(spec, row, writer)
    except DiskFullError as exc:  # the status row itself did not fit: the launcher records nothing either
        return ProcessResult(spec.process_index, "failed", row["attempt"], os.getpid(), str(exc), disk_full=str(exc))
    return ProcessResult(
        spec.process_index, row["status"], attempt, os.getpid(), row["exception_message"] or "", disk_full=full or ""
    )


def run_or_raise(spec: ProcessSpec) -> ProcessResult:
    """``run_one_process``, raising ``ProcessFailed`` once an unsuccessful attempt is recorded.

    What a fresh process runs (local and Slurm launchers), so its exit code says how it
    ended: 0 for ``completed``, 1 (an uncaught exception, its traceback on stderr) for
    ``failed``, ``source_drift`` and every other unsuccessful outcome.
    """
    result = run_one_process(spec)
    if result.status != "completed":
        raise ProcessFailed(result, _recorded_traceback(spec, result.attempt))
    return result


def _recorded_traceback(spec: ProcessSpec, attempt: int) -> str | None:
    path = part_path(spec.out, "processes", spec.cohort, spec.run_id, spec.process_index, f"a{attempt:03d}")
    try:
        values = pq.read_table(path, columns=["traceback"]).column("traceback").to_pylist()
    except (OSError, ValueError, KeyError):  # not recorded (a full disk): the message says enough
        return None
    return values[0] if values else None


def recorded_result(spec: ProcessSpec, stdout_path: str) -> ProcessResult | None:
    """The result a process recorded for its latest attempt in the submitit job whose log is ``stdout_path``.

    How the launcher reads a job that raised ``ProcessFailed``: the row is the record,
    the exception only made the exit code. The log path names the job (a Slurm task's or a
    local process's; every attempt of a requeued task appends to the same one), and the
    worker recorded it. ``None`` when this job recorded no row.
    """
    folder = part_path(spec.out, "processes", spec.cohort, spec.run_id, spec.process_index, "a").parent
    best: dict | None = None
    for path in status_parts(folder, spec.process_index):
        try:
            rows = pq.read_table(path).to_pylist()
        except (OSError, ValueError):
            continue
        for row in rows:
            mine = row.get("stdout_path") == stdout_path
            if (
                mine
                and row.get("status") not in ("requeued", "lost")
                and (best is None or row["attempt"] > best["attempt"])
            ):
                best = row
    if best is None:
        return None
    message = best.get("exception_message") or ""
    full = message if best.get("exception_type") == DiskFullError.__name__ else ""
    return ProcessResult(spec.process_index, best["status"], best["attempt"], best["pid"], message, disk_full=full)


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
    """Delete temporary files that dead writers of this process left behind.

    Only files whose owner is gone (``stale_temporary``): a temporary file of a live
    writer — another launch's worker of the same process — is left alone.
    """
    prefix = f".p{spec.process_index:06d}-"
    if not Path(spec.out).is_dir():  # nothing written yet: nothing left behind either
        return
    for table_dir in Path(spec.out).iterdir():
        run_dir = run_folder(spec.out, table_dir.name, spec.cohort, spec.run_id)
        if run_dir.is_dir():
            for tmp in run_dir.glob(f"{prefix}*.tmp-*"):
                if stale_temporary(tmp):
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
