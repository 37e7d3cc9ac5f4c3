"""``python -m stateaware.analysis compare RUN_A RUN_B``: how run B differs from run A.

What ``pyperf compare_to`` gives its users, on our records: per method (and per workload
cell, where a cohort has several), the ratio of B's to A's measured step time with a
bootstrap interval, marked where the interval excludes 1.

The estimand is the ratio of geometric means of per-process means (a process is the unit,
its steps are averaged first, as everywhere in the analysis):

- **paired** when both runs have exactly the same process indices for that method and
  cell: the geometric mean of the per-process ratios ``B_i / A_i`` with the paired process
  bootstrap of ``stateaware.analysis.stats.estimators.paired_ratio`` — the same inference as the
  prespecified comparisons. Pairing by index is what a re-run of one cohort means (same
  seeds, same process parameters);
- **unpaired** otherwise: ``exp(mean log B - mean log A)`` with an independent bootstrap of
  each run's processes (``scipy.stats.bootstrap``, ``paired=False``).

Every row's interval is taken at the Bonferroni level ``1 - alpha/m`` over the ``m`` rows
printed, so "excludes 1" holds for the whole table at family-wise level ``alpha``.
A side with fewer than two processes gives the ratio without an interval.

The metric, unless ``--metric`` names one, is the runs' declared clock
(``stateaware.clocks``: the column of the clock each run's recorded cohort and hardware
config declare); two runs that declare different clocks are refused, since their ratio
would mix a wall time with a CPU time.

Each row's verdict (``verdict_of``, ``VERDICTS``), with ``d`` the equivalence
margin (``--equivalence``, default 2 %):

================  ===========================================================================
``unreliable``    either run has more than a quarter of the row's processes flagged
                  ``loaded`` or ``waited`` (for the method), or the method is flagged
                  ``unstable`` in either run (``stateaware.analysis.stats.stability``): the interval
                  describes a disturbed machine, not the program
``slower``        the interval lies above 1 (``larger`` for a metric that is not a time)
``faster``        the interval lies below 1 (``smaller`` for a metric that is not a time)
``same``          the interval contains 1 and lies within ``[1 - d, 1 + d]``
``inconclusive``  the interval contains 1 but reaches past ``1 - d`` or ``1 + d``
``—``             no interval (a side with fewer than two processes)
================  ===========================================================================

A difference the interval resolves stays ``slower``/``faster`` even when it is smaller than
``d``: the interval says the change is real, the ratio beside it says how small it is.

Each row's verdict comes with its reason on the same line (``RunComparison.reason``: the
flags of an ``unreliable`` row, what would settle an ``inconclusive`` one), and the advice
under an unreliable table knows how the runs were launched: two runs launched apart are
pointed to an interleaved comparison (``compare_to=``); the two sides of one (their ``runs``
rows share a ``pair_id``) to what interleaving cannot give — a quieter machine, pinned
cores, more processes.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from stateaware.analysis.stats.comparisons import declared_clock_of
from stateaware.analysis.stats.estimators import ALPHA, DRAWS, MIN_PROCESSES, bonferroni_confidence, paired_ratio
from stateaware.analysis.stats.stability import flags
from stateaware.analysis.store.views import connect

from stateaware.clocks import CLOCKS

__all__ = [
    "EQUIVALENCE",
    "VERDICTS",
    "SideStability",
    "RunComparison",
    "verdict_of",
    "parse_equivalence",
    "compare_runs",
    "format_comparisons",
]

#: Per-step metrics a comparison may use (columns of ``timings``).
METRICS = ("step_ms", "cpu_ms", "peak_allocated_bytes", "peak_reserved_bytes")

#: The default equivalence margin ``d``: an interval within ``[0.98, 1.02]`` that contains 1
#: is ``same``. 2 % is the size of the effects the prespecified ratios resolve on a quiet
#: machine (``stateaware.analysis.stats.stability.MAX_CV``), so a tighter "same" would claim more
#: than a re-run of the same code can show.
EQUIVALENCE = 0.02

#: Every verdict a row can have (the fixed interface of ``compare``'s table and JSON).
VERDICTS = ("faster", "slower", "smaller", "larger", "same", "inconclusive", "unreliable", "—")

#: More than this share of a side's processes flagged ``loaded`` or ``waited`` makes a row
#: unreliable. One disturbed process in a handful moves a geometric mean little, and the
#: process bootstrap already widens the interval for it; past a quarter the disturbance is
#: the run's condition, not an outlier, and the interval describes that condition.
MAX_DISTURBED_SHARE = 0.25

#: How to get timings the verdict can rest on (docs/measurement.md), for two runs launched apart.
CLEAN_RUN = (
    "for a clean run use a quiet machine, pinned cores (launcher.cpus=N) or an interleaved comparison "
    "(python -m stateaware cohort=NAME compare_to=REV: A's and B's processes alternate, so one load "
    "falls on both)"
)

#: The same, for the two sides of an interleaved comparison (``compare_to=``): interleaving is
#: what was just run, so advising it again would send the user round in a circle. What is left
#: is fewer disturbed processes (a quieter machine, pinned cores) or more pairs to rest on.
CLEAN_PAIR = (
    "the pair was already interleaved (its processes alternated, so the load fell on both sides); what "
    "would help: a quieter machine, pinned cores (launcher.cpus=N) or more processes (processes=N, more "
    "pairs to rest on)"
)


@dataclass(frozen=True)
class SideStability:
    """What one run's stability flags say about one compared row (one method's processes).

    ``processes`` are the row's process indices on this side; ``loaded``, ``waited`` and
    ``unstable`` the indices among them flagged so (``waited`` and ``unstable`` for this
    method; ``loaded`` is a process-level flag).
    """

    side: str  # "A" or "B"
    run_id: str
    method: str
    processes: frozenset[int]
    loaded: frozenset[int] = frozenset()
    waited: frozenset[int] = frozenset()
    unstable: frozenset[int] = frozenset()

    @property
    def disturbed(self) -> frozenset[int]:
        """The row's processes flagged ``loaded`` or ``waited`` (a process counts once)."""
        return (self.loaded | self.waited) & self.processes

    def reasons(self) -> list[str]:
        """Why this side makes the row unreliable (``[]`` when it does not), e.g.
        ``run B: 3 of 6 processes loaded``."""
        out = []
        n, total = len(self.disturbed), len(self.processes)
        # "more than a quarter", in integers: exactly a quarter is not unreliable
        if total and n > MAX_DISTURBED_SHARE * total:
            loaded, waited = self.loaded & self.processes, self.waited & self.processes
            if not waited:
                what = "loaded"
            elif not loaded:
                what = f"waited (method {self.method})"
            else:
                what = f"loaded or waited ({len(loaded)} loaded, {len(waited)} waited on method {self.method})"
            out.append(f"run {self.side}: {n} of {total} processes {what}")
        unstable = self.unstable & self.processes
        if unstable:
            out.append(f"run {self.side}: method {self.method} unstable in {len(unstable)} of {total} processes")
        return out


