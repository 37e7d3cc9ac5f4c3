"""Verification before analysis: a run is analysed only when its records are whole.

The paper verified "terminal status, source identity and the archived raw timings" before
any interval was computed (§11). ``verify`` does that over the DuckDB views of a
results directory and either returns a ``Verification`` or raises
``VerificationError`` whose message names every problem it found — not just the first.

Checks, per run (rule numbers are cited in the code):

1. The run is in ``runs`` with one expected process count ``processes``.
2. Every process ``0 .. processes-1`` exists and its latest attempt ended ``completed``;
   no process index lies outside that range. The other outcomes (``records.schema.STATUSES``)
   fail it: ``failed``, ``source_drift``, ``cancelled``, ``lost``, ``damaged``, and
   ``requeued`` — a row for an attempt Slurm requeued, carrying that attempt's number, so it
   is the latest only while the next attempt has not recorded its end.
3. One source hash across the run's rows, in every table that has rows for it.
4. In ``policies``: one ``card_digest`` per (workload, cell) and one ``plan_digest`` per
   (workload, cell, method) — the profile card and plan are frozen for the cohort, so every
   process must have planned from the same card to the same policy. (A cohort with one cell
   thus has exactly one card digest.)
5. In ``timings``: the same number of rows in every process x method cell — the mode over
   cells unless ``expected_rows`` is given — including cells with no rows at all.
6. No duplicated rows: a row identity (process, method, step, ... — ``_ROW_KEYS``) that
   appears twice means a part was written twice under different names; the message names
   the part files.
7. In a timing cohort (the run's stored config says ``cohort.timing: true`` and declares
   ``cohort.params.methods``): every declared method has timings in every completed
   process, unless that process's ``policies`` row records its plan infeasible. The
   expected methods come from the stored config, never from the timings that exist — a
   method whose check failed (``error``, ``reject``, ``diverge``) was not timed, and the
   message says why.
8. No damaged part: a part file the views left out (truncated, zero bytes, not Parquet,
   a page that fails its checksum or does not decode, identity columns that disagree with
   the part's place, or another schema — the connection's ``damaged_parts`` table, see
   ``stateaware.analysis.store.views``) in the run's partition, or outside any run, is named
   with what is wrong with it. Entries that are not tables at all (``ignored``) are not
   the run's and do not count.
9. Every table holds, per completed process, the rows that process's completed attempt
   recorded writing (``processes.parts_json``, schema version 6): a part emptied, replaced
   by another run's or process's, lost, or added afterwards is named with the process, the
   table and both counts. Processes recorded before version 6 have no record to compare.

``allow_partial=True`` tolerates rule 2 only (missing or unfinished processes): the other
rules are then checked over the completed processes, and the result says
``partial (k of n processes)``. Integrity problems — mixed hashes, digests, row counts,
duplicates, damaged parts — always stop the analysis.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stateaware.text import LIST_AT_MOST, index_ranges, shorten, sql_name

__all__ = [
    "COMPLETED",
    "Verification",
    "RunVerification",
    "VerificationError",
    "verify",
]

#: The only terminal status whose rows enter an analysis (``records.schema.STATUSES``).
COMPLETED = "completed"


#: Columns that identify one logical row per table (rule 6). Only the columns a view has
#: are used. ``records`` has no such key — a cohort may legitimately log the same outcome
#: twice (two checks of one program) — so it is not checked for duplicates.
_ROW_KEYS: dict[str, tuple[str, ...]] = {
    "timings": (
        "process_index",
        "method",
        "precision",
        "warmup",
        "step",
        "workload",
        "cell",
        "budget_bytes",
        "seed",
    ),
    "policies": ("process_index", "method", "planner", "workload", "cell", "budget_bytes"),
    "epochs": ("process_index", "method", "seed", "phase", "epoch"),
    "peaks": ("process_index", "method", "seed", "event", "event_index"),
}

#: Tables whose rows a worker records writing (rule 9): all but the status rows themselves
#: and the launcher's ``runs`` manifest.
_RECORDED_TABLES = ("records", "timings", "policies", "profiles", "epochs", "peaks", "artifacts")

#: Tables whose rows carry the run's source hash (rule 3), checked when the view exists.
_HASHED_TABLES = (
    "runs",
    "processes",
    "records",
    "timings",
    "policies",
    "profiles",
    "epochs",
    "peaks",
    "artifacts",
)


class VerificationError(RuntimeError):
    """The records of a run are not fit for analysis; ``problems`` lists every reason."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"verification failed with {len(self.problems)} problem(s):\n{lines}\n"
            "Fix or re-run the named processes; pass allow_partial=True (--partial) only to "
            "analyse the completed processes of an unfinished run."
        )


