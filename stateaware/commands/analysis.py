"""``python -m stateaware.analysis COMMAND`` (the ``stateaware-analysis`` script): SQL and
reports over a results directory, one parser with one subparser and one handler per command.

Commands::

    runs [--results DIR] [--run-id RUN_ID ...] [--cohort COHORT ...] [--format table|csv|json]
        one line per run: cohort, launcher, processes done and failed, source hash, start
    sql [--results DIR] [--run-id RUN_ID ...] [--cohort COHORT ...] [--format table|csv|json]
        [--max-rows N] [--timeout SECONDS] [--memory-limit SIZE] [QUERY | --file F | -]
        run a read-only query over the views (runs, processes, attempts, records,
        timings, policies, profiles, epochs, peaks, artifacts, ...); QUERY "-" or no
        QUERY reads standard input; --run-id (repeatable) restricts every view to those runs;
        only reads run (see `sql --help`); a query stopped by --timeout or --memory-limit
        exits 1
    views [--results DIR] [--sql]
        list the views and their columns; --sql prints the CREATE VIEW statements,
        for the plain duckdb CLI: `duckdb -init views.sql`
    report [--results DIR] [--run-id RUN_ID ...] [--cohort COHORT ...] [--strict] ...
        write the Markdown report and figures (see `report --help`); --strict
        refuses (exit 1) a run with a stability flag
    status [--results DIR] [--run-id RUN_ID ...] [--cohort COHORT ...] [--format table|csv|json]
        per process: latest recorded status and attempt, Slurm job id and state
    check [--results DIR] [--run-id RUN_ID ...] [--cohort COHORT ...] [--format text|csv|json]
        [--max-cv X] ...
        the stability flags of timing runs: unstable methods (step-time CV, wall/CPU)
        and loaded processes; exit 0 when clean, 1 when any flag
    compare RUN_A RUN_B [--results DIR] [--metric M] [--equivalence D] [--format table|json]
        per method, the ratio of run B to run A with a bootstrap interval and a verdict
        (faster, slower, same, inconclusive, unreliable), on the runs' declared clock (compare --help)
    compact [--results DIR] [--run-id RUN_ID ...] [--cohort COHORT ...] [--dry-run] [--include-incomplete]
        rewrite each finished run's parts into one file per table per run, atomically and
        exactly (compact --help; docs/compact-a-store.md); exit 1 when a run is refused

Every command takes ``--results DIR``; ``--run-id``, ``--cohort`` and ``--format`` are
spelled and named alike wherever they apply (``stateaware.commands.arguments``). ``DIR``
defaults to ``$STATEAWARE_RESULTS`` or ``results`` — the launcher's default ``out``; it
must be a directory holding at least one record table folder. A part file that is damaged
or of another schema is left out of every view with one warning line naming it
(``report`` refuses instead: verification fails naming it). Invalid input ends in one
error line and exit status 2. This command never imports torch or jax: the parser is
built from light modules, and each handler imports what its command needs.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import astuple, fields
from pathlib import Path

from stateaware.analysis.report import UnstableError, build_report, select_runs
from stateaware.analysis.store.query_input import query_text
from stateaware.analysis.store.status import COLUMNS, RUN_COLUMNS, run_rows, status_rows
from stateaware.analysis.store.verify import VerificationError
from stateaware.commands.arguments import (
    DRAWS,
    Late,
    cohort_argument,
    number,
    one_line,
    resolved,
    results_argument,
    results_dir,
    run_id_argument,
    version_argument,
)
from stateaware.exits import INVALID, OneLineParser, fail, int_at_least, run_main
from stateaware.launch.params import Param
from stateaware.thresholds import MAX_CV, MAX_OTHER_SHARE, MAX_WALL_OVER_CPU

# NOTE [ Lazy imports ]
#
# Each handler imports what its command needs, inside the handler (the imports tagged
# ``# lazy``): the store and statistics modules bring duckdb, pyarrow and numpy, which
# ``--help``, an argument error and the other commands never load; ``sql`` over parts the
# part cache vouches for loads neither pyarrow nor numpy.

__all__ = ["create_parser", "main", "script"]

PROG = "python -m stateaware.analysis"


def _query_text(args: argparse.Namespace) -> str:
    try:
        return query_text(args.file, args.query)
    except ValueError as exc:  # InputError: too long, unreadable, not UTF-8, a FIFO left silent
        fail(f"error: {exc}")


def _chosen_runs(results: Path, run_ids: list[str] | None, cohorts: list[str] | None) -> list[str] | None:
    """The run ids ``--run-id`` and ``--cohort`` choose together (``None``: every run), each
    checked as ``_check_chosen_runs`` does; found from the partition folders."""
    from stateaware.analysis.store.views import runs_present  # lazy

    _check_chosen_runs(results, run_ids, cohorts)
    if cohorts is None:
        return run_ids
    present = runs_present(results)
    return [r for r in sorted(present) if present[r] & set(cohorts) and (run_ids is None or r in run_ids)]


def _chosen_or_fail(results: Path, run_ids: list[str] | None, cohorts: list[str] | None) -> list[str] | None:
    """``_chosen_runs`` where ``--cohort`` is given (an unknown name exits 2), else ``run_ids``
    as given: the command checks those itself, with its own message."""
    if cohorts is None:
        return run_ids
    try:
        return _chosen_runs(results, run_ids, cohorts)
    except ValueError as exc:
        fail(f"error: {exc}")


def _check_chosen_runs(results: Path, run_ids: list[str] | None, cohorts: list[str] | None) -> None:
    """An unknown ``--run-id`` or ``--cohort`` is an error naming what the results hold, as in
    report and check, not empty views; found from the partition folders, no part opened."""
    from stateaware.analysis.store.views import runs_present  # lazy

    if run_ids is None and cohorts is None:
        return
    present = runs_present(results)
    unknown = sorted(set(run_ids or ()) - set(present))
    if unknown:
        raise ValueError(f"--run-id {unknown} not in the results; runs there: {', '.join(sorted(present)) or '(none)'}")
    known_cohorts = {c for cs in present.values() for c in cs}
    unknown = sorted(set(cohorts or ()) - known_cohorts)
    if unknown:
        raise ValueError(
            f"--cohort {unknown} not in the results; cohorts there: {', '.join(sorted(known_cohorts)) or '(none)'}"
        )


def _sql(args: argparse.Namespace) -> int:
    import duckdb  # lazy

    from stateaware.analysis.store.sql import LimitError, Limits, ReadOnlyError, open_database_early, run  # lazy
    from stateaware.analysis.store.views import snapshot  # lazy

    open_database_early()  # while the parts are checked
    results = results_dir(args.results)
    text = _query_text(args)
    try:
        _check_chosen_runs(results, args.run_id, args.cohort)
        # Only the chosen runs' partitions are checked and read (views NOTE [ Pruning by run ]).
        parts = snapshot(results, args.run_id, cohorts=args.cohort)
        run(
            results,
            text,
            sys.stdout,
            fmt=args.format,
            run_ids=args.run_id,
            cohorts=args.cohort,
            max_rows=args.max_rows,
            limits=Limits(timeout_s=args.timeout, memory_limit=args.memory_limit),
            warn=lambda line: print(line, file=sys.stderr),
            parts=parts,
        )
    except ReadOnlyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return INVALID
    except LimitError as exc:  # the input was valid: exit 1, as for a check that fails
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except duckdb.PermissionException as exc:
        print(
            f"error: refused: {one_line(exc)}; results are read-only: a query reads the views only "
            f"(no files, no extensions). To keep a result, use --format csv and redirect the output.",
            file=sys.stderr,
        )
        return INVALID
    except (duckdb.Error, ValueError) as exc:  # syntax, unknown column: duckdb names the problem
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return INVALID
    return 0


#: The numeric options' ranges, checked as the run spec checks its numeric fields.
_RATIO = Param(float, above=0, maximum=1e6)  # stability thresholds, as analysis.stability.* in a run
_ALPHA = Param(float, above=0, maximum=0.5)  # a family-wise level
_JOBS = Param(int, minimum=1, maximum=1_024)

#: The longest ``--timeout``: a week. A longer one is refused rather than passed to the
#: timer, whose C width a number like 1e308 overflows.
MAX_TIMEOUT_S = 7 * 24 * 3600.0

#: The most rows ``--max-rows`` may ask the table format for: it holds the rows it shows to
#: align them; csv and json stream any number.
MAX_TABLE_ROWS = 1_000_000


def _seconds(text: str) -> float:
    """An ``argparse`` type: a number of seconds in (0, ``MAX_TIMEOUT_S``]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value <= MAX_TIMEOUT_S):
        raise argparse.ArgumentTypeError(f"must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {text!r}")
    return value


