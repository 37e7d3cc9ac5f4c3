"""Figures 1 and 3 of the paper, drawn from the timing cohorts' records.

For each cohort with one logical budget per cell — the recorded config places its budget
against the paper's anchors (``cohort.params.placement: relative``: fair44, confirm44,
confirm32 and every cell of pressure; calibration and three_workload scale a selection
budget instead) — the per-method summary comes from the same SQL as the timing tables
(``analysis/sql/timing_methods.sql``: mean of per-process mean measured step times,
largest measured peak, the plan's logical budget); methods whose plan was infeasible were
never executed and have no point. Records written without a ``runs`` row (no recorded
config) are drawn too. Figure 1 (bars, over-budget hatched) and Figure 3 (peak vs time,
budget shaded) are drawn by :mod:`stateaware.analysis.figures`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PLACED", "budgeted", "summaries", "figures"]

#: The budget placement whose budget is a logical limit per cell, for which Figures 1 and 3
#: mean something (``scaled`` placement selects plans; no figure compares peaks with it).
PLACED = "relative"


def budgeted(con: Any) -> dict[str, bool]:
    """``cohort -> whether its latest recorded run places a logical budget`` (cohorts with a runs row)."""
    from stateaware.analysis.run_config import cohort_config

    rows = con.execute("SELECT cohort, arg_max(config_yaml, started_at) FROM runs GROUP BY cohort").fetchall()
    return {cohort: (cohort_config(text).get("params") or {}).get("placement") == PLACED for cohort, text in rows}


def summaries(con: Any) -> dict[tuple[str, str], tuple[list[dict[str, Any]], int]]:
    """``(cohort, cell) -> (per-method rows for the figures, budget bytes)`` of the executed methods."""
    from stateaware.analysis.timing_rows import method_rows

    placed = budgeted(con)
    out: dict[tuple[str, str], tuple[list[dict[str, Any]], int]] = {}
    for row in method_rows(con):
        if not placed.get(row["cohort"], True) or not row.get("processes") or row.get("mean_step_ms") is None:
            continue
        key = (row["cohort"], row["cell"])
        rows, _ = out.get(key, ([], int(row["budget_bytes"])))
        rows.append(
            {
                "method": row["method"],
                "mean_ms": float(row["mean_step_ms"]),
                "peak_bytes": int(row["max_peak_bytes"]),
                "processes": int(row["processes"]),
            }
        )
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
        figure1(
            rows,
            budget,
            p1,
            title=f"Figure 1 ({where}): mean step time per method, {processes} process{'es' if processes != 1 else ''}",
        )
        figure3(rows, budget, p3, title=f"Figure 3 ({where}): peak allocated vs mean step time")
        paths += [p1, p3]
    return paths