@dataclass(frozen=True)
class RunVerification:
    """One run's verified state: which processes are complete out of how many expected."""

    run_id: str
    cohort: str
    expected: int
    completed: tuple[int, ...]
    #: Rule-2 problems tolerated under ``allow_partial`` (empty for a complete run).
    incomplete: tuple[str, ...] = ()

    @property
    def partial(self) -> bool:
        return len(self.completed) < self.expected

    @property
    def label(self) -> str:
        """``complete (n of n processes)`` or ``partial (k of n processes)``."""
        state = "partial" if self.partial else "complete"
        return f"{state} ({len(self.completed)} of {self.expected} processes)"


@dataclass(frozen=True)
class Verification:
    """The verified runs. ``partial`` is true when any run lacks completed processes."""

    runs: tuple[RunVerification, ...]

    @property
    def partial(self) -> bool:
        return any(r.partial for r in self.runs)

    @property
    def expected(self) -> int:
        return sum(r.expected for r in self.runs)

    @property
    def completed(self) -> int:
        return sum(len(r.completed) for r in self.runs)

    @property
    def label(self) -> str:
        """``complete (n of n processes)`` or ``partial (k of n processes)`` over all runs."""
        state = "partial" if self.partial else "complete"
        return f"{state} ({self.completed} of {self.expected} processes)"

    def run(self, run_id: str) -> RunVerification:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise KeyError(f"run {run_id!r} was not verified; verified runs: {[r.run_id for r in self.runs]}")


def verify(
    con: Any,
    *,
    run_id: str | None = None,
    allow_partial: bool = False,
    expected_rows: int | None = None,
) -> Verification:
    """Check one run (or, with ``run_id=None``, every run in ``runs``) before analysis.

    ``con`` is a DuckDB connection with at least the views ``runs`` and ``processes``;
    ``timings``, ``records``, ``policies`` and the other record tables are checked when
    present. ``expected_rows`` fixes the timing rows per process x method (warm-ups and
    measured steps together) instead of taking the mode. Raises ``VerificationError``
    naming every problem; see the module docstring for the rules and what
    ``allow_partial`` tolerates.
    """
    views = _views(con)
    missing = [v for v in ("runs", "processes") if v not in views]
    if missing:
        raise VerificationError([f"view(s) {missing} missing; verification needs runs and processes"])

    problems: list[str] = _damaged(con, run_id)  # rule 8
    run_rows = con.execute(
        "SELECT run_id, list(DISTINCT cohort), list(DISTINCT processes) FROM runs "
        + ("WHERE run_id = ? " if run_id is not None else "")
        + "GROUP BY run_id ORDER BY run_id",
        [run_id] if run_id is not None else [],
    ).fetchall()
    if run_id is not None and not run_rows:
        known = [r for (r,) in con.execute("SELECT DISTINCT run_id FROM runs ORDER BY 1").fetchall()]
        raise VerificationError([f"run {run_id!r} is not in runs; runs present: {known}"])
    if not run_rows:
        raise VerificationError(["runs is empty: no run to verify"])
    if run_id is None:
        # Rule 1 from the other side: rows of a run nobody declared cannot be analysed.
        orphans = [
            r
            for (r,) in con.execute(
                "SELECT DISTINCT run_id FROM processes WHERE run_id NOT IN (SELECT run_id FROM runs) ORDER BY 1"
            ).fetchall()
        ]
        if orphans:
            problems.append(f"processes has rows for run(s) {orphans} that are not in runs")

    verified = []
    for rid, cohorts, counts in run_rows:
        run_problems, run = _verify_run(con, views, rid, cohorts, counts, allow_partial, expected_rows)
        problems.extend(run_problems)
        if run is not None:
            verified.append(run)
    if problems:
        raise VerificationError(problems)
    return Verification(tuple(verified))


