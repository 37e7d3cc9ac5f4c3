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

from stateaware.records.columns import STATUSES

if TYPE_CHECKING:
    from stateaware.analysis.store.views import Snapshot

__all__ = ["COLUMNS", "RUN_COLUMNS", "run_rows", "status_rows"]

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
    """Rows of ``COLUMNS``, one per expected process of each selected run.

    ``warn`` is called with one line per damaged part file left out of the views (a
    process whose status part is damaged shows ``-``, as one with no status yet).
    ``parts``: a ``stateaware.analysis.store.views.snapshot`` of ``results`` to read (default: a new one).
    """
    # lazy: the analysis command line imports this module at start-up; duckdb, pyarrow, numpy: on use
    from stateaware.analysis.store.views import connect

    from stateaware.launch.slurm import read_submissions, slurm_states  # lazy: as the views above

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


#: One row per run (``run_rows``): who launched it, how many of its processes completed or
#: failed, and the code it ran.
RUN_COLUMNS = ["run_id", "cohort", "launcher", "processes", "done", "failed", "source_hash", "started_at"]

# A run's ``runs`` rows (one per launch: a resume adds one) give its launcher, size and code as
# of its latest launch, and its start as of its first; ``processes`` (the latest attempt of
# each) gives the counts. ``failed``: a latest status that ended the process without a result;
# the rest of ``processes`` (not started, running, or requeued by Slurm) is neither.
_RUNS_SQL = """
WITH launched AS (
    SELECT run_id, cohort, arg_max(launcher, started_at) AS launcher,
           arg_max(processes, started_at) AS processes, arg_max(source_hash, started_at) AS source_hash,
           min(started_at) AS started_at
    FROM runs GROUP BY run_id, cohort),
counted AS (
    SELECT run_id, cohort, count(*) FILTER (WHERE status = 'completed') AS done,
           count(*) FILTER (WHERE list_contains(?, status)) AS failed
    FROM processes GROUP BY run_id, cohort)
SELECT l.run_id, l.cohort, l.launcher, l.processes, coalesce(c.done, 0), coalesce(c.failed, 0),
       l.source_hash, l.started_at
FROM launched l LEFT JOIN counted c USING (run_id, cohort)
ORDER BY l.started_at, l.run_id
"""


def run_rows(
    results: Path | str,
    run_ids: list[str] | None = None,
    cohorts: list[str] | None = None,
    warn: Callable[[str], None] | None = None,
    *,
    parts: Snapshot | None = None,
) -> list[tuple]:
    """Rows of ``RUN_COLUMNS``, one per launched run of ``results`` (or of those ``run_ids``
    and ``cohorts`` name), in start order. Records written outside the launcher (no ``runs``
    row) make no row. ``warn`` and ``parts`` as for ``status_rows``.
    """
    from stateaware.analysis.store.views import connect  # lazy: duckdb; see status_rows

    con = connect(results, run_ids=run_ids, cohorts=cohorts, parts=parts)
    if warn is not None:
        for path, problem in con.execute("SELECT path, problem FROM damaged_parts ORDER BY path").fetchall():
            warn(f"warning: skipped {path}: {problem}")
    ended_without_result = [s for s in STATUSES if s not in ("completed", "requeued")]
    return con.execute(_RUNS_SQL, [ended_without_result]).fetchall()


def _logs(results: Path, run_id: str, job: str) -> tuple[str, str]:
    """The stdout and stderr files submitit names for Slurm job ``job`` of the run (written once it starts).

    Spelt out rather than asked of submitit (``JobPaths``: ``%j_%t_log.out``/``.err``, task 0),
    which the analysis does not install; tests/launch/test_slurm*.py compare the two."""
    folder = results / ".submitit" / run_id
    return str(folder / f"{job}_0_log.out"), str(folder / f"{job}_0_log.err")
