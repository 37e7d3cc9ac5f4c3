"""``python -m stateaware.analysis report``: the Markdown report and figures of a results directory.

For whatever cohorts the directory holds, the report takes the latest *complete* run of each
cohort — every declared process's latest attempt completed; the latest run when none is —
(or the runs named with ``--run-id``), says which it took and lists the runs it left out with
the ``--run-id`` that renders each, verifies it (every process completed, one source
hash, one card/plan digest, the expected rows, no duplicated parts — or, with
``--partial``, says "partial" with the counts), computes the cohort's prespecified
comparisons and writes them as the ``comparisons`` table, then renders the sections and the
stability of the timings (a summary per run; every flag in ``stability.csv`` beside
``report.md``). A section's figures may come with captions (``(path, caption)`` pairs), which
become the images' text.

NOTE [ Sections come from the recorded kind ]
Each run's ``runs`` row records its cohort ``kind`` and the ``report_sections`` the kind
declares (``REPORT``, see ``stateaware.kinds.Kind``); the report renders each named section
module once, over the runs that name it (a DuckDB connection whose views hold only those
runs), in the paper's order for the paper's sections and in order of appearance for any
other. A run of a kind that declares none gets ``stateaware.analysis.sections.generic``, one
section per kind. A run recorded before version 5 of the records (no ``kind`` column)
reads its kind from ``config_yaml`` and its sections from ``SECTIONS_OF_OLD_KINDS``.
A section recorded under a module's old name renders as the module's today
(NOTE [ Moved modules keep their old names ] in ``stateaware.analysis``).
No cohort name decides anything here, and the report never imports a kind.

Rule 1: a section renders only runs that were selected, so a cohort that was not run
never shows as a row of zeros. Rule 2: when ``--run-id`` names several runs of one
cohort, each section renders once per run of it ("round"), its heading naming the runs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stateaware.analysis import current_name
from stateaware.analysis.store.run_config import cohort_config
from stateaware.analysis.store.verify import verify

from stateaware.records.write_paths import make_folder, writing_under

# NOTE [ Lazy imports ]
#
# ``python -m stateaware.analysis`` imports this module at start-up (its handlers call
# ``select_runs`` and ``build_report``), so the modules that bring duckdb, pyarrow and numpy
# (the views, the statistics, the record writer) are imported inside the functions that use
# them (tagged ``# lazy``): ``--help`` and the other commands load none of them.

__all__ = [
    "GENERIC",
    "PAPER_ORDER",
    "SECTIONS_OF_OLD_KINDS",
    "SelectedRun",
    "OtherRun",
    "UnstableError",
    "select_runs",
    "other_runs",
    "sections_of",
    "build_report",
]

#: The section of a kind that declares none.
GENERIC = "stateaware.analysis.sections.generic"

#: The paper's sections, in the paper's order (§5, §6–7, §8–11, §12); others follow them.
PAPER_ORDER = (
    "stateaware.analysis.sections.replay_semantics",
    "stateaware.analysis.sections.finite_checks",
    "stateaware.analysis.sections.timing",
    "stateaware.analysis.sections.cifar_application",
)

#: Runs recorded before ``runs.report_sections`` existed (schema < 5): the sections their kind
#: rendered in then. New kinds declare ``REPORT`` instead and never need an entry here.
SECTIONS_OF_OLD_KINDS: dict[str, tuple[str, ...]] = {
    "semantic": ("stateaware.analysis.sections.replay_semantics",),
    "derivative": ("stateaware.analysis.sections.finite_checks",),
    "bytes": ("stateaware.analysis.sections.finite_checks",),
    "engines": ("stateaware.analysis.sections.finite_checks",),
    "joint_alias": ("stateaware.analysis.sections.finite_checks",),
    "timing": ("stateaware.analysis.sections.timing",),
    "cifar": ("stateaware.analysis.sections.cifar_application",),
}


@dataclass(frozen=True)
class SelectedRun:
    """A run the report covers, with what it recorded about its kind."""

    cohort: str
    run_id: str
    processes: int
    config_yaml: str
    kind: str
    sections: tuple[str, ...]  # the kind's REPORT; empty: the generic section
    completed: int | None = None  # processes whose latest attempt completed (None: not counted)

    @property
    def complete(self) -> bool:
        """Every declared process's latest attempt completed."""
        return self.completed is not None and self.completed >= self.processes


@dataclass(frozen=True)
class OtherRun:
    """A run in the results that the report did not render, and how to render it."""

    cohort: str
    run_id: str
    started_at: Any
    processes: int
    completed: int

    @property
    def state(self) -> str:
        """``complete (n of n processes)`` or ``incomplete (k of n processes completed)``."""
        if self.completed >= self.processes:
            return f"complete ({self.completed} of {self.processes} processes)"
        return f"incomplete ({self.completed} of {self.processes} processes completed)"