def _verify_run(
    con: Any,
    views: Mapping[str, set[str]],
    run_id: str,
    cohorts: list[str],
    counts: list[int | None],
    allow_partial: bool,
    expected_rows: int | None,
) -> tuple[list[str], RunVerification | None]:
    problems: list[str] = []
    where = f"run {run_id!r}"
    # Rule 1: one declared process count.
    counts = [c for c in counts if c is not None]
    if len(counts) != 1 or len(cohorts) != 1:
        return [
            f"{where}: runs must give one cohort and one process count; found cohorts {sorted(cohorts)} "
            f"and process counts {sorted(counts)}"
        ], None
    cohort, expected = cohorts[0], int(counts[0])

    # Rule 2: the latest attempt of every expected process completed. Taking the latest
    # attempt here (not trusting the view to have done it) keeps this correct over both the
    # lead's latest-attempt `processes` view and a raw view of all attempts.
    latest = con.execute(
        """
        SELECT process_index, status, attempt, exception_type, exception_message
        FROM processes WHERE run_id = ?
        QUALIFY row_number() OVER (
            PARTITION BY process_index ORDER BY attempt DESC NULLS LAST, finished_at DESC NULLS LAST
        ) = 1
        ORDER BY process_index
        """,
        [run_id],
    ).fetchall()
    seen = {int(p): (status, attempt, etype, emsg) for p, status, attempt, etype, emsg in latest}
    incomplete: list[str] = []
    absent = [p for p in range(expected) if p not in seen]
    if absent:
        incomplete.append(
            f"{where}: {len(absent)} of {expected} process(es) have no status row: "
            f"process(es) {index_ranges(absent, LIST_AT_MOST)}"
        )
    for p, (status, attempt, etype, emsg) in sorted(seen.items()):
        if p < 0 or p >= expected:
            problems.append(f"{where}: process {p} is outside 0..{expected - 1} (runs declares {expected})")
        elif status != COMPLETED:
            reason = "".join(f": {part}" for part in (etype, shorten(emsg, 160)) if part)
            if status == "requeued":
                reason += "; its next attempt has not recorded its end yet (still running?)"
            incomplete.append(f"{where}: process {p} ended {status!r} (attempt {attempt}){reason}")
    completed = tuple(p for p, (status, *_rest) in sorted(seen.items()) if status == COMPLETED and 0 <= p < expected)
    if incomplete and not allow_partial:
        problems.extend(incomplete)
    if allow_partial and not completed:
        problems.append(f"{where}: no completed process; nothing to analyse even partially")
    # Under allow_partial the integrity rules look only at completed processes' rows; a
    # complete run's scope is every row, so a failed process's stray rows are still judged.
    scope = _scope_sql(completed if allow_partial else None)

    # `timings` is by far the largest table (900,000 rows in the three-workload cohort) and
    # reading its parts costs more than any aggregate over them, so rules 3, 5 and 6 share
    # one scan of it; the exact duplicate query runs only when that scan finds a suspect.
    summary = _timings_summary(con, views.get("timings", set()), run_id, scope)
    problems.extend(_check_source_hash(con, views, run_id, scope, summary))  # rule 3
    if "policies" in views:
        problems.extend(_check_digests(con, views["policies"], run_id, scope))  # rule 4
    problems.extend(_check_declared_methods(con, views, run_id, completed, summary))  # rule 7
    if summary:
        problems.extend(
            _check_timing_rows(summary, run_id, completed, expected_rows, _never_executed(con, views, run_id))
        )  # rule 5
        if any(n > keys for n, keys, *_ in summary.values()):
            problems.extend(_check_duplicates(con, "timings", views["timings"], _ROW_KEYS["timings"], run_id, scope))
    for table, key in _ROW_KEYS.items():
        if table in views and table != "timings":
            problems.extend(_check_duplicates(con, table, views[table], key, run_id, scope))  # rule 6
    problems.extend(_check_recorded_rows(con, views, run_id, completed, summary))  # rule 9
    # Status rows: `attempts` holds every attempt (the lead's views); a `processes` view of
    # raw parts stands in when there is none. One (process, attempt) twice is a duplicate.
    status_view = "attempts" if "attempts" in views else "processes"
    problems.extend(_check_duplicates(con, status_view, views[status_view], ("process_index", "attempt"), run_id, ""))

    run = RunVerification(run_id, cohort, expected, completed, tuple(incomplete) if allow_partial else ())
    return problems, run