def verdict_of(
    lower: float | None,
    upper: float | None,
    metric: str,
    equivalence: float = EQUIVALENCE,
    stability: Sequence[SideStability] = (),
) -> str:
    """The verdict of one row: one of ``VERDICTS`` (the table in the module docstring).

    ``lower``/``upper`` bound the ratio B/A (``None``: no interval, ``—``); ``metric`` decides
    the words (a ``*_ms`` time: ``slower``/``faster``, else ``larger``/``smaller``);
    ``equivalence`` is the margin ``d`` (``0 < d < 1``); ``stability`` the flags of each side
    (``SideStability``; empty: reliable). Precedence: ``—``, then ``unreliable``, then
    an interval excluding 1, then ``same``/``inconclusive``.
    """
    if lower is None or upper is None:
        return "—"
    if any(side.reasons() for side in stability):
        return "unreliable"
    up, down = ("slower", "faster") if metric.endswith("_ms") else ("larger", "smaller")
    if lower > 1.0:
        return up
    if upper < 1.0:
        return down
    return "same" if 1.0 - equivalence <= lower and upper <= 1.0 + equivalence else "inconclusive"


def parse_equivalence(text: str) -> float:
    """``--equivalence``: ``"2%"`` or ``"0.02"`` -> ``0.02``; ``0 < d < 1`` (below 100 %).

    Raises ``argparse.ArgumentTypeError`` naming the allowed forms for anything else (so
    ``"2"``, which could mean 2 % or 200 %, is refused rather than guessed).
    """
    allowed = f"allowed forms are a percentage like 2% or a fraction like 0.02, above 0 and below 100%; got {text!r}"
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(allowed) from None
    if not math.isfinite(value) or not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(allowed)
    return value


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
    equivalence: float = EQUIVALENCE
    stability: tuple[SideStability, ...] = ()  # A's and B's flags for this row
    clock: str | None = None  # wall | cpu for a step-time metric, None otherwise
    clock_basis: str = "chosen with --metric"  # why this metric: the runs' declared clock, --metric, ...
    interleaved: bool = False  # the two runs are the sides of one interleaved comparison (compare_to=)

    @property
    def verdict(self) -> str:
        """``verdict_of`` this row's interval, metric, margin and flags."""
        return verdict_of(self.lower, self.upper, self.metric, self.equivalence, self.stability)

    @property
    def reason(self) -> str:
        """Why the row has its verdict, in words, and for an ``inconclusive`` row what would
        settle it; e.g. ``interval above 1`` or ``run B: 3 of 6 processes loaded``."""
        verdict, margin = self.verdict, f"±{self.equivalence * 100:.4g}%"
        if verdict == "—":
            return f"a side has fewer than {MIN_PROCESSES} processes: no interval"
        if verdict == "unreliable":
            return "; ".join(self.unreliable_because)
        if verdict == "same":
            return f"interval contains 1, within {margin}"
        if verdict == "inconclusive":
            return f"interval contains 1 but reaches past {margin}: more processes (processes=N) would narrow it"
        return "interval above 1" if self.lower is not None and self.lower > 1.0 else "interval below 1"

    @property
    def unreliable_because(self) -> list[str]:
        """The flags that make the row ``unreliable`` (``[]`` when it is not)."""
        if self.verdict != "unreliable":
            return []
        return [reason for side in self.stability for reason in side.reasons()]


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
    from scipy.stats import bootstrap  # lazy: scipy.stats costs ~0.3 s to import and only the bootstrap needs it

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


