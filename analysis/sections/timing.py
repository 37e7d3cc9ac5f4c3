"""The timing report: paper Tables 4, 6, 7, 8 and 10 from the ``timings`` and ``policies`` views.

Every "ours" number comes from ``analysis/sections/sql/timing_methods.sql`` or
``timing_regions.sql`` over the latest run of each timing cohort; the "paper" columns quote
the paper's published H100 figures and are labelled as such. Peaks are measured bytes
(``peak_source`` says which instrument); predictions are the static model's, printed
beside them, never in their place. Sizes print in MiB below 4 GiB (the CPU profile) and in
GiB above. Every time is on the cohort's declared clock and names it, the other clock beside
it (``cohort_clocks``); predicted times are the card's
wall time, labelled so and printed next to the measured wall time. The comparisons table
quotes the paper's ratio (``PAPER_RATIOS``) beside ours where the paper reports one.
This module needs only DuckDB (and OmegaConf to read a cohort's comparisons).

    python -m stateaware.analysis.timing --results DIR [--cohort confirm44]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from stateaware.analysis.sections.paper import (  # re-exported: the paper's tables, as the report quotes them
    PAPER_RATIOS,
    PAPER_T4,
    PAPER_T6,
    PAPER_T7,
    PAPER_T8,
    PAPER_T10,
    PaperRatio,
)
from stateaware.analysis.sections.timing_figures import captioned
from stateaware.analysis.sections.timing_rows import (  # re-exported: the tables' rows
    cohort_clocks,
    mean_ms,
    method_rows,
    other_clock,
    region_rows,
)
from stateaware.analysis.stats.comparisons import comparisons_of, compute_comparisons, declared_clock_of
from stateaware.analysis.stats.estimators import interval_cells
from stateaware.analysis.stats.stability import caveat, flags
from stateaware.analysis.store.views import connect

from stateaware.clocks import TIME_METRICS

__all__ = [
    "TITLE",
    "PAPER_T4",
    "PAPER_T6",
    "PAPER_T7",
    "PAPER_T8",
    "PAPER_T10",
    "PAPER_RATIOS",
    "PaperRatio",
    "paper_ratio",
    "method_rows",
    "region_rows",
    "render",
    "figures",
    "summary",
]

#: The report section's heading (a kind names this module in REPORT: stateaware.kinds.Kind).
TITLE = "Cost runtime and timing cohorts (§8–§11; Tables 4, 6, 7, 8, 10; Figures 1 and 3)"


def paper_ratio(comparison: dict[str, Any]) -> PaperRatio | None:
    """The paper's value for a comparisons row (cohort, numerator, denominator, metric, subset), or None."""
    metric = comparison.get("metric")
    quantity = "time" if metric in TIME_METRICS else "peak" if metric == "peak_allocated_bytes" else None
    subset = comparison.get("subset")
    where = json.loads(subset) if subset else {}
    if quantity is None or set(where) - {"workload"}:
        return None  # the paper reports no ratio restricted by anything else
    key = (
        str(comparison.get("cohort")),
        str(comparison.get("numerator")),
        str(comparison.get("denominator")),
        quantity,
        where.get("workload"),
    )
    return PAPER_RATIOS.get(key)


def _unit(rows: list[dict[str, Any]]) -> tuple[str, float]:
    largest = max((r.get("max_peak_bytes") or r.get("predicted_peak_bytes") or 0 for r in rows), default=0)
    return ("GiB", float(1 << 30)) if largest > 4 * (1 << 30) else ("MiB", float(1 << 20))


def _b(value: int | None, scale: float) -> str:
    return "—" if value is None else f"{value / scale:.3f}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _r(value: float | None) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _policy(policy: str | None) -> str:
    if not policy:
        return "—"
    counts = {o: policy.split(",").count(o) for o in ("eager", "whole", "region")}
    return " ".join(f"{n}{o[0].upper()}" for o, n in counts.items() if n)


