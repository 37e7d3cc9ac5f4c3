"""``python -m stateaware.analysis compact``: one file per table per finished run.

The command over a results folder's runs (every run, or those of ``--run-id``), one at a
time or ``--jobs`` at once, with progress on a terminal. Compacting one run — the design,
its guarantees and its limits — is ``stateaware.records.compact``, whose names this module
re-exports so that ``from stateaware.analysis.compact import compact_run`` keeps working.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing as mp
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from stateaware.analysis.store.views import runs_present
from tqdm import tqdm

from stateaware.records import compact as _engine
from stateaware.records.compact import *  # noqa: F403 - the engine's names, re-exported
from stateaware.records.compact import CompactError, RunCompaction, compact_run
from stateaware.records.schema import TABLES

__all__ = [*_engine.__all__, "compact"]


def compact(
    results: Path | str,
    run_ids: Sequence[str] | None = None,
    *,
    dry_run: bool = False,
    include_incomplete: bool = False,
    say: Callable[[str], None] = print,
    warn: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> tuple[list[RunCompaction], list[CompactError]]:
    """Compact every run of ``results`` (or those of ``run_ids``): ``compact_run`` for each.

    One line per run goes to ``say``, in run order; a run refused or failed is collected (and
    its line goes to ``warn``, default stderr) while the others go on. Progress over the tables
    goes to stderr (tqdm, only on a terminal). ``jobs`` > 1 compacts that many runs at once,
    each in a fresh process of its own (runs share no file: each has its own folders, lock and
    part-check cache file); the lines and the outcome are those of one at a time.
    ``ValueError`` for a run id the results do not hold, or ``jobs`` below 1.
    """
    if jobs < 1:  # before the results are read: bad input costs no I/O
        raise ValueError(f"invalid --jobs {jobs}: allowed values are whole numbers from 1")
    warn = warn or (lambda line: print(line, file=sys.stderr))
    present = runs_present(results)
    chosen = sorted(present) if run_ids is None else list(dict.fromkeys(run_ids))
    unknown = [r for r in chosen if r not in present]
    if unknown:
        raise ValueError(f"--run-id {unknown} not in the results; runs there: {', '.join(sorted(present)) or '(none)'}")
    work = [(cohort, run) for run in chosen for cohort in sorted(present[run])]
    done: list[RunCompaction] = []
    failed: list[CompactError] = []
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(
            tqdm(total=len(work) * len(TABLES), desc="compact", unit="table", file=sys.stderr, disable=None)
        )

        def tick(_table: str) -> None:  # a table done, in this process: the bar moves at once
            bar.update(1)

        if jobs > 1 and len(work) > 1:
            # spawn, not fork: a forked child would inherit DuckDB's and Arrow's threads mid-flight
            pool = stack.enter_context(
                concurrent.futures.ProcessPoolExecutor(min(jobs, len(work)), mp_context=mp.get_context("spawn"))
            )
            futures = [pool.submit(_compact_quietly, results, c, r, dry_run, include_incomplete) for c, r in work]
            outcomes: Iterable[RunCompaction | CompactError] = (future.result() for future in futures)
        else:
            outcomes = (_compact_quietly(results, c, r, dry_run, include_incomplete, tick) for c, r in work)
        for index, outcome in enumerate(outcomes):
            bar.n = (index + 1) * len(TABLES)
            bar.refresh()
            if isinstance(outcome, CompactError):
                failed.append(outcome)
                warn(f"error: {outcome}")
                continue
            done.append(outcome)
            for note in outcome.notes:
                warn(f"note: {note}")
            say(outcome.line())
    return done, failed


def _compact_quietly(
    results: Path | str,
    cohort: str,
    run: str,
    dry_run: bool,
    include_incomplete: bool,
    progress: Callable[[str], None] | None = None,
) -> RunCompaction | CompactError:
    """``compact_run`` for ``compact``, here or in a worker process: its refusal is
    returned, not raised, so that the caller reports it in run order like any other outcome."""
    try:
        return compact_run(
            results, cohort, run, dry_run=dry_run, include_incomplete=include_incomplete, progress=progress
        )
    except CompactError as exc:
        return exc