#: (process_index, method) -> (rows, distinct row keys, least source hash, greatest source hash)
_Summary = dict[tuple[int, Any], tuple[int, int, Any, Any]]


def _timings_summary(con: Any, columns: set[str], run_id: str, scope: str) -> _Summary:
    """One pass over the run's timing rows: rows, distinct keys and hashes per cell.

    Distinct keys are counted on a 64-bit hash of the row key: a collision could only
    make a clean cell look suspect, and a suspect is confirmed by the exact query of
    ``_check_duplicates`` before anything is reported.
    """
    if not {"process_index", "method", "source_hash"} <= columns:
        return {}
    key = [c for c in _ROW_KEYS["timings"] if c in columns and c not in ("process_index", "method")]
    distinct = f"count(DISTINCT hash({', '.join(key)}))" if key else "count(*)"
    rows = con.execute(
        f"SELECT process_index, method, count(*), {distinct}, min(source_hash), max(source_hash) "
        f'FROM "timings" WHERE run_id = ? {scope} GROUP BY ALL',
        [run_id],
    ).fetchall()
    return {(int(p), m): (int(n), int(k), lo, hi) for p, m, n, k, lo, hi in rows}


def _check_source_hash(
    con: Any, views: Mapping[str, set[str]], run_id: str, scope: str, timings: _Summary
) -> list[str]:
    found: dict[str, list[str]] = defaultdict(list)
    for table in _HASHED_TABLES:
        if table not in views or "source_hash" not in views[table]:
            continue
        if table == "timings":
            by_hash: dict[Any, set[int]] = defaultdict(set)
            for (p, _m), (_n, _k, lo, hi) in timings.items():
                by_hash[lo].add(p)
                by_hash[hi].add(p)
            rows = sorted(by_hash.items(), key=lambda kv: str(kv[0]))
        else:
            rows = con.execute(
                f"SELECT source_hash, list(DISTINCT process_index ORDER BY process_index) FROM {sql_name(table)} "
                f"WHERE run_id = ? {scope} GROUP BY source_hash ORDER BY source_hash",
                [run_id],
            ).fetchall()
        for source_hash, processes in rows:
            found[source_hash].append(f"{table} (process(es) {index_ranges(processes, LIST_AT_MOST)})")
    if len(found) <= 1:
        return []
    detail = "; ".join(f"{h!r} in {', '.join(where)}" for h, where in sorted(found.items(), key=lambda kv: str(kv[0])))
    return [f"run {run_id!r}: {len(found)} source hashes, expected one: {detail}"]