def _declared_metric(con: Any, run_a: str, run_b: str, columns: set[str]) -> tuple[str, str, str]:
    """``(metric, clock, basis)`` of the runs' declared clock (NOTE [ The declared clock ]).

    Raises ``ValueError`` when the runs declare different clocks or a run recorded a clock
    this code does not know; both messages say how ``--metric`` settles it.
    """
    recorded = dict(
        con.execute(
            "SELECT run_id, first(config_yaml ORDER BY started_at DESC NULLS LAST) FROM runs GROUP BY run_id"
        ).fetchall()
    )
    choose = f"choose one with --metric {' or --metric '.join(CLOCKS.values())}"
    declared: dict[str, str] = {}
    for side, run in (("A", run_a), ("B", run_b)):
        try:
            declared[side] = declared_clock_of(recorded.get(run))  # wall without a manifest
        except ValueError as exc:
            raise ValueError(f"run {side} {run!r}: {exc}; {choose}") from None
    if declared["A"] != declared["B"]:
        raise ValueError(
            f"run A {run_a!r} declares the {declared['A']} clock ({CLOCKS[declared['A']]}) and run B {run_b!r} "
            f"the {declared['B']} clock ({CLOCKS[declared['B']]}): their ratio would mix two clocks; {choose}"
        )
    clock = declared["A"]
    column = CLOCKS[clock]
    if clock != "wall":
        # Records from before CPU times were kept: wall time, the clock every row has (as the
        # prespecified comparisons fall back), and the header says so.
        missing = [
            run
            for run in dict.fromkeys((run_a, run_b))
            if column not in columns
            or not con.execute(
                f"SELECT count({column}) FROM timings WHERE run_id = ? AND NOT warmup", [run]
            ).fetchone()[0]
        ]
        if missing:
            return (
                CLOCKS["wall"],
                "wall",
                f"the runs declare the {clock} clock, but {', '.join(missing)} recorded no {column}",
            )
    return column, clock, "the cohort's declared clock"


def _stability(con: Any, run_a: str, run_b: str) -> dict[tuple[str, str], dict[str, set[int]]]:
    """``{(run_id, kind or kind/method): process indices}`` of every stability flag of the two runs."""
    found: dict[tuple[str, str], dict[str, set[int]]] = {}
    for flag in flags(con):  # each run's own thresholds, from its recorded config
        if flag.run_id in (run_a, run_b):
            key = (flag.run_id, flag.method or "")
            found.setdefault(key, {}).setdefault(flag.kind, set()).add(flag.process_index)
    return found


