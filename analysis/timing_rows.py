"""The timing cohorts' per-method and per-cell rows, from ``analysis/sql/timing_*.sql``.

One home for the rows both the timing tables (:mod:`stateaware.analysis.timing`) and
Figures 1 and 3 (:mod:`stateaware.analysis.timing_figures`) are drawn from, so neither
imports the other for them. Needs only DuckDB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["method_rows", "region_rows"]

_SQL = Path(__file__).with_name("sql")


def _rows(con: Any, name: str) -> list[dict[str, Any]]:
    relation = con.execute((_SQL / f"{name}.sql").read_text())
    names = [d[0] for d in relation.description]
    return [dict(zip(names, row)) for row in relation.fetchall()]


def method_rows(con: Any) -> list[dict[str, Any]]:
    """``timing_methods.sql``: one dict per (cohort, cell, method)."""
    return _rows(con, "timing_methods")


def region_rows(con: Any) -> list[dict[str, Any]]:
    """``timing_regions.sql``: one dict per (cohort, cell) with regions/whole and regions/eager ratios."""
    return _rows(con, "timing_regions")
