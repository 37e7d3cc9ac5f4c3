"""The ``comparisons`` table: every computed ratio, written beside the report as Parquet.

One file per run::

    <results>/comparisons/cohort=<cohort>/run_id=<run_id>/comparisons.parquet

written atomically (temporary name, then rename), so the ``comparisons`` view over a
results directory never sees half a table, and recomputing a run replaces its file.
Columns (``SCHEMA``): the run and cohort, the comparison's name, metric, numerator and
denominator methods and ``subset`` (its ``where`` restriction as JSON), then ``estimate``,
``lower``, ``upper`` at two-sided ``confidence = 1 - alpha/m``, ``draws``, ``seed``,
``processes`` paired, ``expected_processes`` of the run and ``partial`` (true when the run
was analysed with processes missing), and the arithmetic means of the per-process means of
both methods.

``compute_comparisons`` is the whole path for one run: verify, read the measured rows
of the completed processes, compute every prespecified comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from omegaconf import OmegaConf
from stateaware.analysis.stats.estimators import ALPHA, DRAWS, Comparison, ComparisonResult, compare
from stateaware.analysis.store.run_config import config_of
from stateaware.analysis.store.verify import RunVerification, Verification, verify

from stateaware.clocks import CLOCKS, TIME_METRICS, clock_column, declared_clock
from stateaware.names import check_name
from stateaware.records.part_names import run_folder
from stateaware.records.schema import RESULT_TABLES
from stateaware.records.write_paths import writable
from stateaware.records.writer import write_atomic

__all__ = [
    "SCHEMA",
    "comparisons_path",
    "comparisons_table",
    "write_comparisons",
    "compute_comparisons",
    "declared_clock_of",
]

SCHEMA = RESULT_TABLES["comparisons"]

#: Result folders of the analysis sit beside the record tables; the lead's views turn
#: every such folder into a view of the same name.
FOLDER = "comparisons"


def comparisons_path(results: Path | str, cohort: str, run_id: str) -> Path:
    """Where a run's comparisons land under ``results``.

    ``cohort`` and ``run_id`` come from the records, which anyone could have forged: they must
    be names (``stateaware.names.check_name``) and the path must lie inside ``results``,
    else ``ValueError`` naming them."""
    path = (
        run_folder(results, FOLDER, check_name("cohort", cohort), check_name("run_id", run_id)) / "comparisons.parquet"
    )
    return writable(results, path)


def comparisons_table(
    results: Sequence[ComparisonResult],
    *,
    run_id: str,
    cohort: str,
    partial: bool,
    expected_processes: int | None = None,
) -> pa.Table:
    """``results`` as an Arrow table of ``SCHEMA``, one row per comparison, in order."""
    rows = [
        {
            **r.row(),
            "run_id": run_id,
            "cohort": cohort,
            "partial": bool(partial),
            "expected_processes": expected_processes,
        }
        for r in results
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_comparisons(
    results_dir: Path | str,
    results: Sequence[ComparisonResult],
    *,
    run: RunVerification | None = None,
    run_id: str | None = None,
    cohort: str | None = None,
    partial: bool | None = None,
) -> Path:
    """Write a run's comparisons atomically beside the report; return the file's path.

    Pass the run's ``RunVerification`` (which supplies run id, cohort, partial and
    the expected process count), or ``run_id``, ``cohort`` and ``partial`` explicitly.
    """
    if run is not None:
        run_id, cohort = run.run_id, run.cohort
        partial, expected = run.partial, run.expected
    else:
        missing = [k for k, v in (("run_id", run_id), ("cohort", cohort), ("partial", partial)) if v is None]
        if missing:
            raise ValueError(f"write_comparisons needs run= or all of run_id, cohort, partial; missing {missing}")
        expected = None
    table = comparisons_table(results, run_id=run_id, cohort=cohort, partial=partial, expected_processes=expected)
    return write_atomic(table, comparisons_path(results_dir, cohort, run_id), out=results_dir)


def compute_comparisons(
    con: Any,
    run_id: str,
    comparisons: Sequence[Comparison | Mapping[str, Any] | Sequence[Any]],
    *,
    table: str = "timings",
    allow_partial: bool = False,
    verification: Verification | None = None,
    alpha: float = ALPHA,
    draws: int = DRAWS,
    seed: int = 0,
    clock: str | None = None,
) -> tuple[RunVerification, list[ComparisonResult]]:
    """Verify ``run_id``, then compute its prespecified comparisons from ``table``.

    Uses only the completed processes' rows and, where ``table`` has a ``warmup`` column,
    only measured steps (warm-ups never enter a timing: they time compilation and cold caches).
    Per-process means are taken in SQL (``avg`` per process, method and ``where``
    columns), so a 900,000-row cohort crosses into Python as a few hundred rows.
    ``verification`` reuses a ``verify`` result the caller
    just obtained on ``con`` (a report verifies each run once); otherwise the run is
    verified here, and ``VerificationError`` raised when
    it is not fit for analysis (see ``allow_partial``).

    ``clock`` (``wall`` or ``cpu``; see ``declared_clock_of``) puts every step-time
    comparison (metric ``step_ms`` or ``cpu_ms``) on that clock's column and attaches the
    same ratio on the other clock (``ComparisonResult.other``); ``None`` computes each
    metric as written. A run whose records hold no CPU times (written before they were
    recorded) falls back to wall time, and its results say ``clock = wall``.
    """
    if verification is None:
        verification = verify(con, run_id=run_id, allow_partial=allow_partial)
    run = verification.run(run_id)
    specs = [Comparison.coerce(c) for c in comparisons]
    columns = {
        c
        for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
        ).fetchall()
    }
    timed = clock is not None and any(s.metric in TIME_METRICS for s in specs)
    if timed:
        clock_column(clock)  # an unknown clock fails here, by name
        if _has_cpu_times(con, table, columns, run_id):
            other = "cpu" if clock == "wall" else "wall"
        else:
            clock, other = "wall", None
        primary = [_on_clock(s, clock) for s in specs]
        metrics = list(dict.fromkeys([*(s.metric for s in primary), *(CLOCKS.values() if other else ())]))
    else:
        primary, other = specs, None
        metrics = list(dict.fromkeys(s.metric for s in specs))
    keys = ["process_index", "method", *dict.fromkeys(col for s in specs for col, _ in s.where)]
    unknown = [c for c in keys + metrics if c not in columns]
    if unknown:
        raise ValueError(f"view {table!r} has no column(s) {unknown}; it has: {', '.join(sorted(columns))}")
    measured = "AND NOT coalesce(warmup, false)" if "warmup" in columns else ""
    processes = ", ".join(str(p) for p in run.completed)
    select = ", ".join([*(f'"{k}"' for k in keys), *(f'avg("{m}") AS "{m}"' for m in metrics)])
    result = con.execute(
        f"SELECT {select} FROM {table} WHERE run_id = ? AND process_index IN ({processes}) {measured} GROUP BY ALL",
        [run_id],
    )
    names = [d[0] for d in result.description]
    # Not strict outside: with no rows the transpose is empty and the fallback applies.
    means = dict(zip(names, map(list, zip(*result.fetchall(), strict=True)), strict=False)) or {n: [] for n in names}
    results = compare(means, primary, alpha=alpha, draws=draws, seed=seed)
    if not timed:
        return run, results
    # The other clock: the same family (same m, same seed), kept only for the time ratios.
    others = (
        compare(means, [_on_clock(s, other) for s in specs], alpha=alpha, draws=draws, seed=seed)
        if other is not None
        else [None] * len(specs)
    )
    return run, [
        replace(r, clock=clock, other=replace(o, clock=other) if o is not None else None)
        if s.metric in TIME_METRICS
        else r
        for s, r, o in zip(specs, results, others, strict=True)
    ]


def _on_clock(spec: Comparison, clock: str) -> Comparison:
    """``spec`` with a step-time metric moved to ``clock``'s column; others unchanged."""
    return replace(spec, metric=clock_column(clock)) if spec.metric in TIME_METRICS else spec