#: Per run: its cohort, id, start, declared processes and how many of them completed (their
#: latest attempt, whatever the processes view keeps), in start order within each cohort.
_RUNS_SQL = """
WITH latest AS (
    SELECT run_id, process_index, status FROM processes
    QUALIFY row_number() OVER (
        PARTITION BY run_id, process_index ORDER BY attempt DESC NULLS LAST, finished_at DESC NULLS LAST
    ) = 1),
     done AS (SELECT run_id, count(DISTINCT process_index) AS completed FROM latest
              WHERE status = 'completed' GROUP BY run_id)
SELECT r.cohort, r.run_id, r.processes, r.config_yaml, r.kind, r.report_sections, r.started_at,
       coalesce(d.completed, 0) AS completed
FROM runs r LEFT JOIN done d USING (run_id)
ORDER BY r.cohort, r.started_at NULLS FIRST, r.run_id
"""


def select_runs(con: Any, run_ids: list[str] | None = None) -> list[SelectedRun]:
    """The named runs (in start order), else per cohort the latest complete run (the latest run
    when none is complete), with their kinds and sections.

    An incomplete run is passed over by default because the report of it would stop at
    verification (or, with ``--partial``, cover fewer processes) while a complete run of the
    same cohort is there; naming it with ``--run-id`` still renders it.
    """
    rows = con.execute(_RUNS_SQL).fetchall()
    if run_ids:
        unknown = sorted(set(run_ids) - {r[1] for r in rows})
        if unknown:
            raise ValueError(f"--run-id {unknown} not in the results; runs there: {', '.join(r[1] for r in rows)}")
        rows = [r for r in rows if r[1] in run_ids]
    else:
        latest: dict[str, tuple] = {}
        for row in rows:  # ordered by start time within a cohort: the last complete one wins
            if row[0] not in latest or row[7] >= row[2] or latest[row[0]][7] < latest[row[0]][2]:
                latest[row[0]] = row
        rows = list(latest.values())
    selected = []
    for cohort, run_id, processes, config_yaml, kind, sections, _, completed in rows:
        if kind is None:  # recorded before version 5: the kind is in the config
            kind = str(cohort_config(config_yaml).get("kind") or "")
            sections = SECTIONS_OF_OLD_KINDS.get(kind, ())
        selected.append(
            # A name recorded before its module moved reads as the module's name today.
            SelectedRun(
                cohort, run_id, processes, config_yaml, kind, tuple(map(current_name, sections or ())), int(completed)
            )
        )
    return selected


def other_runs(con: Any, selected: Sequence[SelectedRun]) -> list[OtherRun]:
    """Every run in the results that is not in ``selected``, by cohort and start time."""
    chosen = {run.run_id for run in selected}
    return [
        OtherRun(cohort, run_id, started, int(processes), int(completed))
        for cohort, run_id, processes, _, _, _, started, completed in con.execute(_RUNS_SQL).fetchall()
        if run_id not in chosen
    ]


def _run_choice(selected: Sequence[SelectedRun], others: Sequence[OtherRun], named: bool) -> list[str]:
    """The report's lines saying which runs it rendered and how to render the others."""
    if named:
        lines = ["Rendered the runs named with `--run-id`."]
    else:
        lines = [
            "Rendered the latest complete run of each cohort (every process's latest attempt completed; the "
            "latest run where none is complete); pass `--run-id ID` (repeatable) to render others."
        ]
        lines += [
            f"- {run.cohort}: no complete run; rendered the latest, `{run.run_id}`"
            for run in selected
            if not run.complete
        ]
    if others:
        lines += [
            "",
            "Other runs in these results (not rendered):",
            "",
            "| cohort | run | started | processes | state | render it with |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {o.cohort} | `{o.run_id}` | {o.started_at if o.started_at is not None else '—'} | {o.processes} | "
            f"{o.state} | `--run-id {o.run_id}` |"
            for o in others
        ]
    return lines


