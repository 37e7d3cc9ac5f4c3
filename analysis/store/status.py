"""``python -m stateaware.analysis status``: each process's state from the records and from Slurm.

For every run in the results (or those named), one row per expected process: its latest
recorded status and attempt, and — for processes submitted to Slurm — the job id and the
scheduler's current state (one ``sacct`` call per run), so a detached cohort
(``wait=false``) can be followed until its records land. Then where to look: the node the
latest attempt ran on and its stdout/stderr log files (``processes.stdout_path`` and
``stderr_path``; for a job that has recorded nothing yet, the files submitit will write),
so a failed task's traceback is one ``cat`` away. A process with no status row yet shows
``-``; a ``--run-id`` that names no run in the results is an error (exit 2), as in
``report`` and ``check``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stateaware.analysis.store.views import Snapshot

__all__ = ["COLUMNS", "status_rows"]

COLUMNS = [
    "cohort",
    "run_id",
    "process_index",
    "status",
    "attempt",
    "slurm_job_id",
    "slurm_state",
    "node",
    "stdout_path",
    "stderr_path",
]


def status_rows(
    results: Path | str,
    run_ids: list[str] | None = None,
    warn: Callable[[str], None] | None = None,
    *,
    parts: Snapshot | None = None,
) -> list[tuple]:
    """Rows of :data:`COLUMNS`, one per expected process of each selected run.

    ``warn`` is called with one line per damaged part file left out of the views (a
    process whose status part is damaged shows ``-``, as one with no status yet).
    ``parts``: a :func:`stateaware.analysis.store.views.snapshot` of ``results`` to read (default: a new one).
    """
    from stateaware.analysis.store.views import connect

    from stateaware.launch.slurm import read_submissions, slurm_states

    con = connect(results, run_ids=run_ids, parts=parts)
    if warn is not None:
        for path, problem in con.execute("SELECT path, problem FROM damaged_parts ORDER BY path").fetchall():
            warn(f"warning: skipped {path}: {problem}")
    runs = con.execute("SELECT cohort, run_id, processes FROM runs ORDER BY cohort, started_at").fetchall()
    query = "SELECT run_id, process_index, status, attempt, slurm_job_id, node, stdout_path, stderr_path FROM processes"
    recorded = {(r[0], r[1]): r[2:] for r in con.execute(query).fetchall()}
    rows = []
    for cohort, run_id, processes in runs:
        jobs = read_submissions(results, run_id)
        states = slurm_states(list(jobs.values()))
        for index in range(processes):
            status, attempt, recorded_job, node, stdout, stderr = recorded.get((run_id, index), ("-", *[None] * 5))
            job = jobs.get(index)
            if job is not None and recorded_job != job:  # submitted again since that row: its logs are the new job's
                stdout, stderr = _logs(Path(results), run_id, job)
            rows.append(
                (cohort, run_id, index, status, attempt, job, states.get(job) if job else None, node, stdout, stderr)
            )
    return rows


def _logs(results: Path, run_id: str, job: str) -> tuple[str, str]:
    """The stdout and stderr files submitit names for Slurm job ``job`` of the run (written once it starts).

    Spelt out rather than asked of submitit (``JobPaths``: ``%j_%t_log.out``/``.err``, task 0),
    which the analysis does not install; tests/test_slurm_*.py compare the two."""
    folder = results / ".submitit" / run_id
    return str(folder / f"{job}_0_log.out"), str(folder / f"{job}_0_log.err")