def _has_cpu_times(con: Any, table: str, columns: set[str], run_id: str) -> bool:
    if "cpu_ms" not in columns:
        return False
    return bool(con.execute(f"SELECT count(cpu_ms) FROM {table} WHERE run_id = ?", [run_id]).fetchone()[0])


def comparisons_of(config_yaml: str | None) -> list[Any]:
    """The prespecified comparisons a run declared, from its recorded config
    (``runs.config_yaml``'s ``cohort.comparisons``): never today's YAML, which may have
    changed since the run. ``[]`` without a config or a cohort section."""
    if not config_yaml:
        return []
    config = OmegaConf.create(config_yaml)
    if "cohort" not in config or config.cohort.get("comparisons") is None:
        return []
    return OmegaConf.to_container(config.cohort.comparisons, resolve=True)


def declared_clock_of(config_yaml: str | None) -> str:
    """The clock a run's comparisons use, from its recorded config (``runs.config_yaml``).

    ``cohort.comparisons_clock`` if set, else ``cpu`` on a one-thread CPU profile and
    ``wall`` otherwise (``stateaware.clocks.declared_clock``); ``wall`` without a config.
    """
    doc = config_of(config_yaml)
    return declared_clock(doc.get("cohort") or {}, doc.get("hardware") or {})