def _memory_size(text: str) -> str:
    """An ``argparse`` type: a size DuckDB reads as a ``memory_limit`` ("2GB", "512MiB", "50%")."""
    from stateaware.analysis.store.sql import DEFAULT_MEMORY_LIMIT  # lazy

    if text == DEFAULT_MEMORY_LIMIT:  # argparse types the default too: no database made for it
        return text
    import duckdb  # lazy

    try:  # DuckDB's own reading of the size, on a throwaway database
        duckdb.connect(":memory:", config={"memory_limit": text}).close()
        valid = not text.strip().startswith("-")  # DuckDB reads a negative size as "no limit"
    except duckdb.Error:
        valid = False
    if not valid:
        raise argparse.ArgumentTypeError(f"must be a size such as 2GB, 512MiB or 50% (of the memory), got {text!r}")
    return text


def _views(args: argparse.Namespace) -> int:
    from stateaware.analysis.store.views import PARTS_PREFIX, connect, damaged_parts, snapshot, views_sql  # lazy

    results = results_dir(args.results)
    if args.sql:
        parts = snapshot(results)  # one check of every part for both the warnings and the views
        for part in damaged_parts(results, parts=parts):
            print(f"warning: skipped {part}", file=sys.stderr)
        print("\n".join(views_sql(results, parts=parts)))
        return 0

    con = connect(results)
    for path, problem in con.execute("SELECT path, problem FROM damaged_parts ORDER BY path").fetchall():
        print(f"warning: skipped {path}: {problem}", file=sys.stderr)
    for (name,) in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND NOT starts_with(view_name, ?) ORDER BY view_name",
        [PARTS_PREFIX],
    ).fetchall():
        columns = con.execute(f"DESCRIBE {name}").fetchall()
        print(f"{name}: " + ", ".join(c[0] for c in columns))
    return 0


