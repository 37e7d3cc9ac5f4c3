"""Figures 1 and 3 of the paper, drawn from the timing cohorts' records.

For each cohort with one logical budget per cell — the recorded config places its budget
against the paper's anchors (``cohort.params.placement: relative``: fair44, confirm44,
confirm32 and every cell of pressure; calibration and three_workload scale a selection
budget instead) — the per-method summary comes from the same SQL as the timing tables
(``analysis/sections/sql/timing_methods.sql``: mean of per-process mean measured step times on the
cohort's declared clock, ``cohort_clocks``, the same
clock as its comparisons; largest measured peak; the plan's logical budget); every axis and
caption names that clock. Figure 1 carries the headline of the report's own estimator: the
cohort's prespecified step-time comparison of joint (against the eager/whole control where
it ran), its geometric mean of paired process ratios and interval as in the comparisons
table, the interval drawn as a whisker across joint's bar (the ratio's bounds times the
denominator's mean). Methods whose plan was infeasible were
never executed and have no point. Records written without a ``runs`` row (no recorded
config) are drawn too. Figure 1 (bars, over-budget hatched) and Figure 3 (peak vs time,
budget shaded) are drawn by ``stateaware.analysis.figures``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stateaware.analysis.figures import CONTROL, JOINT, figure1, figure3
from stateaware.analysis.sections.timing_rows import cohort_clocks, mean_ms, method_rows
from stateaware.analysis.store.run_config import cohort_config

from stateaware.clocks import TIME_METRICS

__all__ = ["PLACED", "budgeted", "summaries", "estimate_for", "headline", "captioned", "figures"]

#: The budget placement whose budget is a logical limit per cell, for which Figures 1 and 3
#: mean something (``scaled`` placement selects plans; no figure compares peaks with it).
PLACED = "relative"


def budgeted(con: Any) -> dict[str, bool]:
    """``cohort -> whether its latest recorded run places a logical budget`` (cohorts with a runs row)."""
    rows = con.execute("SELECT cohort, arg_max(config_yaml, started_at) FROM runs GROUP BY cohort").fetchall()
    return {cohort: (cohort_config(text).get("params") or {}).get("placement") == PLACED for cohort, text in rows}


def summaries(con: Any) -> dict[tuple[str, str], tuple[list[dict[str, Any]], int]]:
    """``(cohort, cell) -> (per-method rows for the figures, budget bytes)`` of the executed methods.

    Each row's ``mean_ms`` is on its cohort's declared clock, named in the row's ``clock``.
    """
    placed = budgeted(con)
    clocks = cohort_clocks(con)
    out: dict[tuple[str, str], tuple[list[dict[str, Any]], int]] = {}
    for row in method_rows(con):
        clock = clocks.get(row["cohort"], "wall")
        ms = mean_ms(row, clock)
        if not placed.get(row["cohort"], True) or not row.get("processes") or ms is None:
            continue
        key = (row["cohort"], row["cell"])
        rows, _ = out.get(key, ([], int(row["budget_bytes"])))
        rows.append(
            {
                "method": row["method"],
                "mean_ms": ms,
                "clock": clock,
                "peak_bytes": int(row["max_peak_bytes"]),
                "processes": int(row["processes"]),
            }
        )
        out[key] = (rows, int(row["budget_bytes"]))
    return out


def _subset_cell(subset: str | None) -> str | None:
    """The cell a comparison's ``subset`` (its ``where`` as JSON) restricts it to; None: every cell."""
    return None if not subset else json.loads(subset).get("cell")


def estimate_for(rows: list[dict[str, Any]], comparisons: list[dict[str, Any]], cell: str) -> dict[str, Any] | None:
    """The prespecified step-time comparison of ``joint`` the figure's headline quotes: its
    numerator ``joint``, its denominator a method drawn in ``rows`` (the eager/whole control
    first, where it ran), restricted to ``cell`` or to none; None when the cohort declared none."""
    drawn = {r["method"] for r in rows}
    fitting = [
        c
        for c in comparisons
        if c["numerator"] == JOINT
        and c["denominator"] in drawn
        and c["metric"] in TIME_METRICS
        and _subset_cell(c.get("subset")) in (None, cell)
    ]
    return min(fitting, key=lambda c: (c["denominator"] != CONTROL, c["comparison"]), default=None)