def _interleaved(con: Any, run_a: str, run_b: str) -> bool:
    """Whether ``run_a`` and ``run_b`` are the two sides of one interleaved comparison: their
    ``runs`` rows share a ``pair_id`` and name different sides (records from before pairs were
    kept have no such columns: not interleaved)."""
    columns = {name for name, *_ in con.execute("DESCRIBE runs").fetchall()}
    if not {"pair_id", "side"} <= columns:
        return False
    found = dict(
        con.execute(
            "SELECT run_id, (first(pair_id), first(side)) FROM runs WHERE run_id IN (?, ?) GROUP BY run_id",
            [run_a, run_b],
        ).fetchall()
    )
    (pair_a, side_a), (pair_b, side_b) = found.get(run_a, (None, None)), found.get(run_b, (None, None))
    return pair_a is not None and pair_a == pair_b and side_a != side_b


def compare_runs(
    results: Path | str,
    run_a: str,
    run_b: str,
    *,
    metric: str | None = None,
    alpha: float = ALPHA,
    draws: int = DRAWS,
    seed: int = 0,
    equivalence: float = EQUIVALENCE,
) -> list[RunComparison]:
    """Every (cell, method) that both runs timed, B against A (see the module docstring).

    ``metric`` ``None`` compares on the runs' declared clock; ``equivalence`` is the margin
    of ``same`` (``0 < d < 1``). Raises ``ValueError`` naming the problem when a run id is
    not in ``results``, when ``metric`` is not one of ``METRICS``, when ``metric`` is
    ``None`` and the runs declare different clocks, when ``equivalence`` is out of range, or
    when the two runs share no timed method.
    """
    if metric is not None and metric not in METRICS:
        raise ValueError(f"--metric {metric!r} is not a timing metric; choose one of {', '.join(METRICS)}")
    if not 0.0 < equivalence < 1.0:
        raise ValueError(f"--equivalence {equivalence!r}: allowed values are above 0 and below 1 (100%)")
    con = connect(results, run_ids=[run_a, run_b])
    columns = {name for name, *_ in con.execute("DESCRIBE timings").fetchall()}
    if metric is not None and metric not in columns:
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
    clock: str | None  # wall | cpu; None for a metric that is not a step time
    if metric is None:
        metric, clock, basis = _declared_metric(con, run_a, run_b, columns)
    else:
        clock = next((c for c, column in CLOCKS.items() if column == metric), None)
        basis = "chosen with --metric"
    a_means, b_means = _per_process_means(con, run_a, metric), _per_process_means(con, run_b, metric)
    shared = sorted(set(a_means) & set(b_means))
    if not shared:
        raise ValueError(
            f"runs {run_a!r} and {run_b!r} share no timed (cell, method): "
            f"A has {sorted(a_means)}, B has {sorted(b_means)}"
        )
    flagged = _stability(con, run_a, run_b)
    interleaved = _interleaved(con, run_a, run_b)
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
        stability = tuple(
            SideStability(
                side,
                run,
                method,
                frozenset(processes),
                loaded=frozenset(flagged.get((run, ""), {}).get("loaded", ())),
                waited=frozenset(flagged.get((run, method), {}).get("waited", ())),
                unstable=frozenset(flagged.get((run, method), {}).get("unstable", ())),
            )
            for side, run, processes in (("A", run_a, a), ("B", run_b, b))
        )
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
                equivalence=equivalence,
                stability=stability,
                clock=clock,
                clock_basis=basis,
                interleaved=interleaved,
            )
        )
    return rows


def _json_row(r: RunComparison) -> dict[str, Any]:
    """A row as JSON: the fields (but not the raw flag sets), its verdict, the verdict's reason
    and, when unreliable, the flags behind it."""
    out = {f.name: getattr(r, f.name) for f in fields(r) if f.name != "stability"}
    out["verdict"] = r.verdict
    out["reason"] = r.reason
    if out["verdict"] == "unreliable":
        out["unreliable_because"] = r.unreliable_because
    return out


