"""Two report sections printed alone, as the GPU bench scripts run them.

    python -m stateaware.analysis.timing --results DIR [--cohort confirm44] [--draws N]
    python -m stateaware.analysis.application --results DIR [--figure PATH]

The sections themselves are ``stateaware.analysis.timing`` and
``stateaware.analysis.application``; their ``python -m`` paths forward here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stateaware.commands.arguments import DRAWS, default_results, number, results_argument

__all__ = ["timing", "application"]


def timing(argv: list[str] | None = None) -> int:
    """The timing tables of every timing cohort, or one cohort's summary with its comparisons."""
    parser = argparse.ArgumentParser(
        prog="python -m stateaware.analysis.timing",
        description="The timing report: paper Tables 4, 6, 7, 8 and 10 from the timings and policies views.",
    )
    results_argument(parser)
    parser.add_argument(
        "--cohort", default=None, help="one cohort: print its summary with its prespecified comparisons"
    )
    parser.add_argument(
        "--draws", type=number(DRAWS), default=None, help="bootstrap draws for the comparisons (default: the analysis')"
    )
    args = parser.parse_args(argv)
    # lazy: duckdb, pyarrow and numpy only when a section is rendered: --help loads none
    from stateaware.analysis.sections.timing import render, summary

    results = args.results or default_results()
    if args.cohort:
        print(summary(results, args.cohort, args.draws))
    else:
        from stateaware.analysis.store.views import connect  # lazy: duckdb, as above

        print(render(connect(results)))
    return 0


def application(argv: list[str] | None = None) -> int:
    """The CIFAR-100 application tables, and Figure 3C where ``--figure`` names a file."""
    parser = argparse.ArgumentParser(
        prog="python -m stateaware.analysis.application",
        description="The CIFAR-100 dense-queue application report: Table 9 and Figure 3C data (paper section 12).",
    )
    results_argument(parser)
    parser.add_argument("--figure", type=Path, default=None, help="also write Figure 3C as a PNG here")
    args = parser.parse_args(argv)
    # lazy: duckdb, pyarrow and numpy only when a section is rendered: --help loads none
    from stateaware.analysis.sections.cifar_application import figure3c, render
    from stateaware.analysis.store.views import connect

    con = connect(args.results or default_results())
    print(render(con))
    if args.figure:
        print(figure3c(con, args.figure))
    return 0