def headline(comparison: dict[str, Any] | None) -> str | None:
    """``joint is 18.5 % faster than eager/whole (...)`` from the report's own estimator — the
    comparison's geometric mean of paired process ratios, with its interval — or None without one.
    An interval that holds 1 gives no direction: ``joint/regions 0.6702: no difference resolved (...)``.

    The same number as the comparisons table beside the figure: a ratio of the bars' means
    would be a second estimator, and could disagree with the table in its first digit.
    """
    if comparison is None:
        return None
    estimate, lower, upper = comparison["estimate"], comparison["lower"], comparison["upper"]
    other, clock = comparison["denominator"].replace("_", "/"), comparison.get("clock") or "wall"
    # No brackets: the headline is also the image's alt text in report.md, where "]" ends it.
    interval = (
        "exact (every process the same)"
        if lower == upper
        else f"interval {lower:.4f} to {upper:.4f} at {comparison['confidence']:.2%}"
    )
    how = "faster" if upper < 1 else "slower" if lower > 1 else None
    if how is None:  # the interval holds 1: the figure claims no direction the table does not
        return (
            f"{JOINT}/{other} {estimate:.4f}: no difference resolved ({clock} clock; geometric mean of "
            f"paired process ratios, {interval} includes 1)"
        )
    return (
        f"{JOINT} is {abs(1 - estimate) * 100:.1f} % {how} than {other} ({clock} clock; geometric mean "
        f"of paired process ratios {estimate:.4f}, {interval})"
    )


def captioned(con: Any, out: Path) -> list[tuple[Path, str]]:
    """Draw Figure 1 and Figure 3 for every budgeted cohort cell present; ``(PNG path, caption)``
    pairs, each caption the figure's title (which names the clock of its times)."""
    relation = con.execute("SELECT * FROM comparisons")
    names = [d[0] for d in relation.description]
    comparisons = [dict(zip(names, row, strict=True)) for row in relation.fetchall()]
    drawn = []
    for (cohort, cell), (rows, budget) in summaries(con).items():
        processes = max(r["processes"] for r in rows)
        clock = rows[0]["clock"]
        stem = f"{cohort}-{cell}".replace("/", "_")
        where = f"{cohort}, {cell}" if cell and cell != cohort else cohort
        p1, p3 = out / f"figure1-{stem}.png", out / f"figure3-{stem}.png"
        # Two-line titles: with the clock named, one line would run past the figure's width.
        title1 = (
            f"Figure 1 ({where}), {processes} process{'es' if processes != 1 else ''}:\n"
            f"mean step time per method ({clock} clock)"
        )
        title3 = f"Figure 3 ({where}):\npeak allocated vs mean step time ({clock} clock)"
        chosen = estimate_for(rows, [c for c in comparisons if c.get("cohort") == cohort], cell)
        top = headline(chosen)
        interval = None
        if chosen is not None:  # the ratio's interval on the control's bar's scale, drawn across joint's bar
            control = next(r["mean_ms"] for r in rows if r["method"] == chosen["denominator"])
            interval = (control * chosen["lower"], control * chosen["upper"])
        figure1(
            rows,
            budget,
            p1,
            title=title1,
            xlabel=f"Mean step time, {clock} clock (<unit>)",
            headline=top,
            interval=interval,
        )
        figure3(rows, budget, p3, title=title3, ylabel=f"Mean step time, {clock} clock (<unit>)")
        drawn += [
            (p1, title1.replace("\n", " ") + (f"; {top}" if top else "")),
            (p3, title3.replace("\n", " ")),
        ]
    return drawn


def figures(con: Any, out: Path) -> list[Path]:
    """Draw Figure 1 and Figure 3 for every budgeted cohort cell present; the PNG paths."""
    return [path for path, _ in captioned(con, out)]