def _check_digests(con: Any, columns: set[str], run_id: str, scope: str) -> list[str]:
    problems = []
    cell = [c for c in ("workload", "cell") if c in columns]
    for digest, key in (("card_digest", cell), ("plan_digest", [*cell, "method"])):
        if digest not in columns:
            continue
        key_sql = ", ".join(key) if key else "NULL"
        rows = con.execute(
            f"""
            SELECT {key_sql}, {digest}, list(DISTINCT process_index ORDER BY process_index)
            FROM policies WHERE run_id = ? AND {digest} IS NOT NULL {scope}
            GROUP BY ALL ORDER BY ALL
            """,
            [run_id],
        ).fetchall()
        groups: dict[tuple, list[tuple[str, list[int]]]] = defaultdict(list)
        for row in rows:
            *k, value, processes = row if key else row[1:]
            groups[tuple(k)].append((value, processes))
        for k, values in groups.items():
            if len(values) > 1:
                label = ", ".join(f"{c}={v!r}" for c, v in zip(key, k, strict=True)) or "the cohort"
                detail = "; ".join(f"{v!r} in process(es) {index_ranges(p, LIST_AT_MOST)}" for v, p in values)
                problems.append(
                    f"run {run_id!r}: policies for {label} carry {len(values)} {digest}s, expected one: {detail}"
                )
    return problems


def _never_executed(con: Any, views: Mapping[str, set[str]], run_id: str) -> set[tuple[int, str]]:
    """(process, method) pairs whose plan was infeasible: never executed, so no timings expected."""
    if not {"process_index", "method", "feasible"} <= views.get("policies", set()):
        return set()
    rows = con.execute(
        "SELECT DISTINCT process_index, method FROM policies WHERE run_id = ? AND NOT feasible", [run_id]
    ).fetchall()
    return {(int(p), m) for p, m in rows}


def _declared_methods(con: Any, views: Mapping[str, set[str]], run_id: str) -> list[str] | None:
    """The methods a timing run's stored config declares (``cohort.params.methods``); ``None``
    when the run is not a timing cohort or its config declares none."""
    if "config_yaml" not in views.get("runs", set()):
        return None
    # lazy: omegaconf only when a config is checked (this module is imported at the analysis command line's start-up)
    from omegaconf import OmegaConf

    texts = [
        t
        for (t,) in con.execute(
            "SELECT DISTINCT config_yaml FROM runs WHERE run_id = ? AND config_yaml IS NOT NULL", [run_id]
        ).fetchall()
    ]
    for text in texts:
        try:
            config = OmegaConf.to_container(OmegaConf.create(text))
        except Exception:  # noqa: BLE001 - an unreadable config declares nothing; rule 1 looks at runs
            continue
        cohort = config.get("cohort") if isinstance(config, dict) else None
        if not isinstance(cohort, dict):
            continue
        methods = (cohort.get("params") or {}).get("methods")
        if cohort.get("timing") and isinstance(methods, list) and methods:
            return [str(m) for m in methods]
    return None


def _check_declared_methods(
    con: Any,
    views: Mapping[str, set[str]],
    run_id: str,
    completed: Sequence[int],
    summary: _Summary,
) -> list[str]:
    methods = _declared_methods(con, views, run_id)
    if methods is None or not completed:
        return []
    timed = {cell for cell, (n, *_rest) in summary.items() if n}
    infeasible = _never_executed(con, views, run_id)
    missing = [(p, m) for p in completed for m in methods if (p, m) not in timed and (p, m) not in infeasible]
    if not missing:
        return []
    why: dict[tuple[int, str], str] = {}
    if {"process_index", "method", "outcome"} <= views.get("records", set()):
        extra = [c for c in ("precision", "exception_type", "exception_message") if c in views["records"]]
        fields = ", ".join(["process_index", "method", "outcome", *extra])
        for row in con.execute(
            f"SELECT {fields} FROM records WHERE run_id = ? AND outcome <> 'match' ORDER BY process_index, method",
            [run_id],
        ).fetchall():
            values = dict(zip(["process_index", "method", "outcome", *extra], row, strict=True))
            cell = (int(values["process_index"]), str(values["method"]))
            if cell not in why:
                error = (
                    f": {values.get('exception_type')}: {values.get('exception_message')}"
                    if values.get("exception_type")
                    else ""
                )
                why[cell] = f"semantic check {values['outcome']} ({values.get('precision') or '?'}){error}"
    listed = "; ".join(
        f"process {p} method {m!r}: {why.get((p, m), 'no timings and no record saying why')}"
        for p, m in missing[:LIST_AT_MOST]
    )
    more = f"; and {len(missing) - LIST_AT_MOST} more" if len(missing) > LIST_AT_MOST else ""
    return [
        f"run {run_id!r}: {len(missing)} declared process x method cell(s) were not timed and have no "
        f"infeasible plan (methods declared: {', '.join(methods)}): {listed}{more}"
    ]


