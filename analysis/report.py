"""``python -m stateaware.analysis report``: the Markdown report and figures of a results directory.

For whatever cohorts the directory holds, the report takes the latest run of each cohort
(or the runs named with ``--run-id``), verifies it (every process completed, one source
hash, one card/plan digest, the expected rows, no duplicated parts — or, with
``--partial``, says "partial" with the counts), computes the cohort's prespecified
comparisons and writes them as the ``comparisons`` table, then renders each section
whose rows are present. Sections are the modules in :data:`SECTIONS`; each computes its
numbers in SQL from the records (the paper's figures appear only in columns labelled as
the paper's).
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SECTIONS", "Section", "UnstableError", "select_runs", "build_report", "main"]


@dataclass(frozen=True)
class Section:
    title: str
    module: str  # stateaware.analysis.<module>: render(con) -> str
    cohorts: tuple[str, ...]  # the cohorts whose runs feed it
    figures: str | None = None  # stateaware.analysis.<figures>: figures(con, out_dir) -> list[Path]


SECTIONS: tuple[Section, ...] = (
    Section("Replay semantics in PyTorch and JAX (§5, Table 2)", "replay_semantics", ("semantic",)),
    Section("Independent derivative, byte, engine and joint-alias checks (§6, §7, Table 3)", "finite",
            ("derivative", "bytes", "engines", "joint_alias")),
    Section("Cost runtime and timing cohorts (§8–§11; Tables 4, 6, 7, 8, 10; Figures 1 and 3)", "timing",
            ("calibration", "pressure", "fair44", "confirm44", "confirm32", "three_workload"), figures="timing_figures"),
    Section("CIFAR-100 dense-queue application (§12, Table 9, Figure 3C)", "application", ("cifar",),
            figures="application"),
)


def select_runs(con: Any, run_ids: list[str] | None = None) -> list[tuple[str, str, int, str]]:
    """``(cohort, run_id, processes, config_yaml)`` of the named runs, else the latest run per cohort."""
    rows = con.execute(
        "SELECT cohort, run_id, processes, config_yaml, started_at FROM runs ORDER BY cohort, started_at"
    ).fetchall()
    if run_ids:
        unknown = sorted(set(run_ids) - {r[1] for r in rows})
        if unknown:
            raise ValueError(f"--run-id {unknown} not in the results; runs there: {', '.join(r[1] for r in rows)}")
        return [r[:4] for r in rows if r[1] in run_ids]
    latest: dict[str, tuple] = {}
    for row in rows:
        latest[row[0]] = row[:4]  # rows are ordered by start time within a cohort
    return list(latest.values())


class UnstableError(RuntimeError):
    """``--strict``: a selected run has stability flags; ``flags`` lists them."""

    def __init__(self, flags: list[Any]):
        from stateaware.analysis.stability import describe

        self.flags = flags
        super().__init__(f"refusing a strict report: {describe(flags, limit=len(flags))}\n"
                         "Re-run those processes on a quiet machine (or pinned: launcher.cpus), or report without "
                         "--strict to see them flagged in the report.")


def build_report(results: Path | str, out: Path | str | None = None, *, run_ids: list[str] | None = None,
                 allow_partial: bool = False, draws: int | None = None, strict: bool = False) -> Path:
    """Write ``report.md`` (and figures) under ``out`` (default ``<results>/report``); return its path.

    Raises :class:`~stateaware.analysis.verify.VerificationError` naming every problem
    when a selected run is not fit for analysis and ``allow_partial`` is false, and with
    ``strict`` :class:`UnstableError` naming every stability flag of the selected runs
    (:mod:`stateaware.analysis.stability`) before anything is written.
    """
    from stateaware.analysis.comparisons import (comparisons_of, compute_comparisons, declared_clock_of,
                                                 write_comparisons)
    from stateaware.analysis.stats import DRAWS
    from stateaware.analysis.verify import verify
    from stateaware.analysis.views import connect
    from stateaware.records.writer import write_bytes_atomic

    results = Path(results)
    out = Path(out) if out is not None else results / "report"
    out.mkdir(parents=True, exist_ok=True)
    selected = select_runs(connect(results), run_ids)
    if not selected:
        raise ValueError(f"no runs under {results}; launch a cohort first: python -m stateaware cohort=NAME out={results}")
    chosen = [run_id for _, run_id, _, _ in selected]

    con = connect(results, run_ids=chosen)
    if strict:
        from stateaware.analysis.stability import flags

        found = flags(con)
        if found:
            raise UnstableError(found)
    lines = ["# stateaware report", "", f"Results: `{results.resolve()}`", "",
             "| cohort | run | processes | verification | source hash | hardware (scale) |",
             "|---|---|---|---|---|---|"]
    verification = verify(con, allow_partial=allow_partial)
    notes = []
    for cohort, run_id, processes, config_yaml in selected:
        run = verification.run(run_id)
        hashes = con.execute("SELECT string_agg(DISTINCT left(source_hash, 12), ', ') FROM processes WHERE run_id = ?",
                             [run_id]).fetchone()[0]
        hardware = con.execute("SELECT any_value(hardware), any_value(scale) FROM runs WHERE run_id = ?", [run_id]).fetchone()
        lines.append(f"| {cohort} | `{run_id}` | {processes} | {run.label} | `{hashes}` | {hardware[0]} ({hardware[1]:g}) |")
        comparisons = comparisons_of(config_yaml)
        if comparisons:
            try:
                _, computed = compute_comparisons(con, run_id, comparisons, verification=verification,
                                                  draws=draws or DRAWS, clock=declared_clock_of(config_yaml))
            except ValueError as exc:  # e.g. one process: nothing to pair; say so, do not guess
                notes.append(f"- {cohort} (`{run_id}`): prespecified comparisons not computed: {exc}")
                continue
            write_comparisons(results, computed, run=run)

    if notes:
        lines += ["", *notes]
    con = connect(results, run_ids=chosen)  # now with the comparisons just written
    present = {c for (c,) in con.execute("SELECT DISTINCT cohort FROM runs").fetchall()}
    for section in SECTIONS:
        if not present.intersection(section.cohorts):
            continue
        body = importlib.import_module(f"stateaware.analysis.{section.module}").render(con).strip()
        if body.startswith("## "):  # the section names itself; keep one heading
            body = body.split("\n", 1)[1].strip() if "\n" in body else ""
        lines += ["", f"## {section.title}", "", body]
        if section.figures:
            for path in importlib.import_module(f"stateaware.analysis.{section.figures}").figures(con, out):
                lines += ["", f"![{path.stem}]({path.relative_to(out).as_posix()})"]
    from stateaware.analysis import stability

    section = stability.render(con)
    if section:
        lines += ["", "## Stability of the timings (clocks, load, step variation)", "", section]
    if verification.partial:
        lines += ["", f"**Partial analysis:** {verification.label}; tables cover completed processes only."]
    report = out / "report.md"
    write_bytes_atomic(("\n".join(lines) + "\n").encode(), report)
    return report


def _draws(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """``report [--results DIR] [--out DIR] [--run-id ID ...] [--partial] [--draws N] [--strict]``."""
    import sys

    from stateaware.analysis.arguments import one_line, results_dir
    from stateaware.analysis.verify import VerificationError
    from stateaware.exits import INVALID, OneLineParser
    from stateaware.records.writer import as_disk_full, disk_full

    parser = OneLineParser(prog="python -m stateaware.analysis report", description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=None, metavar="DIR",
                        help="results directory (default: $STATEAWARE_RESULTS or ./results)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="where to write (default: DIR/report)")
    parser.add_argument("--run-id", action="append", default=None, help="report this run (repeatable); default: latest per cohort")
    parser.add_argument("--partial", action="store_true", help="analyse unfinished runs; every table then says partial")
    parser.add_argument("--draws", type=_draws, default=None, help="bootstrap draws (default 20,000)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse (exit 1) when a selected run has an unstable method or a loaded process")
    args = parser.parse_args(argv)
    results = results_dir(args.results)
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out}: a file, not a directory; pass --out DIR", file=sys.stderr)
        return INVALID
    try:
        path = build_report(results, args.out, run_ids=args.run_id, allow_partial=args.partial, draws=args.draws,
                            strict=args.strict)
    except UnstableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (VerificationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return INVALID
    except OSError as exc:
        if disk_full(exc):  # every file is written whole or not at all
            print(f"error: {as_disk_full(exc)}", file=sys.stderr)
        else:  # --out not creatable or not writable: name the path
            print(f"error: {exc.filename or args.out}: {exc.strerror or one_line(exc)}; pass --out DIR with a "
                  f"writable DIR", file=sys.stderr)
        return 1
    print(path)
    return 0
