"""The timing cohorts' per-method and per-cell rows, from ``analysis/sections/sql/timing_*.sql``.

One home for the rows both the timing tables (``stateaware.analysis.sections.timing``) and
Figures 1 and 3 (``stateaware.analysis.sections.timing_figures``) are drawn from, so neither
imports the other for them — and one home for the clock each cohort's times are shown on
(``cohort_clocks``), so a table and the figure beside it never disagree about it.
Needs only DuckDB (and OmegaConf to read a run's config).
"""

from __future__ import annotations

from typing import Any

from stateaware.analysis.sections.queries import rows_of
from stateaware.analysis.stats.comparisons import declared_clock_of

from stateaware.cost_runtime import METHODS

__all__ = ["MEAN_MS", "method_rows", "region_rows", "cohort_clocks", "mean_ms", "other_clock"]

#: clock -> the ``timing_methods.sql`` column holding the mean step time on that clock.
MEAN_MS = {"wall": "mean_step_ms", "cpu": "mean_cpu_ms"}


def method_rows(con: Any) -> list[dict[str, Any]]:
    """``timing_methods.sql``: one dict per (cohort, cell, method), mean step times on both clocks."""
    return rows_of(con, "timing_methods", methods=list(METHODS))


def region_rows(con: Any) -> list[dict[str, Any]]:
    """``timing_regions.sql``: one dict per (cohort, cell) with regions/whole and regions/eager ratios."""
    return rows_of(con, "timing_regions")


def cohort_clocks(con: Any) -> dict[str, str]:
    """``cohort -> the clock its times are shown on``: the latest recorded run's declared clock.

    The declared clock (``cohort.comparisons_clock``, NOTE [ The declared clock ] in
    ``stateaware/clocks.py``) is the one the prespecified comparisons are computed on, so the
    per-method means and the figures use it too: a table whose means were on one clock and
    whose ratios on another would show numbers that cannot be reconciled. A run whose
    records hold no CPU times (kept before they were recorded) falls back to ``wall``, as
    ``stateaware.analysis.stats.comparisons.compute_comparisons`` does; a cohort without a
    ``runs`` row (no recorded config) is absent, and callers read it as ``wall``.
    """
    rows = con.execute(
        "WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id, "
        "arg_max(config_yaml, started_at) AS config FROM runs GROUP BY cohort) "
        "SELECT l.cohort, l.config, (SELECT count(t.cpu_ms) FROM timings t WHERE t.run_id = l.run_id) "
        "FROM latest l"
    ).fetchall()
    return {cohort: declared_clock_of(config) if cpu_times else "wall" for cohort, config, cpu_times in rows}


def mean_ms(row: dict[str, Any], clock: str) -> float | None:
    """A ``method_rows`` row's mean step time on ``clock`` (``wall`` or ``cpu``)."""
    value = row.get(MEAN_MS[clock])
    return None if value is None else float(value)


def other_clock(clock: str) -> str:
    """The clock shown beside ``clock``."""
    return "cpu" if clock == "wall" else "wall"
