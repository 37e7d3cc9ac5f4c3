"""Whether a run's timings can be trusted: unstable methods and loaded processes.

Per process and method (measured steps only): the coefficient of variation of the step
times on the run's declared clock (``stateaware.clocks``), and the ratio of total wall
time to total CPU time. Per process: the share of its CPUs' time other processes took
(``processes.other_cpu_share``, ``stateaware.launch.context``). A value past its threshold
is a ``Flag``:

==================  ==========================================================================
``unstable``        step-time CV > ``max_cv``: the steps of one method in one process
                    disagree more than a deterministic workload's steps do
``waited``          wall / CPU > ``max_wall_over_cpu`` on a ``cpu``-clock run: the timed
                    thread spent that much longer on the clock than on a core — it waited
``loaded``          other processes took more than ``max_other_share`` of the process's CPUs
==================  ==========================================================================

Thresholds come from the run's recorded config (``analysis.stability.*``, so
``python -m stateaware cohort=NAME analysis.stability.max_cv=0.2`` changes them for that
run) and can be overridden when checking. Only runs with ``timings`` rows are checked:
the load of a semantic cohort says nothing about its results.

    python -m stateaware.analysis check [--results DIR] [--run-id ID ...]

exits 0 when no run has a flag and 1 (listing every flag) otherwise.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from stateaware.analysis.stats.comparisons import declared_clock_of
from stateaware.analysis.store.views import connect

from stateaware.records.writer import write_bytes_atomic
from stateaware.thresholds import MAX_CV, MAX_OTHER_SHARE, MAX_WALL_OVER_CPU

__all__ = [
    "MAX_CV",
    "MAX_WALL_OVER_CPU",
    "MAX_OTHER_SHARE",
    "Thresholds",
    "Flag",
    "method_stability",
    "process_load",
    "flags",
    "describe",
    "caveat",
    "run_summary",
    "KINDS",
    "FLAGS_FILE",
    "FLAG_COLUMNS",
    "write_flags",
    "render",
]

#: The kinds of ``Flag``, in the order tables list them.
KINDS = ("unstable", "waited", "loaded")


@dataclass(frozen=True)
class Thresholds:
    """The three stability thresholds (module constants by default)."""

    max_cv: float = MAX_CV
    max_wall_over_cpu: float = MAX_WALL_OVER_CPU
    max_other_share: float = MAX_OTHER_SHARE

    @classmethod
    def from_config(cls, config_yaml: str | None, overrides: Mapping[str, float | None] | None = None) -> Thresholds:
        """The run's ``analysis.stability`` values (defaults where absent), then ``overrides``."""
        found: dict[str, float] = {}
        if config_yaml:
            doc = OmegaConf.to_container(OmegaConf.create(config_yaml)) or {}
            found = {
                k: float(v)
                for k, v in ((doc.get("analysis") or {}).get("stability") or {}).items()
                if k in cls.__dataclass_fields__ and v is not None
            }
        found.update({k: float(v) for k, v in (overrides or {}).items() if v is not None})
        return replace(cls(), **found)


@dataclass(frozen=True)
class Flag:
    """One threshold a run's process (and method) passed."""

    cohort: str
    run_id: str
    process_index: int
    method: str | None  # None for a process-level flag (loaded)
    kind: str  # unstable | waited | loaded
    value: float
    threshold: float
    clock: str | None = None  # the clock of an ``unstable`` CV

    def text(self) -> str:
        what = {
            "unstable": f"step-time CV ({self.clock} clock)",
            "waited": "wall/CPU time",
            "loaded": "CPU share taken by other processes",
        }[self.kind]
        who = f"process {self.process_index}" + (f" method {self.method}" if self.method else "")
        return f"{self.cohort} ({self.run_id}) {who}: {self.kind}: {what} {self.value:.3f} > {self.threshold:g}"


