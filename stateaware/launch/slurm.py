"""Slurm through submitit: one job array per launch, throttled by ``array_parallelism``.

Each array task runs :class:`RequeueableProcess`, a submitit ``Checkpointable``: when
Slurm preempts a task or it reaches its time limit, submitit's signal handler requeues it
with the same spec, and the requeued attempt replaces (never duplicates) the parts the
first one wrote, since part names are deterministic. ``scontrol requeue`` restarts a task
the same way. Attempts are counted from the status rows and from Slurm's own
``SLURM_RESTART_COUNT`` (a killed attempt writes no row).

Submissions are written to ``OUT/.submitit/<run_id>/submissions.json`` (process index →
Slurm job id), so ``wait=false`` can return at once and a later run of the same command,
or ``python -m stateaware.analysis status``, can find what is still queued or running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stateaware.launch.snapshot import batch_script_lines
from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import ProcessResult, run_one_process
from stateaware.records.writer import write_bytes_atomic

if TYPE_CHECKING:  # the launcher settings type only: the status command imports this module too
    from stateaware.run import LauncherSpec

__all__ = [
    "slurm_executor",
    "slurm_parameters",
    "submit_array",
    "run_array",
    "RequeueableProcess",
    "submissions_path",
    "read_submissions",
    "slurm_states",
    "IN_FLIGHT",
]

# Our launcher field -> submitit SlurmExecutor parameter.
_FIELDS = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "cpus_per_task": "cpus_per_task",
    "gpus_per_node": "gpus_per_node",
    "constraint": "constraint",
    "exclusive": "exclusive",
    "array_parallelism": "array_parallelism",
}

#: Slurm states of a task that has not finished yet (sacct/squeue spelling).
IN_FLIGHT = (
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "RESIZING",
    "SUSPENDED",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
)


def _requeueable_base() -> type:
    import submitit

    return submitit.helpers.Checkpointable


class RequeueableProcess(_requeueable_base()):  # type: ignore[misc]
    """``run_one_process`` as a submitit Checkpointable: requeued on preemption or timeout."""

    def __call__(self, spec: ProcessSpec) -> ProcessResult:
        return run_one_process(spec)


def slurm_parameters(launcher: LauncherSpec, timing: bool) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for the run's ``launcher`` settings (unset fields left to the cluster).

    Timing cohorts default to an exclusive node per process, so timed processes never
    share a device or cores.
    """
    params: dict[str, Any] = {"time": max(1, int(round(launcher.timeout_min)))}
    for ours, theirs in _FIELDS.items():
        if getattr(launcher, ours) is not None:
            params[theirs] = getattr(launcher, ours)
    if launcher.mem_gb is not None:
        params["mem"] = f"{int(launcher.mem_gb * 1024)}M"
    if timing and launcher.exclusive is None:
        params["exclusive"] = True
    if launcher.additional_parameters:
        params["additional_parameters"] = dict(launcher.additional_parameters)
    return params


def slurm_executor(launcher: LauncherSpec, folder: Path, timing: bool, snapshot: Path | None = None) -> Any:
    """A submitit SlurmExecutor for the run's ``launcher`` settings; with ``snapshot``, jobs import the code from it.

    The snapshot goes on ``PYTHONPATH`` in the batch script itself, not through the
    submitting environment: Slurm re-runs the script when it requeues an array task, but
    does not reliably carry the submission environment over to it (seen on Slurm 22.05).
    """

    import submitit

    if shutil.which("sbatch") is None:
        raise RuntimeError(
            "launcher=slurm needs Slurm's sbatch on PATH; on one machine try "
            "launcher=local, or start a test cluster with slurm/start_cluster.sh"
        )
    executor = submitit.SlurmExecutor(folder=folder)
    params = slurm_parameters(launcher, timing)
    if snapshot is not None:
        params["setup"] = batch_script_lines(snapshot)
    executor.update_parameters(**params)
    return executor


def submissions_path(out: Path | str, run_id: str) -> Path:
    return Path(out) / ".submitit" / run_id / "submissions.json"


def read_submissions(out: Path | str, run_id: str) -> dict[int, str]:
    """Process index → Slurm job id of the latest submission of each process of a run."""
    path = submissions_path(out, run_id)
    try:
        return {int(k): v for k, v in json.loads(path.read_text()).items()} if path.exists() else {}
    except (ValueError, AttributeError):  # damaged: nothing known in flight; a re-run resubmits what is missing
        return {}