def _peak(row: dict[str, Any], scale: float) -> str:
    lo, hi = row["min_peak_bytes"], row["max_peak_bytes"]
    if lo is None:
        return "not run" if not row["feasible"] else "—"
    return _b(lo, scale) if lo == hi else f"{_b(lo, scale)}–{_b(hi, scale)}"


def _method_table(cohort: str, rows: list[dict[str, Any]], clock: str) -> list[str]:
    """Table 4/6/7 rows of ``cohort``: measured step times on ``clock`` first, the other beside.

    The plan's predicted time comes from a card the profiler timed with ``perf_counter``
    (wall time), so it is labelled ``(wall)`` and sits next to the measured wall time,
    whichever clock the cohort declared: a prediction is only checked against its own clock.
    """
    unit, scale = _unit(rows)
    other = other_clock(clock)
    # Declared clock first; the wall column always next to the (wall) prediction.
    order = [clock, other] if clock == "cpu" else [clock]
    after = [] if clock == "cpu" else [other]
    times = " | ".join(f"ours step ms ({c})" for c in order) + " | predicted ms (wall) | "
    times += "".join(f"ours step ms ({c}) | " for c in after)
    out = []
    for cell in dict.fromkeys(r["cell"] for r in rows):
        cell_rows = [r for r in rows if r["cell"] == cell]
        budget = cell_rows[0]["budget_bytes"]
        out += [
            f"#### {cohort} / {cell} — budget {_b(budget, scale)} {unit}",
            "",
            f"| method | policy | plan feasible | {times}ours peak {unit} (measured) | predicted {unit} | "
            f"measured fits/processes | peak source | paper ms (wall, H100) | paper peak GiB | paper fits |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in cell_rows:
            paper = _paper_method(cohort, cell, r["method"])
            measured = " | ".join(_ms(mean_ms(r, c)) for c in order) + f" | {_ms(r['predicted_ms'])} | "
            measured += "".join(f"{_ms(mean_ms(r, c))} | " for c in after)
            out.append(
                f"| {r['method']} | {_policy(r['policy'])} | {'yes' if r['feasible'] else 'no (not run)'} | "
                f"{measured}{_peak(r, scale)} | {_b(r['predicted_peak_bytes'], scale)} | "
                f"{r['fits']}/{r['processes']} | {r['peak_source'] or '—'} | "
                f"{paper[0]} | {paper[1]} | {paper[2]} |"
            )
        out.append("")
    out += [
        f"Step times are means over processes of each process's mean measured step on the {clock} clock "
        f"(the cohort's declared clock), with the {other} clock beside them; predicted ms are the card's "
        "wall time (its profiler times with `perf_counter`), beside the measured wall time. *Plan feasible*: "
        "the planner's predicted peak fits the budget (an infeasible plan is not run); *measured fits*: the "
        "processes whose measured peak stayed within it.",
        "",
    ]
    return out


def _paper_method(cohort: str, cell: str, method: str) -> tuple[str, str, str]:
    if cohort in PAPER_T7:
        got = PAPER_T7[cohort].get(method)
        return ("infeasible", "—", "—") if got is None else (f"{got[0]:.2f}", f"{got[1]:.3f}", f"{got[2]}/50")
    if cohort == "fair44" and method in PAPER_T6:
        peak, ms, fits = PAPER_T6[method]
        return f"{ms:.2f}", f"{peak:.3f}", fits
    if cohort == "pressure" and cell in PAPER_T4 and method in PAPER_T4[cell]:
        text = PAPER_T4[cell][method]
        if " / " in text:
            peak, ms = text.split(" / ")
            return ms, peak, "—"
        return text, "—", "—"
    return "—", "—", "—"


def _calibration_key(cell: str) -> tuple[str, int, float, int] | None:
    try:
        workload, mib, fraction, live = cell.split("-")
        return workload, int(mib.removesuffix("MiB")), float(fraction.removeprefix("f")), int(live.removeprefix("l"))
    except ValueError:
        return None


def _time_ratio(row: dict[str, Any], name: str, clock: str) -> float | None:
    """``timing_regions.sql``'s ratio ``name`` (``time_per_whole``, ...) on ``clock``."""
    return row.get(name) if clock == "wall" else row.get(f"cpu_{name}")


def _direction(ratio: float | None) -> int | None:
    """-1, 0 or 1: a region/whole ratio below, at or above 1 as the paper prints it (three
    decimals), so a dense cell's equal peaks (1.000) read as equal, not as a hair larger."""
    if ratio is None or not math.isfinite(ratio):
        return None
    rounded = round(ratio, 3)
    return (rounded > 1) - (rounded < 1)


#: Words for a region/whole direction: (quantity, below 1, equal, above 1).
_DIRECTION_WORDS = {"time": ("faster", "equal", "slower"), "peak": ("smaller", "equal", "larger")}


def _direction_cell(ours: dict[str, float | None], paper: dict[str, float]) -> tuple[str, bool]:
    """The Table 10 row's *direction vs paper* cell and whether it differs: for step time
    (region faster or slower than whole) and peak (region smaller or larger), ours beside
    the paper's wherever the two point different ways."""
    differs = []
    for quantity, words in _DIRECTION_WORDS.items():
        mine, theirs = _direction(ours[quantity]), _direction(paper[quantity])
        if mine is None or theirs is None:
            continue
        if mine != theirs:
            differs.append(f"{quantity}: ours {words[mine + 1]}, paper {words[theirs + 1]}")
    if differs:
        return "**differs** (" + "; ".join(differs) + ")", True
    return "same", False


def _regions_table(cohort: str, rows: list[dict[str, Any]], clock: str) -> list[str]:
    out = [
        f"#### {cohort}: regions relative to whole snapshots and eager (geometric means over processes; "
        f"times on the {clock} clock)",
        "",
        "| workload | paper buffer MiB (ours bytes) | write % | live | processes | peak/whole | "
        f"time/whole ({clock}) | peak/eager | time/eager ({clock}) | paper peak/whole | "
        "paper time/whole (wall, H100) | paper peak/eager | paper time/eager (wall, H100) | "
        "direction vs paper (region/whole) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    compared = differing = 0
    for r in rows:
        key = _calibration_key(r["cell"])
        paper = PAPER_T10.get(key) if key else None
        mib = key[1] if key else "—"
        time_per_whole = _time_ratio(r, "time_per_whole", clock)
        direction = "—"
        if paper:
            direction, differs = _direction_cell(
                {"time": time_per_whole, "peak": r["peak_per_whole"]}, {"time": paper[1], "peak": paper[0]}
            )
            compared += 1
            differing += differs
        out.append(
            f"| {r['workload']} | {mib} ({r['buffer_bytes']:,}) | {r['write_fraction'] * 100:g} | "
            f"{r['live_segments']} | {r['processes']} | {_r(r['peak_per_whole'])} | "
            f"{_r(time_per_whole)} | "
            f"{_r(r['peak_per_eager'])} | {_r(_time_ratio(r, 'time_per_eager', clock))} | "
            + " | ".join(f"{v:.3f}" if paper else "—" for v in (paper or (0, 0, 0, 0)))
            + f" | {direction} |"
        )
    out.append("")
    if compared:
        out += [
            f"Direction vs paper: {differing} of {compared} rows point another way than the paper's Table 10 "
            "(marked **differs**): region faster or slower than whole (time/whole below or above 1), region "
            "smaller, equal or larger in peak (peak/whole below, at or above 1), each read at the paper's three "
            "printed decimals.",
            "",
        ]
    return out


def _three_workload_table(
    cohort: str, rows: list[dict[str, Any]], comparisons: list[dict[str, Any]], clock: str
) -> list[str]:
    out = [
        f"#### {cohort}: regions/whole (Table 8; geometric mean of process ratios; times on the {clock} clock)",
        "",
        f"| workload | processes | ours time ({clock}) | ours peak | ours intervals (comparisons) | "
        "paper time (wall, H100) | paper peak |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mine = [c for c in comparisons if r["workload"] in (c.get("subset") or "")]
        intervals = "; ".join(
            f"{_metric_name(c)} {c['estimate']:.4f} [{c['lower']:.4f},{c['upper']:.4f}]" for c in mine
        )
        paper = PAPER_T8.get(r["workload"], ("—", "—"))
        out.append(
            f"| {r['workload']} | {r['processes']} | {_r(_time_ratio(r, 'time_per_whole', clock))} | "
            f"{_r(r['peak_per_whole'])} | "
            f"{intervals or '—'} | {paper[0]} | {paper[1]} |"
        )
    out.append("")
    return out


def _provenance(con: Any, cohort: str) -> list[str]:
    """The profile, its scales, step counts, any reduction, the card source, from the records."""
    rows = con.execute(
        "SELECT DISTINCT hardware, scale, detail, process_index FROM records "
        "WHERE cohort = ? AND check_name = 'semantic' AND ((SELECT count(*) FROM runs) = 0 OR run_id IN "
        "(SELECT arg_max(run_id, started_at) FROM runs WHERE cohort = ?))",
        [cohort, cohort],
    ).fetchall()
    if not rows:
        return []
    details = [json.loads(r[2] or "{}") for r in rows]

    def values(key: str) -> str:
        found = sorted({json.dumps(d.get(key), sort_keys=True) for d in details})
        return " / ".join(v.strip('"') for v in found)

    text = (
        f"Profile `{rows[0][0]}` (declared scale {rows[0][1]:g}; cost-runtime byte scale {values('byte_scale')}), "
        f"{len({r[3] for r in rows})} process(es), {values('warmup')} warm-up + {values('steps')} measured steps "
        f"per method, card {values('card_source')}, semantic checks at batch {values('semantic_batch')}."
    )
    if any(d.get("reduced_from") for d in details):
        text += f" **Reduced on this profile** from {values('reduced_from')}."
    return [text]


def _metric_name(row: dict[str, Any]) -> str:
    """A comparison's metric as the table shows it: a step time names its clock (``step_ms (cpu)``)."""
    return f"{row['metric']} ({row['clock']})" if row.get("clock") else str(row["metric"])


def _paper_cell(row: dict[str, Any]) -> str:
    paper = paper_ratio(row)
    return "—" if paper is None else paper.text()


def _clock(row: dict[str, Any]) -> str:
    """The clock a comparison used: ``wall``/``cpu`` for step times, ``—`` for other metrics."""
    return row.get("clock") or "—"


def _other_clock(row: dict[str, Any]) -> str:
    if row.get("other_estimate") is None:
        return "—"
    interval, _ = interval_cells(row["other_lower"], row["other_upper"], row["confidence"])
    return f"{row['other_clock']}: {row['other_estimate']:.4f} {interval}"


def _comparison_rows(con: Any) -> list[dict[str, Any]]:
    # The view exists on every connection (empty until a report wrote it: records/columns.py RESULT_COLUMNS).
    relation = con.execute("SELECT * FROM comparisons")
    names = [d[0] for d in relation.description]
    return [dict(zip(names, row, strict=True)) for row in relation.fetchall()]


def render(con: Any, cohorts: list[str] | None = None, comparisons: list[dict[str, Any]] | None = None) -> str:
    """Markdown: every timing cohort present (or those named), ours beside the paper's.

    ``comparisons`` (rows of ``stateaware.analysis.stats.estimators`` results plus ``cohort``) default
    to the ``comparisons`` view that ``analysis report`` persists.
    """
    methods = method_rows(con)
    regions = region_rows(con)
    comparisons = _comparison_rows(con) if comparisons is None else comparisons
    present = list(dict.fromkeys(r["cohort"] for r in methods))
    clocks = cohort_clocks(con)
    lines = ["## Cost runtime and timing cohorts (paper §8–§11; Tables 4, 6, 7, 8, 10)", ""]
    cautions = _cautions(con)
    for cohort in cohorts or present:
        rows = [r for r in methods if r["cohort"] == cohort]
        if not rows:
            lines += [f"### {cohort}", "", "no rows", ""]
            continue
        clock = clocks.get(cohort, "wall")
        lines += [f"### {cohort}", "", *_provenance(con, cohort), ""]
        # The layout follows the cells the run measured, not the cohort's name: one cell per
        # workload is Table 8's grid, cells named for a calibration shape are Table 10's.
        cohort_regions = [r for r in regions if r["cohort"] == cohort]
        if cohort_regions and all(r["cell"] == r["workload"] for r in cohort_regions):
            lines += _three_workload_table(
                cohort, cohort_regions, [c for c in comparisons if c.get("cohort") == cohort], clock
            )
        elif cohort_regions and all(_calibration_key(r["cell"]) for r in cohort_regions):
            lines += _regions_table(cohort, cohort_regions, clock)
        lines += _method_table(cohort, rows, clock)
        mine = [c for c in comparisons if c.get("cohort") == cohort]
        if mine:
            lines += [
                "| comparison | clock | ours estimate | ours interval | paper estimate [interval] (H100, wall) | "
                "confidence | processes | other clock: estimate [interval] |",
                "|---|---|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {c['comparison']} | {_clock(c)} | {c['estimate']:.4f} | {interval} | "
                f"{_paper_cell(c)} | {confidence} | {c['processes']} | {_other_clock(c)} |"
                for c in mine
                for interval, confidence in [interval_cells(c["lower"], c["upper"], c["confidence"])]
            ]
            lines += [
                "",
                "Step-time ratios use the clock named in the *clock* column (`wall`: synchronized wall "
                "time, `cpu`: the timed thread's CPU time; the cohort's `comparisons_clock`); the last "
                "column gives the same ratio on the other clock. The *paper* column quotes the paper's "
                "printed ratio (its H100 runs, synchronized wall time; an interval where it prints one), "
                "for the comparisons the paper reports.",
                "",
            ]
        if cohort in cautions:  # beside the numbers the flags put in doubt, not only in the stability section
            run_id, text = cautions[cohort]
            lines += [f"**Stability** (`{run_id}`): {text}; every flag in the stability section.", ""]
    return "\n".join(lines) + "\n"


def _cautions(con: Any) -> dict[str, tuple[str, str]]:
    """``cohort -> (run id, its stability caveat)`` for each flagged run of ``con``: printed
    beside the cohort's tables and comparisons, which the flags put in doubt."""
    found = flags(con)
    out = {}
    for run_id, cohort, processes in con.execute(
        "SELECT run_id, cohort, any_value(processes) FROM runs GROUP BY ALL"
    ).fetchall():
        text = caveat(found, run_id, int(processes or 0))
        if text:
            out[cohort] = (run_id, text)
    return out


def figures(con: Any, out: Path) -> list[tuple[Path, str]]:
    """Figures 1 and 3 of every budgeted cohort cell, each with its caption
    (``stateaware.analysis.sections.timing_figures.captioned``)."""
    return captioned(con, out)


def summary(results: Path | str, cohort: str, draws: int | None = None) -> str:
    """Per method of ``cohort``'s latest run: mean step time, measured and predicted peak and
    fits, then the prespecified comparisons the run recorded in its config (``runs.config_yaml``,
    as the report reads them; today's YAML may have changed) with their intervals (computed now)."""
    con = connect(results, cohorts=[cohort])  # this cohort's partitions only: a big store costs nothing more
    run = con.execute(
        "SELECT arg_max(run_id, started_at), arg_max(config_yaml, started_at) FROM runs WHERE cohort = ?", [cohort]
    ).fetchone()
    specs = comparisons_of(run[1]) if run and run[0] else []
    computed = None
    note = ""
    if specs:
        kwargs = {"draws": draws} if draws else {}
        try:
            _, results_ = compute_comparisons(
                con, run[0], specs, allow_partial=True, clock=declared_clock_of(run[1]), **kwargs
            )
        except ValueError as exc:  # e.g. one process: nothing to pair; say so, as the report does
            note = f"\n\nPrespecified comparisons not computed: {exc}"
        else:
            computed = [{**r.row(), "cohort": cohort} for r in results_]
    return render(con, [cohort], computed) + note


if __name__ == "__main__":  # the tool lives with the other command lines
    from stateaware.commands.sections import timing

    sys.exit(timing())