def sections_of(selected: Sequence[SelectedRun]) -> list[tuple[str, str | None, list[list[SelectedRun]]]]:
    """``(section module, kind for the generic section or None, rounds of runs)`` in report order.

    A round holds at most one run per cohort (NOTE [ Sections come from the recorded kind ],
    Rule 2): the first round the earliest selected run of each cohort, and so on.
    """
    runs_of: dict[tuple[str, str | None], list[SelectedRun]] = {}
    for run in selected:
        for key in [(m, None) for m in run.sections] or [(GENERIC, run.kind)]:
            runs_of.setdefault(key, []).append(run)
    order = sorted(runs_of, key=lambda k: PAPER_ORDER.index(k[0]) if k[0] in PAPER_ORDER else len(PAPER_ORDER))
    out = []
    for module, kind in order:
        rounds: list[list[SelectedRun]] = []
        for run in runs_of[(module, kind)]:
            place = next((r for r in rounds if all(o.cohort != run.cohort for o in r)), None)
            if place is None:
                rounds.append(place := [])
            place.append(run)
        out.append((module, kind, rounds))
    return out


def _section_module(name: str, run: SelectedRun) -> Any:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in (name, *(name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1))):
            raise
        raise ValueError(
            f"report section {name!r} (declared by kind {run.kind!r} of run {run.run_id}) is not "
            "importable; run the report where that module is importable (its directory, or PYTHONPATH)"
        ) from None
    if not callable(getattr(module, "render", None)) or not isinstance(getattr(module, "TITLE", None), str):
        raise ValueError(
            f"report section {name!r} (declared by kind {run.kind!r}) needs TITLE: str and "
            "render(con) -> str; see stateaware.kinds.ReportSection"
        )
    return module


class UnstableError(RuntimeError):
    """``--strict``: a selected run has stability flags; ``flags`` lists them."""

    def __init__(self, flags: list[Any]):
        from stateaware.analysis.stats.stability import describe  # lazy

        self.flags = flags
        super().__init__(
            f"refusing a strict report: {describe(flags, limit=len(flags))}\n"
            "Re-run those processes on a quiet machine (or pinned: launcher.cpus), or report without "
            "--strict to see them flagged in the report."
        )


def _loaded(results: Path, run_ids: list[str], parts: Any) -> Any:
    """A read-only connection over ``run_ids`` (of the snapshot ``parts``) whose every table
    DuckDB read itself, each row's file kept (NOTE [ Tables DuckDB reads itself ] in
    ``stateaware.analysis.store.views``): once per connection rather than through Arrow query by
    query. A one-run report of 501 parts took 6.2-7.1 s through Arrow and 4.0-4.4 s so, its
    Markdown and figures byte for byte the same."""
    from stateaware.analysis.store.views import LOAD_EVERY_TABLE, connect  # lazy

    return connect(results, run_ids=run_ids, parts=parts, load=LOAD_EVERY_TABLE)


def build_report(
    results: Path | str,
    out: Path | str | None = None,
    *,
    run_ids: list[str] | None = None,
    allow_partial: bool = False,
    draws: int | None = None,
    strict: bool = False,
) -> Path:
    """Write ``report.md`` (and figures) under ``out`` (default ``<results>/report``); return its path.

    Raises ``VerificationError`` naming every problem
    when a selected run is not fit for analysis and ``allow_partial`` is false, and with
    ``strict`` ``UnstableError`` naming every stability flag of the selected runs
    (``stateaware.analysis.stats.stability``) before anything is written.
    """
    results = Path(results)
    out = Path(out) if out is not None else results / "report"
    # Every file the report writes is checked against the results directory when the report
    # folder lies in it (so a `report` link there is refused), else against the folder given.
    inside = any(
        Path(os.path.abspath(out)).is_relative_to(root)
        for root in (Path(os.path.abspath(results)), Path(os.path.realpath(results)))
    )
    with writing_under(results if inside else out):
        return _write_report(results, out, run_ids=run_ids, allow_partial=allow_partial, draws=draws, strict=strict)