def _record_submissions(out: Path | str, run_id: str, jobs: dict[int, str]) -> None:
    path = submissions_path(out, run_id)
    merged = {**read_submissions(out, run_id), **jobs}
    write_bytes_atomic(json.dumps({str(k): v for k, v in sorted(merged.items())}, indent=1).encode(), path)


def slurm_states(job_ids: list[str]) -> dict[str, str]:
    """Slurm's state of each job id (``sacct``, falling back to ``squeue``); unknown ids omitted."""
    if not job_ids or shutil.which("sacct") is None:
        return {}
    states: dict[str, str] = {}
    try:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(job_ids)],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        for line in out.splitlines():
            job, _, state = line.partition("|")
            states[job.strip()] = state.split()[0] if state else ""
    except (OSError, subprocess.SubprocessError):
        pass
    missing = [j for j in job_ids if j not in states]
    if missing and shutil.which("squeue"):
        try:
            out = subprocess.run(
                ["squeue", "-h", "-o", "%i|%T", "-j", ",".join(missing)], capture_output=True, text=True, timeout=30
            ).stdout
            for line in out.splitlines():
                job, _, state = line.partition("|")
                states[job.strip()] = state.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return states


def submit_array(executor: Any, out: Path | str, run_id: str, pending: list[ProcessSpec]) -> list[Any]:
    """Submit ``pending`` as one job array; record and return the submitit jobs."""
    jobs = executor.map_array(RequeueableProcess(), pending)
    _record_submissions(out, run_id, {spec.process_index: job.job_id for spec, job in zip(pending, jobs, strict=True)})
    return jobs


def _queued(job_ids: list[str]) -> set[str]:
    """The ids among ``job_ids`` that ``squeue`` still lists (one line per array task)."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(job_ids)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return set(job_ids)  # cannot tell: assume still queued, ask again next poll
    return {line.strip() for line in out.splitlines()}


def _finished(jobs: list[Any]) -> list[Any]:
    """The jobs that have ended for good.

    submitit's ``done()`` alone is not enough: while Slurm requeues a task, ``sacct``
    briefly reports it ``CANCELLED`` ("due to job requeue"), which submitit takes as
    final. A job that ``squeue`` still lists is not finished, whatever ``sacct`` says.
    """
    with_result = [job for job in jobs if job.paths.result_pickle.exists()]
    rest = [job for job in jobs if job not in with_result]
    queued = _queued([job.job_id for job in rest]) if rest else set()
    return with_result + [job for job in rest if job.job_id not in queued and job.done()]


def in_flight(out: Path | str, run_id: str, indices: list[int]) -> dict[int, str]:
    """Of ``indices``, the processes whose latest Slurm job is still queued or running → job id."""
    submitted = read_submissions(out, run_id)
    jobs = {i: submitted[i] for i in indices if i in submitted}
    states = slurm_states(list(jobs.values()))
    return {i: job for i, job in jobs.items() if states.get(job, "").split(" ")[0] in IN_FLIGHT}


def run_array(
    executor: Any,
    pending: list[ProcessSpec],
    on_result: Callable[[ProcessResult], None],
    *,
    poll_s: float,
    out: Path | str,
    run_id: str,
    wait: bool = True,
) -> list[str]:
    """Submit the pending processes that are not already queued, as one job array.

    Processes whose earlier submission is still queued or running are not submitted again;
    with ``wait`` they are waited for with the new ones, each reported to ``on_result`` as it
    ends. Returns the Slurm job ids of the processes now in flight (new and earlier).
    """
    import submitit

    from stateaware.launch.collect import collect

    queued = in_flight(out, run_id, [s.process_index for s in pending])
    fresh = [s for s in pending if s.process_index not in queued]
    jobs = dict(zip(submit_array(executor, out, run_id, fresh), fresh, strict=True)) if fresh else {}
    by_index = {s.process_index: s for s in pending}
    for index, job_id in queued.items():
        jobs[submitit.SlurmJob(folder=executor.folder, job_id=job_id)] = by_index[index]
    ids = [job.job_id for job in jobs]
    if not wait:
        return ids
    while jobs:
        finished = _finished(list(jobs))
        for job in finished:
            on_result(collect(job, jobs.pop(job)))
        if jobs and not finished:
            time.sleep(max(poll_s, 1.0))  # submitit polls sacct; do not hammer the controller
    return ids
