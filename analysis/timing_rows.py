"""The timing cohorts' per-method and per-cell rows, from ``analysis/sql/timing_*.sql``.

One home for the rows both the timing tables (:mod:`stateaware.analysis.timing`) and
Figures 1 and 3 (:mod:`stateaware.analysis.timing_figures`) are drawn from, so neither
imports the other for them. Needs only DuckDB.
"""

from __future__ import annotations

from typing import Any

from stateaware.analysis.sql_files import rows_of

from stateaware.cost_runtime import METHODS

__all__ = ["method_rows", "region_rows"]


def method_rows(con: Any) -> list[dict[str, Any]]:
    """``timing_methods.sql``: one dict per (cohort, cell, method)."""
    return rows_of(con, "timing_methods", methods=list(METHODS))


def region_rows(con: Any) -> list[dict[str, Any]]:
    """``timing_regions.sql``: one dict per (cohort, cell) with regions/whole and regions/eager ratios."""
    return rows_of(con, "timing_regions")