def _report(args: argparse.Namespace) -> int:
    """The report: its path on stdout; exit 1 for --strict's refusal or a write that failed."""
    from stateaware.analysis.store.views import connect  # lazy
    from stateaware.records.writer import as_disk_full, disk_full  # lazy

    results = results_dir(args.results)
    run_ids = args.run_id
    if args.cohort is not None:  # each named cohort's latest complete run, as the report chooses one
        try:
            _check_chosen_runs(results, args.run_id, args.cohort)
        except ValueError as exc:
            fail(f"error: {exc}")
        chosen = select_runs(connect(results, cohorts=args.cohort))
        run_ids = [*(args.run_id or ()), *(r.run_id for r in chosen if r.run_id not in (args.run_id or ()))]
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out}: a file, not a directory; pass --out DIR", file=sys.stderr)
        return INVALID
    try:
        path = build_report(
            results, args.out, run_ids=run_ids, allow_partial=args.partial, draws=args.draws, strict=args.strict
        )
    except UnstableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (VerificationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return INVALID
    except OSError as exc:
        if disk_full(exc):  # every file is written whole or not at all
            where = args.out if args.out is not None else results / "report"  # when the error names no file
            print(f"error: {as_disk_full(exc, under=where)}", file=sys.stderr)
        else:  # --out not creatable or not writable: name the path
            print(
                f"error: {exc.filename or args.out}: {exc.strerror or one_line(exc)}; pass --out DIR with a "
                f"writable DIR",
                file=sys.stderr,
            )
        return 1
    print(path)
    return 0


def _status(args: argparse.Namespace) -> int:
    """Exit 0 when every process completed, else 1; a ``--run-id`` naming no run exits 2."""
    from stateaware.analysis.store.sql import format_result  # lazy
    from stateaware.analysis.store.views import connect, snapshot  # lazy

    results = results_dir(args.results)
    run_ids = _chosen_or_fail(results, args.run_id, args.cohort)
    parts = snapshot(results)  # one check of every part, for the run ids and the rows
    if args.run_id:
        try:
            select_runs(connect(results, parts=parts), args.run_id)
        except ValueError as exc:
            fail(f"error: {exc}")
    rows = status_rows(results, run_ids, warn=lambda line: print(line, file=sys.stderr), parts=parts)
    print(format_result(COLUMNS, rows, args.format))
    return 0 if all(r[3] == "completed" for r in rows) else 1


def _check(args: argparse.Namespace) -> int:
    """Exit 0 when no run has a stability flag, 1 when any has."""
    from stateaware.analysis.stats.stability import Flag, describe, flags  # lazy
    from stateaware.analysis.store.sql import format_result  # lazy
    from stateaware.analysis.store.views import connect  # lazy

    results = results_dir(args.results)
    con = connect(results, run_ids=_chosen_or_fail(results, args.run_id, args.cohort))
    if args.run_id:
        known = {r for (r,) in con.execute("SELECT DISTINCT run_id FROM runs").fetchall()} | {
            r for (r,) in con.execute("SELECT DISTINCT run_id FROM processes").fetchall()
        }
        unknown = sorted(set(args.run_id) - known)
        if unknown:
            print(
                f"error: --run-id {unknown} not in {results}; list runs with: {PROG} runs --results {results}",
                file=sys.stderr,
            )
            return 2
    found = flags(
        con,
        {"max_cv": args.max_cv, "max_wall_over_cpu": args.max_wall_over_cpu, "max_other_share": args.max_other_share},
    )
    if args.format == "text":
        print(describe(found, limit=len(found)))
    else:
        print(format_result([f.name for f in fields(Flag)], [astuple(f) for f in found], args.format))
    return 1 if found else 0


def _compare(args: argparse.Namespace) -> int:
    """The comparison table (or JSON); exit 2 naming the problem for runs that cannot be compared."""
    from stateaware.analysis.stats.compare_runs import compare_runs, format_comparisons  # lazy

    try:
        rows = compare_runs(
            results_dir(args.results),
            args.run_a,
            args.run_b,
            metric=args.metric,
            alpha=args.alpha,
            draws=args.draws,
            equivalence=args.equivalence,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_comparisons(rows, args.run_a, args.run_b, args.format))
    return 0


def _runs(args: argparse.Namespace) -> int:
    """The runs, one line each (``stateaware.analysis.store.status.run_rows``)."""
    from stateaware.analysis.store.sql import format_result  # lazy

    results = results_dir(args.results)
    try:
        _check_chosen_runs(results, args.run_id, args.cohort)
    except ValueError as exc:
        fail(f"error: {exc}")
    rows = run_rows(results, args.run_id, args.cohort, warn=lambda line: print(line, file=sys.stderr))
    print(format_result(RUN_COLUMNS, rows, args.format))
    return 0


def _compact(args: argparse.Namespace) -> int:
    """Exit 0 when every chosen run is compacted (or already was), 1 when any was refused or failed."""
    from stateaware.analysis.compact import compact  # lazy

    results = results_dir(args.results)
    run_ids = _chosen_or_fail(results, args.run_id, args.cohort)
    try:
        _done, failed = compact(
            results,
            run_ids,
            dry_run=args.dry_run,
            include_incomplete=args.include_incomplete,
            jobs=args.jobs,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return INVALID
    return 1 if failed else 0


def create_parser() -> argparse.ArgumentParser:
    """The parser of every command: one subparser and one handler (``func``) each.

    Building it imports only the SQL module's constants: a default or choices that live in a
    heavier module (numpy for ``compare``) is a ``Late``, read when help shows it or the
    command runs.
    """
    from stateaware.analysis.store.sql import DEFAULT_MAX_ROWS, DEFAULT_MEMORY_LIMIT, DEFAULT_TIMEOUT_S, FORMATS  # lazy

    parser = OneLineParser(
        prog=PROG,
        description="SQL, reports and checks over a results directory.",
        epilog=(
            "DIR defaults to $STATEAWARE_RESULTS or ./results, the launcher's default out; it must be a "
            "directory holding at least one record table folder. Invalid input ends in one error line and "
            "exit status 2. See COMMAND --help for each command."
        ),
    )
    version_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sql = commands.add_parser(
        "sql",
        help="run a read-only SQL query over the results",
        description=(
            "Run a read-only SQL query over the views of a results directory. Only reads run: SELECT "
            "(WITH ... SELECT, VALUES, FROM t, DESCRIBE, SHOW, SUMMARIZE, PIVOT ... IN (...)) and plain "
            "EXPLAIN of one; any other statement (CREATE, DROP, INSERT, SET, COPY, a data-modifying WITH, "
            "EXPLAIN ANALYZE, ...) is refused by name before any statement of the input runs. Exit status: "
            "0 done; 1 the query was valid but stopped at --timeout or --memory-limit; 2 invalid input, "
            "refused statement or unknown --run-id."
        ),
    )
    results_argument(sql)
    run_id_argument(sql, "restrict every view to this run")
    cohort_argument(sql, "restrict every view to this cohort's runs")
    sql.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="output format (default: table); csv and json stream any number of rows in bounded memory",
    )
    sql.add_argument(
        "--max-rows",
        type=int_at_least(1, MAX_TABLE_ROWS),
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"table format: print at most N rows and say how many more there were (default: {DEFAULT_MAX_ROWS})",
    )
    sql.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"stop the query (exit 1) after this many seconds, printing included (default: {DEFAULT_TIMEOUT_S:g})",
    )
    sql.add_argument(
        "--memory-limit",
        type=_memory_size,
        default=DEFAULT_MEMORY_LIMIT,
        metavar="SIZE",
        help=(
            f"DuckDB's memory limit, e.g. 4GB, 512MiB or 50%%; a query needing more stops (exit 1) and "
            f"nothing spills to disk (default: {DEFAULT_MEMORY_LIMIT})"
        ),
    )
    sql.add_argument("--file", "-f", default=None, help="read the query from this file")
    sql.add_argument("query", nargs="?", default=None, help='the SQL; "-" or absent reads standard input')
    sql.set_defaults(func=_sql)

    views = commands.add_parser("views", help="list the views and their columns")
    results_argument(views)
    views.add_argument("--sql", action="store_true", help="print the CREATE VIEW statements (for the duckdb CLI)")
    views.set_defaults(func=_views)

    report = commands.add_parser(
        "report",
        help="write the Markdown report and figures",
        description=(
            "Write the Markdown report and figures of a results directory: for each cohort its latest "
            "complete run. Exit status: 0 written (its path on stdout); 1 refused by --strict or not "
            "writable; 2 invalid input or a run not fit for analysis."
        ),
    )
    results_argument(report)
    report.add_argument("--out", type=Path, default=None, metavar="DIR", help="where to write (default: DIR/report)")
    run_id_argument(
        report,
        "report this run; two runs of one cohort get one section each",
        "the latest complete run per cohort, and a list of the others",
    )
    cohort_argument(report, "report this cohort's latest complete run", "every cohort")
    report.add_argument("--partial", action="store_true", help="analyse unfinished runs; every table then says partial")
    report.add_argument("--draws", type=number(DRAWS), default=None, help="bootstrap draws (default 20,000)")
    report.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 1) when a selected run has an unstable method or a loaded process",
    )
    report.set_defaults(func=_report)

    status = commands.add_parser(
        "status",
        help="each process's state from the records and from Slurm",
        description=(
            "Each expected process of each run: its latest recorded status and attempt, its Slurm job id "
            "and state, the node it ran on and its log files. Exit status: 0 when every process "
            "completed, 1 when any did not, 2 invalid input."
        ),
    )
    results_argument(status)
    run_id_argument(status, "only this run")
    cohort_argument(status, "only this cohort's runs")
    status.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    status.set_defaults(func=_status)

    check = commands.add_parser(
        "check",
        help="unstable methods and loaded processes of timing runs",
        description=(
            "Whether a run's timings can be trusted: unstable methods and loaded processes. Exit status: "
            "0 when clean, 1 when any flag."
        ),
    )
    results_argument(check)
    run_id_argument(check, "only this run")
    cohort_argument(check, "only this cohort's runs")
    check.add_argument(
        "--max-cv", type=number(_RATIO), default=None, help=f"override the runs' max_cv (default {MAX_CV})"
    )
    check.add_argument(
        "--max-wall-over-cpu",
        type=number(_RATIO),
        default=None,
        help=f"override the runs' max_wall_over_cpu (default {MAX_WALL_OVER_CPU})",
    )
    check.add_argument(
        "--max-other-share",
        type=number(_RATIO),
        default=None,
        help=f"override the runs' max_other_share (default {MAX_OTHER_SHARE})",
    )
    check.add_argument(
        "--format",
        choices=("text", "csv", "json"),
        default="text",
        help="text: the counts, then one line per flag (default); csv and json: one row per flag",
    )
    check.set_defaults(func=_check)

    compare = commands.add_parser(
        "compare",
        help="run B against run A, per method, with intervals",
        description="per method, the ratio of run B to run A with a bootstrap interval and a verdict",
    )
    compare.add_argument("run_a", metavar="RUN_A", help="the baseline run id")
    compare.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    results_argument(compare)
    compare.add_argument(
        "--metric",
        default=None,
        choices=Late(_COMPARE, "METRICS"),
        metavar="METRIC",  # argparse would list the choices while building the parser
        help="timing column, one of %(choices)s (default: the column of the runs' declared clock, step_ms or cpu_ms)",
    )
    compare.add_argument(
        "--equivalence",
        type=_equivalence,
        default=Late(_COMPARE, "EQUIVALENCE", "{:.0%}"),
        metavar="D",
        help="margin of 'same': 2%% or 0.02 (default: %(default)s)",
    )
    compare.add_argument(
        "--alpha", type=number(_ALPHA), default=Late(_STATS, "ALPHA"), help="family-wise level (default: %(default)s)"
    )
    compare.add_argument(
        "--draws",
        type=number(DRAWS),
        default=Late(_STATS, "DRAWS", "{:,}"),
        help="bootstrap draws (default: %(default)s)",
    )
    compare.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    compare.set_defaults(func=_compare)

    compact = commands.add_parser(
        "compact",
        help="one file per table per finished run, atomically",
        description=(
            "Rewrite each finished run's parts into one file per table per run "
            "(table/cohort=C/run_id=R/compacted-<hash>.parquet), atomically and exactly; a run a live "
            "launch holds, or an incomplete one, is refused. Exit status: 0 done, 1 a run refused or "
            "failed, 2 invalid input."
        ),
    )
    results_argument(compact)
    run_id_argument(compact, "compact this run")
    cohort_argument(compact, "compact this cohort's runs")
    compact.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be compacted and the files and bytes it saves; change nothing",
    )
    compact.add_argument(
        "--jobs",
        type=number(_JOBS),
        default=1,
        metavar="N",
        help="compact N runs at once, each in a process of its own (default: 1)",
    )
    compact.add_argument(
        "--include-incomplete",
        action="store_true",
        help="compact the completed processes of an unfinished run too (the others' parts stay)",
    )
    compact.set_defaults(func=_compact)

    runs = commands.add_parser(
        "runs",
        help="list the runs: cohort, launcher, processes done and failed, code, start",
        description=(
            "One line per launched run, in start order: its id, cohort and launcher, how many processes it "
            "has and how many completed or failed (latest attempt each), the source hash of the code it "
            "ran and when it started. The run ids are what --run-id takes everywhere."
        ),
    )
    results_argument(runs)
    run_id_argument(runs, "only this run")
    cohort_argument(runs, "only this cohort's runs")
    runs.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    runs.set_defaults(func=_runs)
    return parser


_COMPARE = "stateaware.analysis.stats.compare_runs"
_STATS = "stateaware.analysis.stats"


def _equivalence(text: str) -> float:
    """``--equivalence``, read by the comparison's own rule (imported only when the flag is given)."""
    from stateaware.analysis.stats.compare_runs import parse_equivalence  # lazy

    return parse_equivalence(text)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments) and run its command; the exit status."""
    args = create_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.func(resolved(args)))


def script() -> None:
    """Run the command line as a program: ``python -m stateaware.analysis`` and the
    ``stateaware-analysis`` script; exits with the command's status."""
    # `sql` leaves nothing open once it has returned (its connection closed, the part checks
    # saved, its output flushed): it need not wait for the interpreter's teardown.
    run_main(main, skip_teardown=sys.argv[1:2] == ["sql"])


if __name__ == "__main__":
    script()
