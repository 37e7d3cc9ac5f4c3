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

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stateaware.analysis.store.views import Snapshot

__all__ = ["status_rows", "main"]

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
    which the analysis does not install; tests/launch/test_slurm*.py compare the two."""
    folder = results / ".submitit" / run_id
    return str(folder / f"{job}_0_log.out"), str(folder / f"{job}_0_log.err")


def main(argv: list[str] | None = None) -> int:
    """``status [--results DIR] [--run-id ID ...] [--format F]``: exit 0 when every process completed, else 1.

    Invalid input (a bad argument, no results directory, a ``--run-id`` naming no run) exits 2.
    """
    from stateaware.analysis.arguments import results_argument, results_dir
    from stateaware.analysis.report import select_runs
    from stateaware.analysis.store.sql import FORMATS, format_result
    from stateaware.analysis.store.views import connect, snapshot

    from stateaware.exits import OneLineParser, fail

    parser = OneLineParser(prog="python -m stateaware.analysis status", description=__doc__.split("\n")[0])
    results_argument(parser)
    parser.add_argument(
        "--run-id",
        action="append",
        default=None,
        metavar="ID",
        help="only this run (repeatable; default: every run); a run not in the results exits 2",
    )
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    args = parser.parse_args(argv)
    results = results_dir(args.results)
    parts = snapshot(results)  # one check of every part, for the run ids and the rows
    if args.run_id:
        try:
            select_runs(connect(results, parts=parts), args.run_id)
        except ValueError as exc:
            fail(f"error: {exc}")
    rows = status_rows(results, args.run_id, warn=lambda line: print(line, file=sys.stderr), parts=parts)
    print(format_result(COLUMNS, rows, args.format))
    return 0 if all(r[3] == "completed" for r in rows) else 1


if __name__ == "__main__":
    from stateaware.exits import run_main

    run_main(main)
