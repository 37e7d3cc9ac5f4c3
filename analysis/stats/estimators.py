"""Paired geometric-mean ratios with a process bootstrap and Bonferroni-adjusted intervals.

The inference the paper uses for every prespecified comparison (§11, Table 8):

* the **unit is a process**. A method's value in a process is the mean over that process's
  measured steps, so the 1,000 steps of one launch count once, never as 1,000 samples;
* method A is compared with method B **within** each process: ``r_i = A_i / B_i``;
* the point estimate is the **geometric mean** of the ``r_i`` over processes;
* the interval is a **paired process-bootstrap percentile** interval: processes are drawn
  with replacement (A and B of a process travel together) and the geometric mean is
  recomputed per draw — 20,000 draws by default, seeded, the seed recorded;
* with ``m`` prespecified comparisons in a cohort each interval is taken at the
  Bonferroni level ``1 - alpha/m`` (``m = 2``, ``alpha = 0.05``: 97.5 %).

Identical observed ratios (e.g. allocator peaks that repeat exactly in every process) give a
point interval ``lower == upper == estimate``. That reflects the observed values, not an
absence of population uncertainty (the paper says the same under Table 8).

Heavy imports (``scipy.stats``, ``pyarrow.compute``) happen inside the functions that use
them: ``python -m stateaware.analysis sql ...`` imports this package and must start fast.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ALPHA",
    "DRAWS",
    "MIN_PROCESSES",
    "Ratio",
    "Comparison",
    "ComparisonResult",
    "paired_ratio",
    "bonferroni_confidence",
    "process_means",
    "compare",
    "interval_cells",
]

#: Family-wise error rate before the Bonferroni split (the paper's 0.05).
ALPHA = 0.05
#: Bootstrap draws per interval (the paper's 20,000). Monte-Carlo error of a 97.5 %
#: percentile bound at this count is well below the fourth significant digit the paper prints.
DRAWS = 20_000
#: A bootstrap over one process can only return that process's ratio; two is the least
#: sample for which an interval says anything, so fewer is an error, not a point interval.
MIN_PROCESSES = 2


@dataclass(frozen=True)
class Ratio:
    """A geometric-mean ratio and its paired process-bootstrap percentile interval.

    ``confidence`` is the two-sided level the interval was taken at (already Bonferroni
    adjusted when it came from ``compare``); ``processes`` the number of paired
    processes; ``draws`` and ``seed`` reproduce the interval exactly.
    """

    estimate: float
    lower: float
    upper: float
    confidence: float
    draws: int
    processes: int
    seed: int


@dataclass(frozen=True)
class Comparison:
    """One prespecified comparison: ``numerator`` / ``denominator`` methods on ``metric``.

    ``metric`` names a column of the long table given to ``compare`` (``step_ms``,
    ``peak_allocated_bytes``, ...). ``where`` restricts the rows first, as
    ``((column, value), ...)`` pairs that must all match — e.g. ``(("workload",
    "feature_queue"),)`` in the three-workload cohort, whose processes each run one workload.
    ``name`` defaults to ``"<numerator>/<denominator> <metric>"`` plus the ``where`` values.
    """

    numerator: str
    denominator: str
    metric: str
    where: tuple[tuple[str, Any], ...] = ()
    name: str | None = None

    _KEYS = ("numerator", "denominator", "metric", "where", "name")

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        suffix = "".join(f" {column}={value}" for column, value in self.where)
        return f"{self.numerator}/{self.denominator} {self.metric}{suffix}"

    @classmethod
    def coerce(cls, spec: Comparison | Mapping[str, Any] | Sequence[Any]) -> Comparison:
        """A ``Comparison`` from itself, a mapping (a cohort config entry) or a tuple.

        A mapping takes the keys ``numerator, denominator, metric`` and optionally ``where``
        (a mapping ``{column: value}``) and ``name``; a tuple is ``(numerator, denominator,
        metric)``.
        """
        if isinstance(spec, Comparison):
            return spec
        if isinstance(spec, Mapping):
            unknown = sorted(set(spec) - set(cls._KEYS))
            missing = [k for k in ("numerator", "denominator", "metric") if k not in spec]
            if unknown or missing:
                raise ValueError(
                    f"comparison {dict(spec)!r}: unknown key(s) {unknown}, missing key(s) {missing}; "
                    f"valid keys are: {', '.join(cls._KEYS)} (numerator, denominator, metric required)"
                )
            where = spec.get("where") or {}
            if not isinstance(where, Mapping):
                raise ValueError(f"comparison {dict(spec)!r}: 'where' must be a mapping {{column: value}}")
            return cls(
                numerator=str(spec["numerator"]),
                denominator=str(spec["denominator"]),
                metric=str(spec["metric"]),
                where=tuple(sorted(where.items())),
                name=spec.get("name"),
            )
        if isinstance(spec, Sequence) and not isinstance(spec, str) and len(spec) == 3:
            numerator, denominator, metric = spec
            return cls(str(numerator), str(denominator), str(metric))
        raise ValueError(
            f"comparison {spec!r} must be a Comparison, a mapping with keys "
            "numerator, denominator, metric[, where, name], or a (numerator, denominator, metric) tuple"
        )


@dataclass(frozen=True)
class ComparisonResult:
    """One comparison's ratio at the Bonferroni level ``1 - alpha/m``.

    ``numerator_mean``/``denominator_mean`` are the arithmetic means of the per-process
    means (the paper's Table 7 "time" column), for tables that print them beside the ratio.
    """

    comparison: Comparison
    ratio: Ratio
    alpha: float
    m: int
    numerator_mean: float
    denominator_mean: float
    process_indices: tuple[int, ...] = field(repr=False)
    #: For a step-time comparison, the clock it was computed on (``wall`` or ``cpu``,
    #: ``stateaware.clocks``) and the same comparison on the other clock; None otherwise.
    clock: str | None = None
    other: ComparisonResult | None = field(default=None, repr=False)

    def row(self) -> dict[str, Any]:
        """The result as one flat row (the ``comparisons`` table's columns, less identity)."""
        c, r = self.comparison, self.ratio
        return {
            "comparison": c.label,
            "metric": c.metric,
            "numerator": c.numerator,
            "denominator": c.denominator,
            "subset": json.dumps(dict(c.where), sort_keys=True, default=str) if c.where else None,
            "estimate": r.estimate,
            "lower": r.lower,
            "upper": r.upper,
            "confidence": r.confidence,
            "alpha": self.alpha,
            "m": self.m,
            "draws": r.draws,
            "processes": r.processes,
            "seed": r.seed,
            "numerator_mean": self.numerator_mean,
            "denominator_mean": self.denominator_mean,
            "clock": self.clock,
            "other_clock": self.other.clock if self.other is not None else None,
            "other_estimate": self.other.ratio.estimate if self.other is not None else None,
            "other_lower": self.other.ratio.lower if self.other is not None else None,
            "other_upper": self.other.ratio.upper if self.other is not None else None,
        }


def bonferroni_confidence(alpha: float, m: int) -> float:
    """The two-sided confidence level ``1 - alpha/m`` for each of ``m`` comparisons."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1); got {alpha!r}")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (the number of prespecified comparisons) must be an integer >= 1; got {m!r}")
    return 1.0 - alpha / m


def paired_ratio(
    numerator: np.ndarray,
    denominator: np.ndarray,
    *,
    draws: int = DRAWS,
    confidence: float = 1.0 - ALPHA / 2,
    seed: int = 0,
) -> Ratio:
    """Geometric mean of ``numerator[i] / denominator[i]`` with a paired bootstrap interval.

    ``numerator`` and ``denominator`` hold one value per process, aligned by position (the
    caller aggregates a process's steps into its mean first). Values must be finite and
    positive. The interval is the percentile interval of the geometric mean over ``draws``
    resamples of processes, from ``scipy.stats.bootstrap`` (seeded by ``seed``). When every
    per-process ratio is identical the result is exactly that ratio, as a point interval,
    returned without resampling (every resample would give it); ``draws`` and ``seed`` are
    still recorded as requested.

    Limits: percentile intervals of a mean undercover slightly at small ``n`` (they use the
    plug-in spread, with no ``n/(n-1)`` or *t* correction); at 50 processes the loss is a
    fraction of a percentage point. Fewer than ``MIN_PROCESSES`` processes is an error.
    """
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    if num.ndim != 1 or den.ndim != 1 or num.shape != den.shape:
        raise ValueError(
            f"numerator and denominator must be 1-D per-process arrays of equal length; "
            f"got shapes {num.shape} and {den.shape}"
        )
    n = num.shape[0]
    if n < MIN_PROCESSES:
        raise ValueError(f"a paired process bootstrap needs at least {MIN_PROCESSES} processes; got {n}")
    for name, values in (("numerator", num), ("denominator", den)):
        bad = np.flatnonzero(~np.isfinite(values) | (values <= 0))
        if bad.size:
            raise ValueError(
                f"{name} must be finite and positive (a ratio's logarithm is taken); "
                f"process position(s) {bad[:10].tolist()} hold {values[bad[:10]].tolist()}"
            )
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1); got {confidence!r}")
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 1:
        raise ValueError(f"draws must be a positive integer; got {draws!r}")

    ratios = num / den
    if np.all(ratios == ratios[0]):
        # Every resample is the same multiset of one value; return it exactly rather than
        # exp(mean(log r)), which can differ from r in the last bit.
        value = float(ratios[0])
        return Ratio(value, value, value, float(confidence), int(draws), n, int(seed))

    log_ratios = np.log(ratios)
    estimate = float(np.exp(np.mean(log_ratios)))

    from scipy.stats import bootstrap  # lazy: scipy.stats costs ~0.3 s to import and only the bootstrap needs it

    # Resampling the per-process log-ratios is the paired bootstrap: a process's
    # numerator and denominator enter the statistic only through their ratio, so drawing
    # process indices for (A, B) jointly and drawing ratios are the same resample.
    result = bootstrap(
        (log_ratios,),
        _geometric_mean_of_logs,
        n_resamples=int(draws),
        vectorized=True,
        axis=0,
        confidence_level=float(confidence),
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    lower = float(result.confidence_interval.low)
    upper = float(result.confidence_interval.high)
    return Ratio(estimate, lower, upper, float(confidence), int(draws), n, int(seed))


def _geometric_mean_of_logs(log_ratios: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.exp(np.mean(log_ratios, axis=axis))


def process_means(
    table: Any, metric: str, methods: Sequence[str], where: Sequence[tuple[str, Any]] = ()
) -> dict[str, dict[int, float]]:
    """Per-process means of ``metric`` for each of ``methods``: ``{method: {process: mean}}``.

    ``table`` is a long table (an Arrow table or reader, a DuckDB relation, or a mapping of
    columns) with at least ``process_index``, ``method`` and ``metric``; its rows may be
    steps or already per-process values. Rows with a null ``metric`` are ignored; rows are
    first restricted to ``where`` (``(column, value)`` pairs, all required to match).
    """
    # lazy: pyarrow.compute is slow to import; only the functions reading Arrow tables need it
    import pyarrow as pa
    import pyarrow.compute as pc

    arrow = _as_arrow(table)
    required = ["process_index", "method", metric, *(column for column, _ in where)]
    missing = [c for c in dict.fromkeys(required) if c not in arrow.column_names]
    if missing:
        raise ValueError(f"the long table has no column(s) {missing}; it has: {', '.join(arrow.column_names)}")
    mask = pc.is_in(arrow["method"], value_set=pa.array(list(methods), type=pa.string()))
    for column, value in where:
        mask = pc.and_kleene(mask, pc.equal(arrow[column], pa.scalar(value)))
    mask = pc.and_kleene(mask, pc.is_valid(arrow[metric]))
    rows = arrow.select(["process_index", "method", metric]).filter(mask)
    grouped = rows.group_by(["method", "process_index"]).aggregate([(metric, "mean")])
    out: dict[str, dict[int, float]] = {m: {} for m in methods}
    for method, process, mean in zip(
        grouped["method"].to_pylist(),
        grouped["process_index"].to_pylist(),
        grouped[f"{metric}_mean"].to_pylist(),
        strict=True,
    ):
        out[method][int(process)] = float(mean)
    return out


def compare(
    table: Any,
    comparisons: Sequence[Comparison | Mapping[str, Any] | Sequence[Any]],
    *,
    alpha: float = ALPHA,
    draws: int = DRAWS,
    seed: int = 0,
) -> list[ComparisonResult]:
    """Every prespecified comparison on one run's long table, at level ``1 - alpha/m``.

    ``m = len(comparisons)`` — the whole prespecified family of the cohort, so pass all of
    them in one call. Per comparison, ``metric`` is averaged per process and method (steps
    never count as samples), processes are paired by ``process_index``, and
    ``paired_ratio`` gives the estimate and interval. Every comparison uses the same
    ``seed``: the same process resamples then serve every ratio (common random numbers),
    and the one recorded seed reproduces the whole table.

    Raises ``ValueError`` when the table mixes runs, when a method of a comparison has no
    rows, or when some process has one side of a pair but not the other — verification
    (``stateaware.analysis.store.verify``) should have stopped such a run earlier.
    """
    specs = [Comparison.coerce(c) for c in comparisons]
    if not specs:
        raise ValueError("no comparisons given; pass the cohort's whole prespecified list")
    arrow = _as_arrow(table)
    if "run_id" in arrow.column_names:
        runs = sorted(set(arrow["run_id"].unique().to_pylist()) - {None})
        if len(runs) > 1:
            raise ValueError(
                f"the long table mixes runs {runs}; process indices pair only within one run — "
                "filter to one run_id first"
            )
    m = len(specs)
    level = bonferroni_confidence(alpha, m)
    results = []
    for spec in specs:
        means = process_means(arrow, spec.metric, [spec.numerator, spec.denominator], spec.where)
        num, den = means[spec.numerator], means[spec.denominator]
        for method, side in ((spec.numerator, num), (spec.denominator, den)):
            if not side:
                raise ValueError(f"comparison {spec.label!r}: method {method!r} has no {spec.metric} rows")
        unpaired = sorted(set(num) ^ set(den))
        if unpaired:
            raise ValueError(
                f"comparison {spec.label!r}: process(es) {unpaired[:20]} have rows for only one of "
                f"{spec.numerator!r} and {spec.denominator!r}; every process must run both"
            )
        processes = sorted(num)
        a = np.array([num[p] for p in processes])
        b = np.array([den[p] for p in processes])
        ratio = paired_ratio(a, b, draws=draws, confidence=level, seed=seed)
        results.append(
            ComparisonResult(
                comparison=spec,
                ratio=ratio,
                alpha=float(alpha),
                m=m,
                numerator_mean=float(np.mean(a)),
                denominator_mean=float(np.mean(b)),
                process_indices=tuple(processes),
            )
        )
    return results


def _as_arrow(table: Any):
    """An Arrow table from an Arrow table/reader, a DuckDB relation or a mapping of columns."""
    # lazy: pyarrow only in the functions that read Arrow tables: the estimators load with numpy alone
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table
    if isinstance(table, pa.RecordBatchReader):
        return table.read_all()
    for name in ("to_arrow_table", "fetch_arrow_table"):  # a DuckDB relation or result (2.x, 1.x)
        if hasattr(table, name):
            return getattr(table, name)()
    if isinstance(table, Mapping):
        return pa.table(dict(table))
    raise TypeError(
        f"expected an Arrow table or reader, a DuckDB relation, or a mapping of columns; got {type(table).__name__}"
    )


def interval_cells(lower: float, upper: float, confidence: float, digits: int = 4) -> tuple[str, str]:
    """A ratio's interval and confidence as a report's table cells: ``("[0.7489, 0.9220]", "0.9750")``.

    A point interval (``lower == upper``: every process gave the same ratio) is no bootstrap
    statement at a level, so it reads ``("exact: 0.8955 in every process", "—")`` rather than
    carrying a confidence it does not have.
    """
    if lower == upper:
        return f"exact: {lower:.{digits}f} in every process", "—"
    return f"[{lower:.{digits}f}, {upper:.{digits}f}]", f"{confidence:.4f}"