def _clock_line(r: RunComparison) -> str:
    """``clock: cpu (cpu_ms), the cohort's declared clock`` (or the metric, for a non-time one)."""
    if r.clock is None:
        return f"metric: {r.metric}, {r.clock_basis}"
    return f"clock: {r.clock} ({r.metric}), {r.clock_basis}"


def _run_flags(unreliable: list[RunComparison]) -> list[tuple[str, str]]:
    """``[(side, its flags in words)]`` for each run that makes one of the ``unreliable`` rows so.

    One line per run, not per row: a loaded run disturbs every row alike, and a user fixes
    the run, not the row. A run's line names all its flags on those rows' processes, e.g.
    ``3 of 6 processes loaded; joint unstable in 1 of 6 processes``.
    """
    out = []
    for side in ("A", "B"):
        mine = [s for r in unreliable for s in r.stability if s.side == side]
        if not any(s.reasons() for s in mine):
            continue  # this run's flags (if any) made no row unreliable: the other run did
        processes = frozenset().union(*(s.processes for s in mine))
        loaded = frozenset().union(*(s.loaded & s.processes for s in mine))
        parts = [f"{len(loaded)} of {len(processes)} processes loaded"] if loaded else []
        for kind in ("waited", "unstable"):
            for method in dict.fromkeys(s.method for s in mine):
                of_method = [s for s in mine if s.method == method]
                hit = frozenset().union(*(getattr(s, kind) & s.processes for s in of_method))
                total = len(frozenset().union(*(s.processes for s in of_method)))
                if hit:
                    parts.append(f"method {method} {kind} in {len(hit)} of {total} processes")
        out.append((side, "; ".join(parts)))
    return out


def format_comparisons(rows: list[RunComparison], run_a: str, run_b: str, fmt: str = "table") -> str:
    """The rows as an aligned text table (``table``) or a JSON list (``json``).

    The table's first line says whether the two runs were interleaved, its second names the
    clock (or metric) compared and why; every column has a header, the ``cell`` column only
    when a row has a cell; each row ends with its verdict and the verdict's reason. Below the
    table, one line per run that makes a row ``unreliable``, naming its flags and what would
    give a clean run — for an interleaved pair, what is left to try beyond interleaving.
    Each JSON row carries ``verdict``, ``reason``, ``equivalence``, ``clock``,
    ``interleaved`` and, for an unreliable row, ``unreliable_because``.
    """
    if fmt == "json":
        return json.dumps([_json_row(r) for r in rows], indent=1)
    metric = rows[0].metric if rows else "step_ms"
    with_cells = any(r.cell for r in rows)  # a cohort without cells has no cell column at all
    header = ["cell"] * with_cells + ["method", f"A {metric}", f"B {metric}", "B/A", "interval", "processes"]
    header += ["verdict", "because"]
    body = []
    for r in rows:
        interval = f"[{r.lower:.4f}, {r.upper:.4f}]" if r.lower is not None else "n < 2: none"
        processes = f"{r.a_processes} paired" if r.paired else f"{r.a_processes} vs {r.b_processes} unpaired"
        body.append(
            [r.cell or "—"] * with_cells
            + [r.method, f"{r.a_mean:.4g}", f"{r.b_mean:.4g}", f"{r.ratio:.4f}", interval, processes]
            + [r.verdict, r.reason]
        )
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    interleaved = bool(rows) and rows[0].interleaved
    pairing = " (an interleaved pair)" if interleaved else ""
    lines = [
        f"B = {run_b} against A = {run_a}{pairing}; intervals at {rows[0].confidence:.2%} each "
        f"(Bonferroni over {len(rows)} rows)"
        if rows
        else f"B = {run_b} against A = {run_a}"
    ]
    if rows:
        lines.append(
            f"{_clock_line(rows[0])}; same: an interval containing 1 within ±{rows[0].equivalence * 100:.4g}% "
            f"of it (--equivalence)"
        )
    lines += [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]
    ]
    advice = CLEAN_PAIR if interleaved else CLEAN_RUN
    lines += [
        f"unreliable: run {side} = {run_a if side == 'A' else run_b}: {text} "
        f"(python -m stateaware.analysis check --run-id {run_a if side == 'A' else run_b}); {advice}"
        for side, text in _run_flags([r for r in rows if r.verdict == "unreliable"])
    ]
    return "\n".join(lines)
