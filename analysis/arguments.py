"""What every ``python -m stateaware.analysis`` subcommand shares: where the results are,
and errors as one line.

Its own module so the subcommands' modules (``report``, ``compare``, ``status``, ...) use
it without importing ``__main__``, which imports them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from stateaware.exits import fail, int_at_least

__all__ = ["default_results", "results_dir", "results_argument", "one_line", "positive_int"]


def default_results() -> Path:
    """The launcher's default ``out``: ``$STATEAWARE_RESULTS`` or ``results``."""
    return Path(os.environ.get("STATEAWARE_RESULTS", "results"))


def results_dir(results: Path | None) -> Path:
    """``results`` (default :func:`default_results`) if it is a results directory; else exit 2 naming it.

    A results directory is a directory with at least one record table folder (``runs``,
    ``processes``, ...): a missing path, a plain file or an empty directory is refused
    rather than answered with empty views.
    """
    from stateaware.records.columns import TABLE_COLUMNS

    path = default_results() if results is None else Path(results)
    tip = "pass --results DIR with the out= of a launched cohort (python -m stateaware cohort=NAME out=DIR)"
    if not path.exists():
        fail(f"error: --results {path}: no such directory; {tip}")
    if not path.is_dir():
        fail(f"error: --results {path}: a file, not a results directory; {tip}")
    if not any((path / table).is_dir() for table in TABLE_COLUMNS):
        fail(f"error: --results {path}: no record tables in it ({', '.join(TABLE_COLUMNS)}); {tip}")
    return path


def one_line(exc: BaseException) -> str:
    """An exception's message as one line (DuckDB adds the query and a caret on later lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


#: An ``argparse`` type: an integer >= 1 (``--draws``, ``--max-rows``).
positive_int = int_at_least(1)


def results_argument(parser: argparse.ArgumentParser) -> None:
    """``--results DIR``, as every analysis command takes it (read with :func:`results_dir`)."""
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        metavar="DIR",
        help="results directory (default: $STATEAWARE_RESULTS or ./results)",
    )
