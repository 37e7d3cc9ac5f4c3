"""``python -m stateaware.analysis COMMAND``: SQL and reports over a results directory.

Commands::

    sql [--results DIR] [--run-id ID ...] [--format table|csv|json] [QUERY | --file F | -]
        run a read-only query over the views (runs, processes, attempts, records,
        timings, policies, profiles, epochs, peaks, artifacts, ...); QUERY "-" or no
        QUERY reads standard input; --run-id (repeatable) restricts every view to those runs
    views [--results DIR] [--sql]
        list the views and their columns; --sql prints the CREATE VIEW statements,
        for the plain duckdb CLI: `duckdb -init views.sql`
    report [--results DIR] [--strict] ...
        write the Markdown report and figures (see `report --help`); --strict
        refuses (exit 1) a run with a stability flag
    status [--results DIR] [--run-id ID]
        per process: latest recorded status and attempt, Slurm job id and state
    check [--results DIR] [--run-id ID] [--max-cv X] ...
        the stability flags of timing runs: unstable methods (step-time CV, wall/CPU)
        and loaded processes; exit 0 when clean, 1 when any flag
    compare RUN_A RUN_B [--results DIR] [--metric M]
        per method, the ratio of run B to run A with a bootstrap interval (compare --help)

``DIR`` defaults to ``$STATEAWARE_RESULTS`` or ``results`` — the launcher's default
``out``; it must be a directory holding at least one record table folder. A part file
that is damaged or of another schema is left out of every view with one warning line
naming it (``report`` refuses instead: verification fails naming it). Invalid input ends
in one error line and exit status 2. This command never imports torch or jax.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stateaware.analysis.arguments import one_line, results_dir

from stateaware.exits import INVALID, OneLineParser, fail, run_main

__all__ = ["main"]


def _results_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        metavar="DIR",
        help="results directory (default: $STATEAWARE_RESULTS or ./results)",
    )


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


def _sql(args: argparse.Namespace) -> int:
    import duckdb
    from stateaware.analysis.sql import ReadOnlyError, format_result, query

    results = results_dir(args.results)
    text = _query_text(args)
    try:
        answers = query(results, text, args.run_id, warn=lambda line: print(line, file=sys.stderr))
    except ReadOnlyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return INVALID
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
    print("\n\n".join(format_result(names, rows, args.format) for names, rows in answers))
    return 0


def _views(args: argparse.Namespace) -> int:
    from stateaware.analysis.views import PARTS_PREFIX, connect, damaged_parts, snapshot, views_sql

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
    if argv[:1] == ["check"]:  # its own parser: see stateaware.analysis.stability
        from stateaware.analysis.stability import main as check_main

        return check_main(argv[1:])
    if argv[:1] == ["status"]:  # its own parser: see stateaware.analysis.status
        from stateaware.analysis.status import main as status_main

        return status_main(argv[1:])
    if argv[:1] == ["compare"]:  # its own parser: see stateaware.analysis.compare
        from stateaware.analysis.compare import main as compare_main

        return compare_main(argv[1:])
    parser = OneLineParser(
        prog="python -m stateaware.analysis",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sql = commands.add_parser("sql", help="run a read-only SQL query over the results")
    _results_arg(sql)
    sql.add_argument(
        "--run-id",
        action="append",
        default=None,
        metavar="ID",
        help="restrict every view to this run (repeatable; default: every run)",
    )
    sql.add_argument(
        "--format", choices=("table", "csv", "json"), default="table", help="output format (default: table)"
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
    commands.add_parser("compare", help="run B against run A, per method, with intervals (compare --help)")

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    run_main(main)
