"""Figures 1 and 3 of the paper, drawn from the timing cohorts' records.

For each budgeted cohort present (``fair44``, ``confirm44``, ``confirm32``, and any cell of
``pressure``), the per-method summary comes from the same SQL as the timing tables
(``analysis/sql/timing_methods.sql``: mean of per-process mean measured step times,
largest measured peak, the plan's logical budget); methods whose plan was infeasible were
never executed and have no point. Figure 1 (bars, over-budget hatched) and Figure 3 (peak
vs time, budget shaded) are drawn by :mod:`stateaware.analysis.figures`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["summaries", "figures"]

#: Cohorts with one logical budget per cell, for which Figures 1 and 3 mean something.
BUDGETED = ("fair44", "confirm44", "confirm32", "pressure")


def summaries(con: Any) -> dict[tuple[str, str], tuple[list[dict[str, Any]], int]]:
    """``(cohort, cell) -> (per-method rows for the figures, budget bytes)`` of the executed methods."""
    from stateaware.analysis.timing import method_rows

    out: dict[tuple[str, str], tuple[list[dict[str, Any]], int]] = {}
    for row in method_rows(con):
        if row["cohort"] not in BUDGETED or not row.get("processes") or row.get("mean_step_ms") is None:
            continue
        key = (row["cohort"], row["cell"])
        rows, _ = out.get(key, ([], int(row["budget_bytes"])))
        rows.append({"method": row["method"], "mean_ms": float(row["mean_step_ms"]),
                     "peak_bytes": int(row["max_peak_bytes"]), "processes": int(row["processes"])})
        out[key] = (rows, int(row["budget_bytes"]))
    return out


def figures(con: Any, out: Path) -> list[Path]:
    """Draw Figure 1 and Figure 3 for every budgeted cohort cell present; the PNG paths."""
    from stateaware.analysis.figures import figure1, figure3

    paths = []
    for (cohort, cell), (rows, budget) in summaries(con).items():
        processes = max(r["processes"] for r in rows)
        stem = f"{cohort}-{cell}".replace("/", "_")
        where = f"{cohort}, {cell}" if cell and cell != cohort else cohort
        p1, p3 = out / f"figure1-{stem}.png", out / f"figure3-{stem}.png"
        figure1(rows, budget, p1, title=f"Figure 1 ({where}): mean step time per method, "
                                         f"{processes} process{'es' if processes != 1 else ''}")
        figure3(rows, budget, p3, title=f"Figure 3 ({where}): peak allocated vs mean step time")
        paths += [p1, p3]
    return paths
