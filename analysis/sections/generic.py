"""The report section of a cohort kind that declares none (``REPORT``, see ``stateaware.kinds.Kind``).

Per run of the connection (the report hands it the runs of one kind):

- a run whose processes wrote ``timings`` rows gets a per-method table — processes,
  measured steps, the median measured step time on the run's declared clock
  (``stateaware.clocks``: the cohort's ``comparisons_clock``) with the other clock beside
  it, and the largest measured peak and its source where the rows have peaks — then the
  cohort's prespecified comparisons (the ``comparisons`` view ``analysis report`` fills
  from the stored config) with their intervals;
- any other run gets one line counting its rows per record table.

Peaks print in MiB, as in every table of the report (the records and SQL keep bytes); a
timed run with stability flags says so beside its numbers; each timed run gets a figure of
the table's median step times (``figures``).

Medians over all measured steps of all processes are descriptive; the intervals come from
the comparisons (a paired process bootstrap). Needs only DuckDB and the recorded config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stateaware.analysis.figures import step_times
from stateaware.analysis.stats.comparisons import declared_clock_of
from stateaware.analysis.stats.estimators import interval_cells
from stateaware.analysis.stats.stability import caveat, flags

from stateaware.clocks import CLOCKS
from stateaware.records.schema import TABLES

__all__ = ["TITLE", "title_for", "render", "figures"]

MIB = 1 << 20

#: The heading when no kind is named (the report titles each kind's section with title_for).
TITLE = "Cohorts without a section of their own"

#: The record tables counted for a run without timings (runs and processes describe every run).
_COUNTED = tuple(t for t in TABLES if t not in ("runs", "processes"))


def title_for(kind: str, cohorts: list[str]) -> str:
    """The heading of ``kind``'s generic section: its cohorts and the kind."""
    return f"{', '.join(cohorts)} (cohort kind `{kind}`)"


def _clock(con: Any, run_id: str) -> str:
    try:
        return declared_clock_of(
            con.execute("SELECT any_value(config_yaml) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
        )
    except ValueError:  # a recorded value this code does not know: say wall, the clock every row has
        return "wall"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _method_rows(con: Any, run_id: str) -> tuple[str, str, list[tuple]]:
    """``(declared clock, other clock, rows)``: per method of ``run_id``, processes, measured
    steps, median step time on each clock, largest peak and its sources — the table's rows,
    and the figure's (so the two never disagree)."""
    clock = _clock(con, run_id)
    other = next(c for c in CLOCKS if c != clock)
    rows = con.execute(
        f"SELECT method, count(DISTINCT process_index), count(*), median({CLOCKS[clock]}), median({CLOCKS[other]}), "
        "max(peak_allocated_bytes), string_agg(DISTINCT peak_source, ', ') FROM timings "
        "WHERE run_id = ? AND NOT coalesce(warmup, false) GROUP BY method ORDER BY method",
        [run_id],
    ).fetchall()
    return clock, other, rows


def _mib(value: int | None) -> str:
    """Bytes as the report prints every peak: MiB (the bytes stay in the records)."""
    return "—" if value is None else f"{value / MIB:.3f}"


def _timing_table(con: Any, run_id: str) -> list[str]:
    clock, other, rows = _method_rows(con, run_id)
    peaks = any(r[5] is not None for r in rows)
    head = f"| method | processes | measured steps | median {clock} ms | median {other} ms |"
    lines = [
        head + (" max peak allocated MiB | peak source |" if peaks else ""),
        "|---|---:|---:|---:|---:|" + ("---:|---|" if peaks else ""),
    ]
    for method, processes, steps, declared, second, peak, source in rows:
        line = f"| {method} | {processes} | {steps} | {_ms(declared)} | {_ms(second)} |"
        if peaks:
            line += f" {_mib(peak)} | {source or '—'} |"
        lines.append(line)
    lines += [
        "",
        f"Step times: medians over every measured step of every process; `{clock}` is the run's declared "
        f"clock (`wall`: synchronized wall time, `cpu`: the timed thread's CPU time).",
    ]
    comparisons = con.execute(
        "SELECT comparison, clock, estimate, lower, upper, confidence, processes, other_clock, other_estimate, "
        "other_lower, other_upper FROM comparisons WHERE run_id = ? ORDER BY comparison",
        [run_id],
    ).fetchall()
    if comparisons:
        lines += [
            "",
            "| comparison | clock | estimate | interval | confidence | processes | excludes 1 | "
            "other clock: estimate [interval] |",
            "|---|---|---:|---|---:|---:|---|---|",
        ]
        for name, c_clock, est, lo, hi, conf, n, o_clock, o_est, o_lo, o_hi in comparisons:
            beside = "—" if o_est is None else f"{o_clock}: {o_est:.4f} {interval_cells(o_lo, o_hi, conf)[0]}"
            interval, confidence = interval_cells(lo, hi, conf)
            lines.append(
                f"| {name} | {c_clock or '—'} | {est:.4f} | {interval} | {confidence} | {n} | "
                f"{'yes' if lo > 1 or hi < 1 else 'no'} | {beside} |"
            )
    return lines


def _counts(con: Any, run_id: str) -> str:
    counts = {t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run_id]).fetchone()[0] for t in _COUNTED}
    found = {t: n for t, n in counts.items() if n}
    if not found:
        return "0 rows in any record table."
    return f"{sum(found.values()):,} rows in tables " + ", ".join(f"`{t}` ({n:,})" for t, n in found.items()) + "."


def _runs(con: Any) -> list[tuple[str, str, int, bool]]:
    """``(run_id, cohort, processes, has timings)`` of every run in ``con``, in report order."""
    runs = con.execute("SELECT run_id, cohort, processes FROM runs ORDER BY cohort, started_at").fetchall()
    return [
        (
            run_id,
            cohort,
            processes,
            bool(con.execute("SELECT count(*) FROM timings WHERE run_id = ?", [run_id]).fetchone()[0]),
        )
        for run_id, cohort, processes in runs
    ]


def render(con: Any) -> str:
    """Markdown for every run in ``con``: its timing table and comparisons, or its row counts;
    a timed run with stability flags says so beside its numbers (``stateaware.analysis.stats.stability.caveat``)."""
    found = flags(con)
    lines: list[str] = []
    for run_id, cohort, processes, timed in _runs(con):
        lines += [f"### {cohort} (`{run_id}`, {processes} process{'es' if processes != 1 else ''})", ""]
        lines += _timing_table(con, run_id) if timed else [_counts(con, run_id)]
        text = caveat(found, run_id, processes) if timed else None
        if text:
            lines += ["", f"**Stability:** {text}; every flag in the stability section."]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def figures(con: Any, out: Path) -> list[tuple[Path, str]]:
    """One figure per timed run: the table's median step time per method on the run's declared
    clock (``figures.step_times``); ``(PNG path, caption)`` pairs, each caption naming the clock."""
    drawn = []
    for run_id, cohort, processes, timed in _runs(con):
        clock, _, rows = _method_rows(con, run_id) if timed else ("", "", [])
        medians = {method: declared for method, _, _, declared, *_ in rows if declared is not None and declared > 0}
        if not medians:
            continue
        caption = (
            f"{cohort} ({run_id}), {processes} process{'es' if processes != 1 else ''}: "
            f"median step time per method ({clock} clock)"
        )
        path = Path(out) / f"steps-{cohort}-{run_id}.png".replace("/", "_")
        title = caption.replace(": ", ":\n", 1)  # two lines: one would run past the figure's width
        step_times(medians, path, title=title, xlabel=f"Median step time, {clock} clock (<unit>)")
        drawn.append((path, caption))
    return drawn
