"""``python -m stateaware.analysis COMMAND``: SQL and reports over a results directory.

Commands::

    sql [--results DIR] [--run-id ID ...] [--cohort NAME ...] [--format table|csv|json] [--max-rows N]
        [--timeout SECONDS] [--memory-limit SIZE] [QUERY | --file F | -]
        run a read-only query over the views (runs, processes, attempts, records,
        timings, policies, profiles, epochs, peaks, artifacts, ...); QUERY "-" or no
        QUERY reads standard input; --run-id (repeatable) restricts every view to those runs;
        only reads run (see `sql --help`); a query stopped by --timeout or --memory-limit
        exits 1
    views [--results DIR] [--sql]
        list the views and their columns; --sql prints the CREATE VIEW statements,
        for the plain duckdb CLI: `duckdb -init views.sql`
    report [--results DIR] [--strict] ...
        write the Markdown report and figures (see `report --help`); --strict
        refuses (exit 1) a run with a stability flag
    status [--results DIR] [--run-id ID ...] [--format table|csv|json]
        per process: latest recorded status and attempt, Slurm job id and state
    check [--results DIR] [--run-id ID] [--max-cv X] ...
        the stability flags of timing runs: unstable methods (step-time CV, wall/CPU)
        and loaded processes; exit 0 when clean, 1 when any flag
    compare RUN_A RUN_B [--results DIR] [--metric M] [--equivalence D]
        per method, the ratio of run B to run A with a bootstrap interval and a verdict
        (faster, slower, same, inconclusive, unreliable), on the runs' declared clock (compare --help)
    compact [--results DIR] [--run-id ID ...] [--dry-run] [--include-incomplete]
        rewrite each finished run's parts into one file per table per run, atomically and
        exactly (compact --help; docs/results.md, "Compaction"); exit 1 when a run is refused

``DIR`` defaults to ``$STATEAWARE_RESULTS`` or ``results`` — the launcher's default
``out``; it must be a directory holding at least one record table folder. A part file
that is damaged or of another schema is left out of every view with one warning line
naming it (``report`` refuses instead: verification fails naming it). Invalid input ends
in one error line and exit status 2. This command never imports torch or jax.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from stateaware.analysis.arguments import one_line, positive_int, results_dir

from stateaware.exits import INVALID, OneLineParser, fail, run_main

__all__ = ["main"]


def _results_arg(parser: argparse.ArgumentParser) -> None:
    from stateaware.analysis.arguments import results_argument

    results_argument(parser)


def _query_text(args: argparse.Namespace) -> str:
    try:
        if args.file is not None:
            return Path(args.file).read_text(encoding="utf-8")
        if args.query in (None, "-"):  # bytes, decoded strictly: a C locale would smuggle them in escaped
            return sys.stdin.buffer.read().decode("utf-8")
    except FileNotFoundError:
        fail(f"error: --file {args.file}: no such file; pass a file holding the SQL, or the SQL itself")
    except IsADirectoryError:
        fail(f"error: --file {args.file}: a directory, not a file of SQL")
    except UnicodeDecodeError as exc:
        source = f"--file {args.file}" if args.file is not None else "standard input"
        fail(f"error: {source}: not UTF-8 text (byte {exc.start}); SQL must be UTF-8")
    except OSError as exc:
        fail(f"error: --file {args.file}: {exc.strerror or exc}")
    return args.query


def _check_chosen_runs(results: Path, run_ids: list[str] | None, cohorts: list[str] | None) -> None:
    """An unknown ``--run-id`` or ``--cohort`` is an error naming what the results hold, as in
    report and check, not empty views; found from the partition folders, no part opened."""
    from stateaware.analysis.store.views import runs_present

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
    import duckdb
    from stateaware.analysis.store.sql import LimitError, Limits, ReadOnlyError, open_database_early, run
    from stateaware.analysis.store.views import snapshot

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


def _seconds(text: str) -> float:
    """An ``argparse`` type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def _memory_size(text: str) -> str:
    """An ``argparse`` type: a size DuckDB reads as a ``memory_limit`` ("2GB", "512MiB", "50%")."""
    from stateaware.analysis.store.sql import DEFAULT_MEMORY_LIMIT

    if text == DEFAULT_MEMORY_LIMIT:  # argparse types the default too: no database made for it
        return text
    import duckdb

    try:  # DuckDB's own reading of the size, on a throwaway database
        duckdb.connect(":memory:", config={"memory_limit": text}).close()
        valid = not text.strip().startswith("-")  # DuckDB reads a negative size as "no limit"
    except duckdb.Error:
        valid = False
    if not valid:
        raise argparse.ArgumentTypeError(f"must be a size such as 2GB, 512MiB or 50% (of the memory), got {text!r}")
    return text


def _views(args: argparse.Namespace) -> int:
    from stateaware.analysis.store.views import PARTS_PREFIX, connect, damaged_parts, snapshot, views_sql

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:  # its own parser: see stateaware.analysis.report
        from stateaware.analysis.report import main as report_main

        return report_main(argv[1:])
    if argv[:1] == ["check"]:  # its own parser: see stateaware.analysis.stats.stability
        from stateaware.analysis.stats.stability import main as check_main

        return check_main(argv[1:])
    if argv[:1] == ["status"]:  # its own parser: see stateaware.analysis.store.status
        from stateaware.analysis.store.status import main as status_main

        return status_main(argv[1:])
    if argv[:1] == ["compact"]:  # its own parser: see stateaware.analysis.compact
        from stateaware.analysis.compact import main as compact_main

        return compact_main(argv[1:])
    if argv[:1] == ["compare"]:  # its own parser: see stateaware.analysis.stats.compare_runs
        from stateaware.analysis.stats.compare_runs import main as compare_main

        return compare_main(argv[1:])
    from stateaware.analysis.store.sql import DEFAULT_MAX_ROWS, DEFAULT_MEMORY_LIMIT, DEFAULT_TIMEOUT_S, FORMATS

    parser = OneLineParser(
        prog="python -m stateaware.analysis",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    _results_arg(sql)
    sql.add_argument(
        "--run-id",
        action="append",
        default=None,
        metavar="ID",
        help="restrict every view to this run (repeatable; default: every run); a run not in the results exits 2",
    )
    sql.add_argument(
        "--cohort",
        action="append",
        default=None,
        metavar="NAME",
        help="restrict every view to this cohort's runs (repeatable; default: every cohort); unknown exits 2",
    )
    sql.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="output format (default: table); csv and json stream any number of rows in bounded memory",
    )
    sql.add_argument(
        "--max-rows",
        type=positive_int,
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
    _results_arg(views)
    views.add_argument("--sql", action="store_true", help="print the CREATE VIEW statements (for the duckdb CLI)")
    views.set_defaults(func=_views)

    commands.add_parser("report", help="write the Markdown report and figures (report --help)")
    commands.add_parser("status", help="each process's state from the records and from Slurm (status --help)")
    commands.add_parser("check", help="unstable methods and loaded processes of timing runs (check --help)")
    commands.add_parser("compact", help="one file per table per finished run, atomically (compact --help)")
    commands.add_parser("compare", help="run B against run A, per method, with intervals (compare --help)")

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    # `sql` leaves nothing open once it has returned (its connection closed, the part checks
    # saved, its output flushed): it need not wait for the interpreter's teardown.
    run_main(main, skip_teardown=sys.argv[1:2] == ["sql"])
