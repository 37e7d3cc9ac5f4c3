"""Slurm through submitit: a cohort as job arrays of the cluster's size, named and commented.

Each array task runs ``RequeueableProcess``, a submitit ``Checkpointable``: when
Slurm preempts a task or it reaches its time limit, submitit's signal handler requeues it
with the same spec, and the requeued attempt replaces (never duplicates) the parts the
first one wrote, since part names are deterministic. ``scontrol requeue`` restarts a task
the same way. The next attempt records the one Slurm requeued (``requeued``, from
``sacct -D``; ``stateaware.launch.attempts``), so every attempt has a row. A task
whose process failed ends ``FAILED`` in ``sacct``, exit code 1, its traceback in its
``.err`` log; a failed or drifted task is never requeued.

Jobs are named ``stateaware-<cohort>`` (``launcher.job_name``) with the run id as their
comment. A cohort larger than the controller's ``MaxArraySize`` is split into several
arrays (``split_arrays``); waiting polls the controller with one ``sacct`` call for
every job, at a rate that backs off (``run_array``).

Submissions are written to ``OUT/.submitit/<run_id>/submissions.json`` (process index →
Slurm job id), so ``wait=false`` can return at once and a later run of the same command,
or ``python -m stateaware.analysis status``, can find what is still queued or running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stateaware.bounded_input import read_bounded
from stateaware.launch.attempts import record_requeued_attempts
from stateaware.launch.collect import collect
from stateaware.launch.snapshot import batch_script_lines
from stateaware.launch.spec import ProcessSpec
from stateaware.launch.worker import ProcessResult, run_or_raise
from stateaware.records.writer import write_bytes_atomic

if TYPE_CHECKING:  # the launcher settings type only: the status command imports this module too
    from stateaware.run_spec import LauncherSpec

# NOTE [ Lazy imports ]
#
# The analysis' ``status`` command reads Slurm submissions and states through this module,
# and submitit is no part of the analysis extra: every use of submitit imports it inside its
# function (tagged ``# lazy``), which only the launcher and the worker call.

__all__ = [
    "slurm_executor",
    "slurm_parameters",
    "submit_array",
    "run_array",
    "RequeueableProcess",
    "submissions_path",
    "read_submissions",
    "slurm_states",
    "job_name",
    "ArrayLimits",
    "parse_limits",
    "array_limits",
    "split_arrays",
    "IN_FLIGHT",
]

# Our launcher field -> submitit SlurmExecutor parameter.
_FIELDS = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "cpus_per_task": "cpus_per_task",
    "gpus_per_node": "gpus_per_node",
    "gres": "gres",
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
    "UNKNOWN",  # ours: squeue could not be asked; treated as still queued until it can
)


def _requeueable_base() -> type:
    import submitit  # lazy

    return submitit.helpers.Checkpointable


class RequeueableProcess(_requeueable_base()):  # type: ignore[misc]
    """One Slurm task's attempt as a submitit Checkpointable: requeued on preemption or timeout.

    Before it runs, it records the earlier attempts of its job that Slurm requeued
    (``stateaware.launch.attempts``); then it runs ``run_or_raise``, which raises once
    an unsuccessful attempt's row is written, so the task ends ``FAILED`` (exit code 1) in
    ``sacct`` with its traceback in the ``.err`` log. An attempt that has recorded its end is
    never requeued: a failed or drifted task stays failed.
    """

    _ended = False

    def __call__(self, spec: ProcessSpec) -> ProcessResult:
        record_requeued_attempts(spec)
        try:
            return run_or_raise(spec)
        finally:
            self._ended = True  # a signal from here on must not requeue what is recorded

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's requeue on preemption or the time limit, refused once the attempt is recorded."""
        if self._ended:
            return None
        return super().checkpoint(*args, **kwargs)


def job_name(launcher: LauncherSpec, cohort: str) -> str:
    """``launcher.job_name``, or ``stateaware-<cohort>``: what ``squeue``/``sacct`` show as JobName."""
    return launcher.job_name or f"stateaware-{cohort}"