def _write_report(
    results: Path,
    out: Path,
    *,
    run_ids: list[str] | None,
    allow_partial: bool,
    draws: int | None,
    strict: bool,
) -> Path:
    from stateaware.analysis.stats.comparisons import (  # lazy
        comparisons_of,
        compute_comparisons,
        declared_clock_of,
        write_comparisons,
    )
    from stateaware.analysis.stats.estimators import DRAWS  # lazy
    from stateaware.analysis.store.views import connect, snapshot  # lazy

    from stateaware.records.writer import write_bytes_atomic  # lazy

    make_folder(out)
    # The runs are listed from `runs` and `processes` alone; every other part read is a chosen
    # run's (NOTE [ Pruning by run ] in views): a report of one run costs the same whatever
    # else the store holds. The chosen runs' parts are checked once before the comparisons
    # are written, and the comparisons once more after (to see them), however many connections
    # the sections need.
    listing = connect(
        results,
        parts=snapshot(results, tables=("runs", "processes")),
        load={"runs": None, "processes": {"status"}},  # what _RUNS_SQL reads, at DuckDB's speed
    )
    selected = select_runs(listing, run_ids)
    if not selected:
        raise ValueError(
            f"no runs under {results}; launch a cohort first: python -m stateaware cohort=NAME out={results}"
        )
    chosen = [run.run_id for run in selected]
    others = other_runs(listing, selected)
    listing.close()

    parts = snapshot(results, chosen)
    con = _loaded(results, chosen, parts)
    from stateaware.analysis.stats.stability import caveat, flags  # lazy

    found = flags(con)
    if strict and found:
        raise UnstableError(found)
    # Relative to the report, never the machine's absolute path: the report travels (shared,
    # archived, read on another machine) and the path told its reader nothing they could use.
    where = Path(os.path.relpath(results.resolve(), out.resolve())).as_posix()
    lines = [
        "# stateaware report",
        "",
        f"Results: `{where}` (relative to this report)",
        "",
        "| cohort | run | processes | verification | source hash | hardware (scale) |",
        "|---|---|---|---|---|---|",
    ]
    verification = verify(con, allow_partial=allow_partial)
    notes = []
    for selected_run in selected:
        cohort, run_id, config_yaml = selected_run.cohort, selected_run.run_id, selected_run.config_yaml
        run = verification.run(run_id)
        hashes = con.execute(
            "SELECT string_agg(DISTINCT left(source_hash, 12), ', ') FROM processes WHERE run_id = ?", [run_id]
        ).fetchone()[0]
        hardware = con.execute(
            "SELECT any_value(hardware), any_value(scale) FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
        lines.append(
            f"| {cohort} | `{run_id}` | {selected_run.processes} | {run.label} | `{hashes}` | "
            f"{hardware[0]} ({hardware[1]:g}) |"
        )
        comparisons = comparisons_of(config_yaml)
        if comparisons:
            try:
                _, computed = compute_comparisons(
                    con,
                    run_id,
                    comparisons,
                    verification=verification,
                    draws=draws or DRAWS,
                    clock=declared_clock_of(config_yaml),
                )
            except ValueError as exc:  # e.g. one process: nothing to pair; say so, do not guess
                notes.append(f"- {cohort} (`{run_id}`): prespecified comparisons not computed: {exc}")
                continue
            write_comparisons(results, computed, run=run)

    # How sure the headline numbers are, beside them: the flags' counts, the detail further down.
    cautions = [
        f"- **{run.cohort}** (`{run.run_id}`): {text} (every flag: the stability section)"
        for run in selected
        if (text := caveat(found, run.run_id, run.processes))
    ]
    if cautions:
        lines += ["", "Stability of the timed runs:", "", *cautions]
    lines += ["", *_run_choice(selected, others, named=bool(run_ids))]
    if notes:
        lines += ["", *notes]
    parts = parts.updated(snapshot(results, chosen, tables=("comparisons",)))  # with those just written
    for module_name, kind, rounds in sections_of(selected):
        module = _section_module(module_name, rounds[0][0])
        for runs in rounds:
            title = (
                module.title_for(kind, list(dict.fromkeys(r.cohort for r in runs)))
                if kind is not None
                else module.TITLE
            )
            where = out
            if len(rounds) > 1:  # several runs of one cohort: each round its own heading and figure folder
                title += " — runs " + ", ".join(f"`{r.run_id}`" for r in runs)
                where = make_folder(out / "-".join(r.run_id for r in runs))
            section_con = _loaded(results, [r.run_id for r in runs], parts)
            body = module.render(section_con).strip()
            if body.startswith("## "):  # the section names itself; keep one heading
                body = body.split("\n", 1)[1].strip() if "\n" in body else ""
            lines += ["", f"## {title}", "", body]
            if callable(getattr(module, "figures", None)):
                # A figure is a path, or (path, caption): the caption (e.g. the figure's title,
                # naming the clock of its times) becomes the image's text in the Markdown.
                for item in module.figures(section_con, where):
                    path, caption = (item, None) if isinstance(item, Path) else (Path(item[0]), str(item[1]))
                    link = path.relative_to(out).as_posix()
                    lines += ["", f"![{caption or path.stem}]({link})"]
                    if caption:
                        lines += ["", f"*{caption}*"]
    con = _loaded(results, chosen, parts)
    from stateaware.analysis.stats import stability  # lazy

    section = stability.render(con, out)
    if section:
        lines += ["", "## Stability of the timings (clocks, load, step variation)", "", section]
    if verification.partial:
        lines += ["", f"**Partial analysis:** {verification.label}; tables cover completed processes only."]
    report = out / "report.md"
    write_bytes_atomic(("\n".join(lines) + "\n").encode(), report)
    return report