def _rows(con: Any, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    result = con.execute(sql, list(params))
    names = [d[0] for d in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def _columns(con: Any, view: str) -> set[str]:
    return {
        c
        for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [view]
        ).fetchall()
    }


def method_stability(con: Any) -> list[dict[str, Any]]:
    """Per (run, process, method) of the completed processes: measured ``steps``, ``cv_wall``,
    ``cv_cpu`` (null without CPU times), ``wall_over_cpu`` and ``device``."""
    cpu = "cpu_ms" if "cpu_ms" in _columns(con, "timings") else "CAST(NULL AS DOUBLE)"
    return _rows(
        con,
        f"""
        SELECT t.cohort, t.run_id, t.process_index, t.method, any_value(t.device) AS device, count(*) AS steps,
               stddev_samp(t.step_ms) / nullif(avg(t.step_ms), 0) AS cv_wall,
               stddev_samp({cpu}) / nullif(avg({cpu}), 0) AS cv_cpu,
               sum(t.step_ms) / nullif(sum({cpu}), 0) AS wall_over_cpu
        FROM timings t JOIN processes p USING (run_id, process_index)
        WHERE p.status = 'completed' AND NOT coalesce(t.warmup, false)
        GROUP BY ALL ORDER BY t.cohort, t.run_id, t.process_index, t.method""",
    )


def process_load(con: Any) -> list[dict[str, Any]]:
    """Per completed process of a run with timings: its context columns that say how loaded it ran."""
    wanted = ("other_cpu_share", "load_before", "load_after", "affinity", "logical_cpus")
    have = _columns(con, "processes")
    select = ", ".join(f"p.{c}" if c in have else f"NULL AS {c}" for c in wanted)
    return _rows(
        con,
        f"""
        SELECT p.cohort, p.run_id, p.process_index, {select} FROM processes p
        WHERE p.status = 'completed' AND p.run_id IN (SELECT DISTINCT run_id FROM timings)
        ORDER BY p.cohort, p.run_id, p.process_index""",
    )


def _run_settings(con: Any, overrides: Mapping[str, float | None] | None) -> dict[str, tuple[str, Thresholds]]:
    return {
        run_id: (declared_clock_of(config), Thresholds.from_config(config, overrides))
        for run_id, config in con.execute(
            "SELECT run_id, first(config_yaml ORDER BY started_at DESC NULLS LAST) FROM runs GROUP BY run_id"
        ).fetchall()
    }


def flags(con: Any, overrides: Mapping[str, float | None] | None = None) -> list[Flag]:
    """Every flag of every run the connection's views hold (``connect(..., run_ids=...)`` scopes it).

    A run without a ``runs`` row (a manifest never written) is checked at the defaults on
    the wall clock.
    """
    settings = _run_settings(con, overrides)
    default = ("wall", Thresholds.from_config(None, overrides))
    out: list[Flag] = []
    for row in method_stability(con):
        clock, limits = settings.get(row["run_id"], default)
        if clock == "cpu" and row["cv_cpu"] is None:
            clock = "wall"  # records from before CPU times were kept
        cv = row["cv_cpu"] if clock == "cpu" else row["cv_wall"]
        base = dict(
            cohort=row["cohort"], run_id=row["run_id"], process_index=row["process_index"], method=row["method"]
        )
        if cv is not None and cv > limits.max_cv:
            out.append(Flag(**base, kind="unstable", value=float(cv), threshold=limits.max_cv, clock=clock))
        ratio = row["wall_over_cpu"]
        if clock == "cpu" and ratio is not None and ratio > limits.max_wall_over_cpu:
            out.append(Flag(**base, kind="waited", value=float(ratio), threshold=limits.max_wall_over_cpu))
    for row in process_load(con):
        _, limits = settings.get(row["run_id"], default)
        share = row["other_cpu_share"]
        if share is not None and share > limits.max_other_share:
            out.append(
                Flag(
                    cohort=row["cohort"],
                    run_id=row["run_id"],
                    process_index=row["process_index"],
                    method=None,
                    kind="loaded",
                    value=float(share),
                    threshold=limits.max_other_share,
                )
            )
    return sorted(out, key=lambda f: (f.cohort, f.run_id, f.process_index, f.method or "", f.kind))


def describe(found: Sequence[Flag], *, limit: int = 20) -> str:
    """A short text block: ``stability: ok`` or the counts and the first ``limit`` flags."""
    if not found:
        return "stability: ok (no unstable method, no loaded process)"
    kinds = {k: sum(f.kind == k for f in found) for k in KINDS}
    lines = [
        f"stability: {len(found)} flag(s) — "
        + ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
        + "; these timings were taken on a disturbed machine or vary more than a quiet one allows"
    ]
    lines += [f"  {f.text()}" for f in found[:limit]]
    if len(found) > limit:
        lines.append(f"  ... and {len(found) - limit} more: python -m stateaware.analysis check")
    return "\n".join(lines)


def caveat(found: Sequence[Flag], run_id: str, processes: int) -> str | None:
    """What ``run_id``'s flags say about its headline numbers, in one sentence to print beside
    them, e.g. ``45 of 50 processes flagged loaded: read with care``; None when the run has no flag.

    ``found`` are flags of any runs (``flags``); ``processes`` the run's declared count.
    A process counts once however many flags it has; the kinds are named in ``KINDS`` order.
    """
    mine = [f for f in found if f.run_id == run_id]
    if not mine:
        return None
    named = [k for k in KINDS if any(f.kind == k for f in mine)]
    kinds = " or ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
    flagged = len({f.process_index for f in mine})
    return f"{flagged} of {max(processes, flagged)} processes flagged {kinds}: read with care"


def run_summary(results: Path | str, run_id: str) -> str | None:
    """The end-of-run stability lines of ``run_id`` (``describe``), or None without timings."""
    con = connect(results, run_ids=[run_id])
    if not con.execute("SELECT count(*) FROM timings").fetchone()[0]:
        return None
    return describe(flags(con))


#: The file beside ``report.md`` that lists every flag (the report's section only counts them).
FLAGS_FILE = "stability.csv"

#: Its columns, one row per ``Flag``.
FLAG_COLUMNS = ("cohort", "run_id", "process_index", "method", "kind", "clock", "value", "threshold")


def write_flags(found: Sequence[Flag], path: Path | str) -> Path:
    """Write every flag to ``path`` as CSV (``FLAG_COLUMNS``), atomically; return the path."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(FLAG_COLUMNS)
    for f in found:
        writer.writerow(
            [f.cohort, f.run_id, f.process_index, f.method or "", f.kind, f.clock or "", f"{f.value:.6g}", f.threshold]
        )
    return write_bytes_atomic(text.getvalue().encode(), Path(path))


def render(con: Any, out: Path | str | None = None) -> str:
    """The report's stability section: per run the flag counts by kind and the worst CV,
    wall/CPU and other-process share beside their thresholds.

    The flags themselves can run to hundreds of lines on a loaded machine, so the section
    does not list them: with ``out`` (the report's folder) every flag goes to
    ``out/stability.csv``, linked from the section (written, header only, when there are
    none, so a stale list never survives a re-run); without it the section names
    ``python -m stateaware.analysis check``, which prints them.
    """
    stats = method_stability(con)
    if not stats:
        return ""
    load = process_load(con)
    settings = _run_settings(con, None)
    found = flags(con)
    lines = [
        "| cohort | run | clock | processes | flags: unstable | waited | loaded | max step CV | max wall/CPU | "
        "max other-process CPU share | load before → after (max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run_id in dict.fromkeys(r["run_id"] for r in stats):
        mine = [r for r in stats if r["run_id"] == run_id]
        clock, limits = settings.get(run_id, ("wall", Thresholds()))
        cvs = [r["cv_cpu"] if clock == "cpu" and r["cv_cpu"] is not None else r["cv_wall"] for r in mine]
        ratios = [r["wall_over_cpu"] for r in mine if r["wall_over_cpu"] is not None]
        procs = [r for r in load if r["run_id"] == run_id]
        shares = [r["other_cpu_share"] for r in procs if r["other_cpu_share"] is not None]
        before = [r["load_before"] for r in procs if r["load_before"] is not None]
        after = [r["load_after"] for r in procs if r["load_after"] is not None]
        counts = " | ".join(str(sum(f.run_id == run_id and f.kind == k for f in found)) for k in KINDS)
        lines.append(
            f"| {mine[0]['cohort']} | `{run_id}` | {clock} | {len({r['process_index'] for r in mine})} | {counts} | "
            f"{_max(cvs)} (≤ {limits.max_cv:g}) | {_max(ratios)} (≤ {limits.max_wall_over_cpu:g}) | "
            f"{_max(shares)} (≤ {limits.max_other_share:g}) | {_max(before)} → {_max(after)} |"
        )
    lines.append("")
    if out is not None:
        write_flags(found, Path(out) / FLAGS_FILE)
        where = f"every flag, one per line: [{FLAGS_FILE}]({FLAGS_FILE})"
    else:
        where = "every flag: `python -m stateaware.analysis check`"
    if found:
        lines.append(
            f"**Stability:** {len(found)} flag(s) — these timings were taken on a disturbed machine or vary "
            f"more than a quiet one allows; {where}."
        )
    else:
        lines.append("**Stability:** ok (no unstable method, no loaded process).")
    return "\n".join(lines) + "\n"


def _max(values: Sequence[float | None]) -> str:
    present = [v for v in values if v is not None]
    return f"{max(present):.3f}" if present else "—"