def slurm_parameters(
    launcher: LauncherSpec, timing: bool, *, cohort: str | None = None, run_id: str | None = None
) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for the run's ``launcher`` settings (unset fields left to the cluster).

    Every job is named ``job_name`` and carries the run id as its ``--comment``, so
    ``squeue -o '%j %k'`` and ``sacct --format=JobName,Comment`` tell cohorts and runs
    apart. Timing cohorts default to an exclusive node per process, so timed processes
    never share a device or cores.
    """
    params: dict[str, Any] = {"time": max(1, int(round(launcher.timeout_min)))}
    if cohort is not None:
        params["job_name"] = job_name(launcher, cohort)
    if run_id is not None:
        params["comment"] = run_id
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


def slurm_executor(
    launcher: LauncherSpec,
    folder: Path,
    timing: bool,
    snapshot: Path | None = None,
    *,
    cohort: str | None = None,
    run_id: str | None = None,
) -> Any:
    """A submitit SlurmExecutor for the run's ``launcher`` settings; with ``snapshot``, jobs import the code from it.

    The worker's environment (nothing of the snapshot on the path; the task checks it, then
    imports from it: ``stateaware.launch.bootstrap``) is set in the batch script itself, not
    through the submitting environment: Slurm re-runs the script when it requeues an array
    task, but does not reliably carry the submission environment over to it (seen on Slurm 22.05).
    """

    import submitit  # lazy

    if shutil.which("sbatch") is None:
        raise RuntimeError(
            "launcher=slurm needs Slurm's sbatch on PATH; on one machine try "
            "launcher=local, or start a test cluster with slurm/start_cluster.sh"
        )
    executor = submitit.SlurmExecutor(folder=folder)
    params = slurm_parameters(launcher, timing, cohort=cohort, run_id=run_id)
    if snapshot is not None:
        params["setup"] = batch_script_lines()
    executor.update_parameters(**params)
    return executor


def submissions_path(out: Path | str, run_id: str) -> Path:
    return Path(out) / ".submitit" / run_id / "submissions.json"


#: The largest ``submissions.json`` read (a million submissions take ~20 MiB): a larger one is damaged.
MAX_SUBMISSIONS_BYTES = 64 << 20


def read_submissions(out: Path | str, run_id: str) -> dict[int, str]:
    """Process index → Slurm job id of the latest submission of each process of a run.

    Read to ``MAX_SUBMISSIONS_BYTES`` (``stateaware.bounded_input.read_bounded``); a file
    past it, or not JSON, is damaged: nothing is known in flight."""
    path = submissions_path(out, run_id)
    if not path.exists():
        return {}
    try:
        text = read_bounded(path, what=str(path), bound=MAX_SUBMISSIONS_BYTES, regular_only=True)
        return {int(k): v for k, v in json.loads(text).items()}
    except (ValueError, AttributeError):  # damaged: nothing known in flight; a re-run resubmits what is missing
        return {}


def _record_submissions(out: Path | str, run_id: str, jobs: dict[int, str]) -> None:
    path = submissions_path(out, run_id)
    merged = {**read_submissions(out, run_id), **jobs}
    write_bytes_atomic(json.dumps({str(k): v for k, v in sorted(merged.items())}, indent=1).encode(), path, out=out)


@dataclass(frozen=True)
class ArrayLimits:
    """The controller's limits on job arrays (``scontrol show config``)."""

    max_array_size: int  # tasks per array: indices 0 .. MaxArraySize - 1
    max_job_count: int  # jobs the controller holds at once, every user's together

    @property
    def array_size(self) -> int:
        """The most tasks one of our arrays may have."""
        return max(1, min(self.max_array_size, self.max_job_count))


#: Slurm's own defaults, used where ``scontrol`` cannot be read.
DEFAULT_LIMITS = ArrayLimits(max_array_size=1001, max_job_count=10000)


def parse_limits(text: str) -> ArrayLimits:
    """``MaxArraySize`` and ``MaxJobCount`` from ``scontrol show config`` output (Slurm's defaults if absent)."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("MaxArraySize", "MaxJobCount") and value.strip().isdigit():
            found[key.strip()] = int(value.strip())
    return ArrayLimits(
        found.get("MaxArraySize", DEFAULT_LIMITS.max_array_size), found.get("MaxJobCount", DEFAULT_LIMITS.max_job_count)
    )


def array_limits() -> ArrayLimits:
    """The cluster's ``ArrayLimits``, read once per launch from ``scontrol show config``."""
    try:
        done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return DEFAULT_LIMITS
    return parse_limits(done.stdout) if done.returncode == 0 else DEFAULT_LIMITS


def split_arrays(pending: list[ProcessSpec], limits: ArrayLimits) -> list[list[ProcessSpec]]:
    """``pending`` in order, cut into arrays of at most ``limits.array_size`` tasks."""
    size = limits.array_size
    return [pending[i : i + size] for i in range(0, len(pending), size)]


