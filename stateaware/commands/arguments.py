"""What the command lines share: where the results are, errors as one line, and flags
whose default or choices a domain module holds, read only when needed.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stateaware import __version__
from stateaware.exits import fail, int_at_least
from stateaware.launch.params import Param
from stateaware.records.columns import TABLE_COLUMNS

__all__ = [
    "DRAWS",
    "number",
    "default_results",
    "results_dir",
    "results_argument",
    "one_line",
    "positive_int",
    "Late",
    "resolved",
    "version_text",
    "version_argument",
]


def default_results() -> Path:
    """The launcher's default ``out``: ``$STATEAWARE_RESULTS`` or ``results``."""
    return Path(os.environ.get("STATEAWARE_RESULTS", "results"))


def results_dir(results: Path | None) -> Path:
    """``results`` (default ``default_results()``) if it is a results directory; else exit 2 naming it.

    A results directory is a directory with at least one record table folder (``runs``,
    ``processes``, ...): a missing path, a plain file or an empty directory is refused
    rather than answered with empty views.
    """
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


def version_text() -> str:
    """``stateaware VERSION``: what ``--version`` prints first on every command line."""
    return f"stateaware {__version__}"


def version_argument(parser: argparse.ArgumentParser) -> None:
    """``--version``: print ``version_text()`` and exit 0."""
    parser.add_argument("--version", action="version", version=version_text(), help="print the version and exit")


#: An ``argparse`` type: an integer >= 1 (``--draws``, ``--max-rows``).
positive_int = int_at_least(1)


#: Bootstrap draws (``--draws``): enough for any interval, few enough to fit in memory.
DRAWS = Param(int, minimum=1, maximum=10_000_000)


def number(param: Param) -> Callable[[str], int | float]:
    """An ``argparse`` type checking a numeric option as the run spec checks a numeric field:
    by ``param`` (an ``int`` integral, a ``float`` finite, its range), so ``nan``, ``inf``,
    ``1e308`` or ``-1`` end in one line naming the option and the allowed values."""

    def parse(text: str) -> int | float:
        value: int | float | None
        try:
            value = int(text) if param.type is int else float(text)
        except ValueError:
            value = None
        if value is None or not param.accepts(value):
            raise argparse.ArgumentTypeError(f"allowed values are {param.allowed()}, got {text!r}")
        return value

    return parse


def run_id_argument(parser: argparse.ArgumentParser, what: str, default: str = "every run") -> None:
    """``--run-id RUN_ID``, repeatable; the help says ``what`` naming a run does and ``default``."""
    parser.add_argument(
        "--run-id",
        action="append",
        default=None,
        metavar="RUN_ID",
        help=f"{what} (repeatable; default: {default}); a run not in the results exits 2",
    )


def cohort_argument(parser: argparse.ArgumentParser, what: str, default: str = "every cohort") -> None:
    """``--cohort COHORT``, repeatable; the help says ``what`` naming a cohort does and ``default``."""
    parser.add_argument(
        "--cohort",
        action="append",
        default=None,
        metavar="COHORT",
        help=f"{what} (repeatable; default: {default}); a cohort not in the results exits 2",
    )


def results_argument(parser: argparse.ArgumentParser) -> None:
    """``--results DIR``, as every analysis command takes it (read with ``results_dir``)."""
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        metavar="DIR",
        help="results directory (default: $STATEAWARE_RESULTS or ./results)",
    )


class Late:
    """A constant of a domain module, read when first needed: a flag's default or choices that
    would otherwise import the module (numpy, DuckDB) just to build the parser.

    As a default it is shown by ``--help`` (``str``) and replaced by its value in the parsed
    arguments (``resolved``); as choices it is iterated by ``--help`` and by argparse's error
    message, and tested with ``in`` for a given value. The module is imported at most once.
    """

    def __init__(self, module: str, name: str, show: str = "{}") -> None:
        self.module, self.name, self.show = module, name, show

    @property
    def value(self) -> Any:
        return getattr(importlib.import_module(self.module), self.name)

    def __str__(self) -> str:
        return self.show.format(self.value)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.value)

    def __contains__(self, item: object) -> bool:
        return item in self.value


def resolved(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with every ``Late`` default (a flag not given) replaced by its value."""
    return argparse.Namespace(**{k: v.value if isinstance(v, Late) else v for k, v in vars(args).items()})