def _check_timing_rows(
    summary: _Summary,
    run_id: str,
    completed: Sequence[int],
    expected_rows: int | None,
    infeasible: set[tuple[int, str]] = frozenset(),
) -> list[str]:
    done = set(completed)
    counts = {cell: n for cell, (n, *_rest) in summary.items() if cell[0] in done}
    if not counts:
        return []  # a cohort without timing rows (semantic, finite) has nothing to count
    methods = sorted({m for _p, m in counts}, key=str)
    cells = {(p, m): counts.get((p, m), 0) for p in completed for m in methods if (p, m) not in infeasible}
    if expected_rows is None:
        # The mode over non-empty cells; ties go to the larger count, so a run where half
        # the processes lost rows is judged against the fuller half.
        tally = Counter(n for n in cells.values() if n)
        target = max(tally, key=lambda n: (tally[n], n))
        basis = f"the mode over {len(cells)} process x method cells"
    else:
        target, basis = int(expected_rows), "as given"
    wrong = [(p, m, n) for (p, m), n in sorted(cells.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))) if n != target]
    if not wrong:
        return []
    listed = ", ".join(f"process {p} method {m!r}: {n}" for p, m, n in wrong[:LIST_AT_MOST])
    more = f", and {len(wrong) - LIST_AT_MOST} more" if len(wrong) > LIST_AT_MOST else ""
    return [
        f"run {run_id!r}: timings expected {target} rows per process and method ({basis}); "
        f"{len(wrong)} cell(s) differ: {listed}{more}"
    ]


def _check_duplicates(
    con: Any, table: str, columns: set[str], key: Sequence[str], run_id: str, scope: str
) -> list[str]:
    key = [c for c in key if c in columns]
    if "process_index" not in key:
        return []
    # Duplicated rows are grouped back to (process, method): one duplicated part repeats
    # every step of a method, and one message per part reads better than one per step.
    group = [c for c in ("process_index", "method") if c in key]
    key_sql = ", ".join(sql_name(c) for c in key)
    group_sql = ", ".join(sql_name(c) for c in group)
    rows = con.execute(
        f"""
        SELECT {group_sql}, count(*) AS keys, max(n) AS times FROM (
            SELECT {key_sql}, count(*) AS n FROM {sql_name(table)} WHERE run_id = ? {scope}
            GROUP BY ALL HAVING count(*) > 1
        ) GROUP BY ALL ORDER BY ALL
        """,
        [run_id],
    ).fetchall()
    if not rows:
        return []
    files = _part_files(con, table, run_id, key, group, scope)
    problems = []
    for row in rows[:LIST_AT_MOST]:
        ident, keys, times = row[: len(group)], row[len(group)], row[len(group) + 1]
        label = " ".join(f"{c.replace('process_index', 'process')} {v!r}" for c, v in zip(group, ident, strict=True))
        parts = files.get(tuple(ident))
        in_parts = f" across parts {', '.join(parts)}" if parts else ""
        problems.append(
            f"run {run_id!r}: {table} {label}: {keys} row key(s) ({', '.join(key)}) appear up to "
            f"{times} times — a duplicated part{in_parts}"
        )
    if len(rows) > LIST_AT_MOST:
        problems.append(f"run {run_id!r}: {table}: {len(rows) - LIST_AT_MOST} more duplicated group(s)")
    return problems