def _array_ids(job_ids: list[str]) -> list[str]:
    """The distinct Slurm jobs to ask about: an array task ``123_4`` is asked as its array ``123``."""
    return sorted({job.split("_")[0] for job in job_ids})


def _expand(job: str) -> list[str]:
    """``sacct``'s ``123_[3-5,7%2]`` (tasks not started yet) as ``123_3 … 123_7``; other ids as they are."""
    head, bracket, rest = job.partition("_[")
    if not bracket:
        return [job]
    tasks = []
    for span in rest.rstrip("]").split("%")[0].split(","):
        first, _, last = span.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            tasks += [f"{head}_{t}" for t in range(int(first), int(last or first) + 1)]
    return tasks


def _parse_states(text: str) -> dict[str, str]:
    states = {}
    for line in text.splitlines():
        job, _, state = line.partition("|")
        for one in _expand(job.strip()):
            states[one] = state.split(" ")[0].strip() if state else ""
    return states


def slurm_states(job_ids: list[str]) -> dict[str, str]:
    """Slurm's state of each job id: one ``sacct`` call for all of them, one ``squeue`` call for the
    ids ``sacct`` does not know (a cluster without slurmdbd); unknown ids omitted."""
    if not job_ids:
        return {}
    states: dict[str, str] = {}
    if shutil.which("sacct") is not None:
        try:
            done = subprocess.run(
                ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(_array_ids(job_ids))],
                capture_output=True,
                text=True,
                timeout=30,
            )
            states = _parse_states(done.stdout) if done.returncode == 0 else {}
        except (OSError, subprocess.SubprocessError):
            pass
    missing = [j for j in job_ids if j not in states]
    if missing:
        states.update({j: s for j, s in _squeue(missing).items() if j in missing})
    return {j: states[j] for j in job_ids if j in states}


def _squeue(job_ids: list[str]) -> dict[str, str]:
    """The ids among ``job_ids`` that ``squeue`` still lists (one line per array task) → state."""
    if shutil.which("squeue") is None:
        return {}
    try:
        done = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(_array_ids(job_ids))],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return {j: "UNKNOWN" for j in job_ids}  # cannot tell: assume still queued, ask again later
    return _parse_states(done.stdout)


def submit_array(
    executor: Any, out: Path | str, run_id: str, pending: list[ProcessSpec], task: Any = None
) -> list[Any]:
    """Submit ``pending`` as one job array of ``task`` (default ``RequeueableProcess``; on a
    snapshot, ``RequeueableFromSnapshot``); record and return the jobs."""
    jobs = executor.map_array(task if task is not None else RequeueableProcess(), pending)
    _record_submissions(out, run_id, {spec.process_index: job.job_id for spec, job in zip(pending, jobs, strict=True)})
    return jobs


def _after(executor: Any, job_id: str | None) -> Any:
    """``executor``, or a copy whose jobs wait for Slurm job ``job_id`` to end (``--dependency=afterany``)."""
    if job_id is None:
        return executor
    import submitit  # lazy

    copy = submitit.SlurmExecutor(folder=executor.folder, max_num_timeout=executor.max_num_timeout)
    copy.update_parameters(**{**executor.parameters, "dependency": f"afterany:{job_id.split('_')[0]}"})
    return copy


def in_flight(out: Path | str, run_id: str, indices: list[int]) -> dict[int, str]:
    """Of ``indices``, the processes whose latest Slurm job is still queued or running → job id."""
    submitted = read_submissions(out, run_id)
    jobs = {i: submitted[i] for i in indices if i in submitted}
    states = slurm_states(list(jobs.values()))
    return {i: job for i, job in jobs.items() if states.get(job, "") in IN_FLIGHT}


#: The longest wait between two ``sacct`` calls while jobs run (the calls back off to it).
MAX_SACCT_INTERVAL_S = 15.0


