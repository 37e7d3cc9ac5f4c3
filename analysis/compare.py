"""``python -m stateaware.analysis compare RUN_A RUN_B``: how run B differs from run A.

What ``pyperf compare_to`` gives its users, on our records: per method (and per workload
cell, where a cohort has several), the ratio of B's to A's measured step time with a
bootstrap interval, marked where the interval excludes 1.

The estimand is the ratio of geometric means of per-process means (a process is the unit,
its steps are averaged first, as everywhere in the analysis):

- **paired** when both runs have exactly the same process indices for that method and
  cell: the geometric mean of the per-process ratios ``B_i / A_i`` with the paired process
  bootstrap of :func:`stateaware.analysis.stats.paired_ratio` — the same inference as the
  prespecified comparisons. Pairing by index is what a re-run of one cohort means (same
  seeds, same process parameters);
- **unpaired** otherwise: ``exp(mean log B - mean log A)`` with an independent bootstrap of
  each run's processes (``scipy.stats.bootstrap``, ``paired=False``).

Every row's interval is taken at the Bonferroni level ``1 - alpha/m`` over the ``m`` rows
printed, so "excludes 1" holds for the whole table at family-wise level ``alpha``.
A side with fewer than two processes gives the ratio without an interval.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stateaware.analysis.stats import ALPHA, DRAWS, MIN_PROCESSES, bonferroni_confidence, paired_ratio

__all__ = ["RunComparison", "compare_runs", "format_comparisons", "main"]

#: Per-step metrics a comparison may use (columns of ``timings``).
METRICS = ("step_ms", "cpu_ms", "peak_allocated_bytes", "peak_reserved_bytes")


@dataclass(frozen=True)
class RunComparison:
    """One row: method ``method`` in ``cell`` of run B against run A."""

    cell: str
    method: str
    metric: str
    a_mean: float  # arithmetic mean of A's per-process means
    b_mean: float
    ratio: float  # B / A, geometric
    lower: float | None  # None when a side has fewer than MIN_PROCESSES processes
    upper: float | None
    confidence: float
    paired: bool
    a_processes: int
    b_processes: int

    @property
    def verdict(self) -> str:
        """``slower``/``faster`` (for a time; ``larger``/``smaller`` otherwise) when the
        interval excludes 1, ``same`` when it contains 1, ``—`` without an interval."""
        if self.lower is None or self.upper is None:
            return "—"
        up, down = ("slower", "faster") if self.metric.endswith("_ms") else ("larger", "smaller")
        return up if self.lower > 1.0 else down if self.upper < 1.0 else "same"


def _per_process_means(con: Any, run_id: str, metric: str) -> dict[tuple[str, str], dict[int, float]]:
    """``{(cell, method): {process_index: mean of metric over measured steps}}`` for one run."""
    rows = con.execute(
        f"SELECT coalesce(cell, workload, '') AS cell, method, process_index, avg({metric}) "
        f"FROM timings WHERE run_id = ? AND NOT warmup AND {metric} IS NOT NULL "
        f"GROUP BY ALL",
        [run_id],
    ).fetchall()
    out: dict[tuple[str, str], dict[int, float]] = {}
    for cell, method, process, mean in rows:
        out.setdefault((cell, method), {})[int(process)] = float(mean)
    return out


def _unpaired(a: np.ndarray, b: np.ndarray, *, draws: int, confidence: float, seed: int) -> tuple[float, float, float]:
    from scipy.stats import bootstrap  # imported here: scipy.stats costs ~0.3 s to import

    log_a, log_b = np.log(a), np.log(b)
    estimate = float(np.exp(log_b.mean() - log_a.mean()))
    if np.all(log_a == log_a[0]) and np.all(log_b == log_b[0]):
        return estimate, estimate, estimate  # every resample is the same: a point interval

    def statistic(lb: np.ndarray, la: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.exp(lb.mean(axis=axis) - la.mean(axis=axis))

    result = bootstrap(
        (log_b, log_a),
        statistic,
        paired=False,
        vectorized=True,
        n_resamples=draws,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return estimate, float(result.confidence_interval.low), float(result.confidence_interval.high)


def compare_runs(
    results: Path | str,
    run_a: str,
    run_b: str,
    *,
    metric: str = "step_ms",
    alpha: float = ALPHA,
    draws: int = DRAWS,
    seed: int = 0,
) -> list[RunComparison]:
    """Every (cell, method) that both runs timed, B against A (see the module docstring).

    Raises ``ValueError`` naming the problem when a run id is not in ``results``, when
    ``metric`` is not one of :data:`METRICS`, or when the two runs share no timed method.
    """
    from stateaware.analysis.views import connect

    if metric not in METRICS:
        raise ValueError(f"--metric {metric!r} is not a timing metric; choose one of {', '.join(METRICS)}")
    con = connect(results, run_ids=[run_a, run_b])
    columns = {name for name, *_ in con.execute("DESCRIBE timings").fetchall()}
    if metric not in columns:
        raise ValueError(
            f"--metric {metric!r}: the timings in {results} have no such column (records of an older "
            f"schema); choose one of {', '.join(m for m in METRICS if m in columns)}"
        )
    present = {r for (r,) in con.execute("SELECT DISTINCT run_id FROM timings").fetchall()}
    for run in (run_a, run_b):
        if run not in present:
            known = connect(results).execute("SELECT DISTINCT run_id FROM timings ORDER BY 1").fetchall()
            raise ValueError(
                f"run {run!r} has no timing rows in {results}; runs with timings: "
                f"{', '.join(r for (r,) in known) or '(none)'}"
            )
    a_means, b_means = _per_process_means(con, run_a, metric), _per_process_means(con, run_b, metric)
    shared = sorted(set(a_means) & set(b_means))
    if not shared:
        raise ValueError(
            f"runs {run_a!r} and {run_b!r} share no timed (cell, method): "
            f"A has {sorted(a_means)}, B has {sorted(b_means)}"
        )
    confidence = bonferroni_confidence(alpha, len(shared))
    rows = []
    for cell, method in shared:
        a, b = a_means[cell, method], b_means[cell, method]
        paired = set(a) == set(b)
        a_values = np.array([a[p] for p in sorted(a)])
        b_values = np.array([b[p] for p in sorted(b)])
        lower = upper = None
        if paired and len(a) >= MIN_PROCESSES:
            ratio = paired_ratio(b_values, a_values, draws=draws, confidence=confidence, seed=seed)
            estimate, lower, upper = ratio.estimate, ratio.lower, ratio.upper
        elif not paired and min(len(a), len(b)) >= MIN_PROCESSES:
            estimate, lower, upper = _unpaired(a_values, b_values, draws=draws, confidence=confidence, seed=seed)
        else:
            estimate = float(np.exp(np.log(b_values).mean() - np.log(a_values).mean()))
        rows.append(
            RunComparison(
                cell,
                method,
                metric,
                float(a_values.mean()),
                float(b_values.mean()),
                estimate,
                lower,
                upper,
                confidence,
                paired,
                len(a),
                len(b),
            )
        )
    return rows


def format_comparisons(rows: list[RunComparison], run_a: str, run_b: str, fmt: str = "table") -> str:
    """The rows as an aligned text table (``table``) or a JSON list (``json``)."""
    if fmt == "json":
        return json.dumps([{**asdict(r), "verdict": r.verdict} for r in rows], indent=1)
    metric = rows[0].metric if rows else "step_ms"
    header = ["cell", "method", f"A {metric}", f"B {metric}", "B/A", "interval", "processes", ""]
    body = []
    for r in rows:
        interval = f"[{r.lower:.4f}, {r.upper:.4f}]" if r.lower is not None else "n < 2: none"
        processes = f"{r.a_processes} paired" if r.paired else f"{r.a_processes} vs {r.b_processes} unpaired"
        body.append(
            [
                r.cell or "—",
                r.method,
                f"{r.a_mean:.4g}",
                f"{r.b_mean:.4g}",
                f"{r.ratio:.4f}",
                interval,
                processes,
                r.verdict,
            ]
        )
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        f"B = {run_b} against A = {run_a}; intervals at {rows[0].confidence:.2%} each "
        f"(Bonferroni over {len(rows)} rows)"
        if rows
        else f"B = {run_b} against A = {run_a}"
    ]
    lines += [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``compare RUN_A RUN_B [--results DIR] [--metric M] [--draws N] [--format table|json]``."""
    from stateaware.analysis.arguments import results_dir

    from stateaware.exits import OneLineParser

    parser = OneLineParser(
        prog="python -m stateaware.analysis compare",
        description="per method, the ratio of run B to run A with a bootstrap interval",
    )
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline run id")
    parser.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        metavar="DIR",
        help="results directory (default: $STATEAWARE_RESULTS or ./results)",
    )
    parser.add_argument("--metric", default="step_ms", choices=METRICS, help="timing column (default: step_ms)")
    parser.add_argument("--alpha", type=float, default=ALPHA, help=f"family-wise level (default: {ALPHA})")
    parser.add_argument("--draws", type=int, default=DRAWS, help=f"bootstrap draws (default: {DRAWS:,})")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    args = parser.parse_args(argv)
    try:
        rows = compare_runs(
            results_dir(args.results), args.run_a, args.run_b, metric=args.metric, alpha=args.alpha, draws=args.draws
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_comparisons(rows, args.run_a, args.run_b, args.format))
    return 0