def _part_files(
    con: Any, table: str, run_id: str, key: Sequence[str], group: Sequence[str], scope: str
) -> dict[tuple, list[str]]:
    """The part files holding duplicated rows, per group, when the view lets us find them.

    A view that exposes DuckDB's ``filename`` column is used directly; a plain
    ``SELECT * FROM read_parquet(...)`` view is re-read with ``filename=true``. Any other
    view shape gives no file names (the message still names process and method). This
    only runs once duplicates are found, so its cost never touches a clean run.
    """
    source = _source_with_filename(con, table)
    if source is None:
        return {}
    key_sql = ", ".join(sql_name(c) for c in key)
    # IS NOT DISTINCT FROM: a null key column (precision of a CPU-only cohort) still matches.
    on = " AND ".join(f"s.{sql_name(c)} IS NOT DISTINCT FROM d.{sql_name(c)}" for c in key)
    rows = con.execute(
        f"""
        WITH s AS (SELECT * FROM {source} WHERE run_id = ? {scope}),
             d AS (SELECT {key_sql} FROM s GROUP BY ALL HAVING count(*) > 1)
        SELECT {", ".join(f"s.{sql_name(c)}" for c in group)}, list(DISTINCT s.filename ORDER BY s.filename)
        FROM s SEMI JOIN d ON {on} GROUP BY ALL
        """,
        [run_id],
    ).fetchall()
    return {tuple(row[: len(group)]): [_short_path(n, table) for n in row[len(group)]] for row in rows}


def _damaged(con: Any, run_id: str | None) -> list[str]:
    """Rule 8: one problem per damaged part of ``run_id`` (or of any run), when the connection lists them."""
    import duckdb  # lazy: the analysis command line imports this module at start-up, duckdb only when it runs

    where = "WHERE (run_id = ? OR run_id IS NULL) " if run_id is not None else ""
    query = "SELECT folder, path, run_id, problem FROM damaged_parts {}ORDER BY path"
    try:
        try:  # entries that are not tables (``ignored``) belong to no run
            rows = con.execute(
                query.format(where + ("AND " if where else "WHERE ") + "NOT coalesce(ignored, false) "),
                [run_id] if run_id is not None else [],
            ).fetchall()
        except duckdb.BinderException:  # a list without the column: every row is a part
            rows = con.execute(query.format(where), [run_id] if run_id is not None else []).fetchall()
    except duckdb.CatalogException:  # a connection built without the views module has no such table
        return []
    problems = [
        f"{'run ' + repr(rid) + ': ' if rid else ''}damaged part {_short_path(path, folder)}: {problem}; "
        f"no view includes it — move it out of the results directory and re-run its process"
        for folder, path, rid, problem in rows[:LIST_AT_MOST]
    ]
    if len(rows) > LIST_AT_MOST:
        problems.append(f"{len(rows) - LIST_AT_MOST} more damaged part(s)")
    return problems


def _recorded(con: Any, run_id: str, completed: Sequence[int]) -> dict[int, tuple[Any, dict[str, int]]]:
    """``{process: (attempt, {table: rows})}`` from the ``parts_json`` of each completed process's
    latest attempt; processes without one (recorded before schema version 6) are left out."""
    rows = con.execute(
        """
        SELECT process_index, attempt, parts_json FROM processes WHERE run_id = ?
        QUALIFY row_number() OVER (
            PARTITION BY process_index ORDER BY attempt DESC NULLS LAST, finished_at DESC NULLS LAST
        ) = 1
        """,
        [run_id],
    ).fetchall()
    done = set(completed)
    recorded: dict[int, tuple[Any, dict[str, int]]] = {}
    for process, attempt, parts_json in rows:
        if int(process) not in done or parts_json is None:
            continue
        tables: dict[str, int] = defaultdict(int)
        try:
            for part in json.loads(parts_json):
                tables[str(part["table"])] += int(part["rows"])
        except (ValueError, TypeError, KeyError):
            tables = defaultdict(int, {"(an unreadable parts_json)": -1})  # never matches: named below
        recorded[int(process)] = (attempt, dict(tables))
    return recorded