def run_array(
    executor: Any,
    pending: list[ProcessSpec],
    on_result: Callable[[ProcessResult, int], None],
    *,
    poll_s: float,
    out: Path | str,
    run_id: str,
    wait: bool = True,
    limits: ArrayLimits | None = None,
    task: Any = None,
    on_queued: Callable[[int], None] | None = None,
) -> list[str]:
    """Submit the pending processes that are not already queued, as job arrays of the cluster's size.

    A cohort larger than ``MaxArraySize`` becomes several arrays; with
    ``launcher.array_parallelism`` set, each array waits for the one before it
    (``--dependency=afterany``), so the cohort never runs more tasks at once than that.
    At most ``MaxJobCount`` tasks are in the queue at once: with ``wait`` the rest are
    submitted as earlier ones end, without it the next run of the command submits them.

    Processes whose earlier submission is still queued or running are not submitted again;
    with ``wait`` they are waited for with the new ones, each reported to ``on_result`` as it
    ends, with the number of processes still in flight (queued or running); ``on_queued`` gets
    that number after each submission (a progress display counts both). Waiting reads result
    files every ``poll_s`` and asks the controller at a bounded rate: one ``sacct`` call for
    every job at once, spaced from ``poll_s`` doubling up to
    ``MAX_SACCT_INTERVAL_S``, and one ``squeue`` call to confirm the jobs ``sacct`` says
    ended without a result (it briefly calls a requeued task ``CANCELLED``). Returns the
    Slurm job ids of the processes now in flight (new and earlier).
    """
    import submitit  # lazy

    queued = in_flight(out, run_id, [s.process_index for s in pending])
    fresh = [s for s in pending if s.process_index not in queued]
    by_index = {s.process_index: s for s in pending}
    jobs: dict[Any, ProcessSpec] = {
        submitit.SlurmJob(folder=executor.folder, job_id=job_id): by_index[i] for i, job_id in queued.items()
    }
    limits = limits or (array_limits() if fresh else DEFAULT_LIMITS)
    arrays = split_arrays(fresh, limits)
    throttled = executor.parameters.get("array_parallelism") is not None
    last: list[str | None] = [None]

    def submit_what_fits() -> None:
        while arrays and len(jobs) + len(arrays[0]) <= max(limits.max_job_count, len(arrays[0])):
            chunk = arrays.pop(0)
            submitted = submit_array(_after(executor, last[0] if throttled else None), out, run_id, chunk, task)
            jobs.update(zip(submitted, chunk, strict=True))
            last[0] = submitted[0].job_id
            if on_queued is not None:
                on_queued(len(jobs))

    if on_queued is not None and jobs:  # earlier submissions still in flight
        on_queued(len(jobs))
    submit_what_fits()
    ids = [job.job_id for job in jobs]
    if arrays:
        left = sum(len(a) for a in arrays)
        print(f"{left} processes wait for room in the queue (MaxJobCount={limits.max_job_count})", file=sys.stderr)
    if not wait:
        return ids
    _wait(jobs, on_result, poll_s=poll_s, refill=submit_what_fits)
    return ids


def _wait(
    jobs: dict[Any, ProcessSpec],
    on_result: Callable[[ProcessResult, int], None],
    *,
    poll_s: float,
    refill: Callable[[], None],
) -> None:
    """Report each job of ``jobs`` to ``on_result`` as it ends; see ``run_array`` for the polling rate."""
    poll_s = max(poll_s, 0.5)
    sacct_every, next_sacct = poll_s, time.monotonic() + poll_s
    unknown: dict[Any, int] = {}  # polls in a row that neither sacct nor squeue listed the job
    while jobs:
        ended: dict[Any, str | None] = {job: None for job in jobs if job.paths.result_pickle.exists()}
        rest = [job for job in jobs if job not in ended]
        if rest and time.monotonic() >= next_sacct:
            states = slurm_states([job.job_id for job in rest])
            gone = [job for job in rest if job.job_id in states and states[job.job_id] not in IN_FLIGHT]
            listed = _squeue([job.job_id for job in gone]) if gone else {}
            ended.update({job: states[job.job_id] for job in gone if job.job_id not in listed})
            # Known to neither: sacct lags a new job by a second or so; twice in a row, polls
            # seconds apart, it has left the queue of a cluster without slurmdbd (squeue only).
            for job in rest:
                unknown[job] = unknown.get(job, 0) + 1 if job.job_id not in states else 0
            ended.update({job: "" for job in rest if unknown[job] >= 2})
            sacct_every = min(2 * sacct_every, max(MAX_SACCT_INTERVAL_S, poll_s))
            next_sacct = time.monotonic() + sacct_every
        for job, state in ended.items():
            result = collect(job, jobs.pop(job), state=state)
            on_result(result, len(jobs))
        if ended:
            refill()
        if jobs and not ended:
            time.sleep(poll_s)