def _rows_per_process(con: Any, views: Mapping[str, set[str]], table: str, run_id: str, summary: _Summary) -> dict:
    """``{process: rows}`` of ``table`` in ``run_id`` (the timing summary's counts for ``timings``)."""
    if table == "timings" and summary:
        counts: dict[int, int] = defaultdict(int)
        for (process, _method), (n, *_rest) in summary.items():
            counts[process] += n
        return dict(counts)
    if table not in views or "process_index" not in views[table]:
        return {}
    rows = con.execute(f"SELECT process_index, count(*) FROM {sql_name(table)} WHERE run_id = ? GROUP BY 1", [run_id])
    return {int(p): int(n) for p, n in rows.fetchall() if p is not None}


def _check_recorded_rows(
    con: Any, views: Mapping[str, set[str]], run_id: str, completed: Sequence[int], summary: _Summary
) -> list[str]:
    """Rule 9: per completed process and table, the rows found are the rows its attempt recorded writing."""
    if "parts_json" not in views.get("processes", set()):
        return []
    recorded = _recorded(con, run_id, completed)
    if not recorded:
        return []
    tables = sorted({t for _attempt, counts in recorded.values() for t in counts} | set(_RECORDED_TABLES))
    found = {t: _rows_per_process(con, views, t, run_id, summary) for t in tables}
    wrong = [
        (process, table, found[table].get(process, 0), counts.get(table, 0), attempt)
        for process, (attempt, counts) in sorted(recorded.items())
        for table in tables
        if found[table].get(process, 0) != counts.get(table, 0)
    ]
    if not wrong:
        return []
    listed = "; ".join(
        f"process {p} {t}: {n} row(s) found, {want} recorded by attempt {a}"
        for p, t, n, want, a in wrong[:LIST_AT_MOST]
    )
    more = f"; and {len(wrong) - LIST_AT_MOST} more" if len(wrong) > LIST_AT_MOST else ""
    return [
        f"run {run_id!r}: {len(wrong)} process x table cell(s) hold other rows than the process recorded writing "
        f"(processes.parts_json): {listed}{more} — a part emptied, replaced, lost or added since; re-run the "
        "same command to run those processes again"
    ]


def _source_with_filename(con: Any, table: str) -> str | None:
    relations = _views(con)
    if "filename" in relations.get(table, set()):
        return sql_name(table)
    from stateaware.analysis.store.views import PARTS_PREFIX  # lazy: the views bring duckdb; see _damaged

    parts = PARTS_PREFIX + ("processes" if table == "attempts" else table)
    if "filename" in relations.get(parts, set()):
        return sql_name(parts)  # the read-only views keep each row's file here (a view, or a table DuckDB loaded)
    sql = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = ? AND NOT internal", [table]).fetchone()
    call = _read_parquet_call(sql[0]) if sql and sql[0] else None
    # Rows are filtered by run id in every query here, so any filter the view adds
    # around its read_parquet may be dropped when re-reading it for file names.
    return None if call is None else call[:-1] + ", filename = true)"


def _read_parquet_call(sql: str) -> str | None:
    """The one ``read_parquet(...)`` call in a view's SQL, parentheses balanced; else None."""
    starts = [m.start() for m in re.finditer(r"read_parquet\s*\(", sql, flags=re.IGNORECASE)]
    if len(starts) != 1:
        return None
    depth, quote = 0, None
    for i in range(sql.index("(", starts[0]), len(sql)):
        ch = sql[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return sql[starts[0] : i + 1]
    return None


def _short_path(path: str, table: str) -> str:
    marker = "/processes/" if table == "attempts" else f"/{table}/"
    cut = path.rfind(marker)
    return path[cut + 1 :] if cut >= 0 else path


def _views(con: Any) -> dict[str, set[str]]:
    rows = con.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
    ).fetchall()
    out: dict[str, set[str]] = defaultdict(set)
    for table, column in rows:
        out[table].add(column)
    return dict(out)


def _scope_sql(processes: Sequence[int] | None) -> str:
    if processes is None:
        return ""
    if not processes:
        return "AND FALSE"
    return f"AND process_index IN ({', '.join(str(int(p)) for p in processes)})"
