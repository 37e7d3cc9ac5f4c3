"""The ratio statistics against independent computations on synthetic cohorts.

Synthetic cohorts have a known ratio: per-process log-ratios are drawn normally around
``log(TRUE_RATIO)``, and each process's steps scatter around its process mean.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from stateaware.analysis.stats import (
    Comparison,
    Ratio,
    bonferroni_confidence,
    compare,
    paired_ratio,
)

TRUE_RATIO = 0.8
SIGMA = 0.05  # spread of per-process log-ratios


def cohort(rng: np.random.Generator, n: int = 50, ratio: float = TRUE_RATIO, sigma: float = SIGMA):
    """Per-process means of a denominator method and a numerator with known ratio."""
    den = rng.uniform(2000.0, 4000.0, n)
    num = den * np.exp(rng.normal(math.log(ratio), sigma, n))
    return num, den


def reference_interval(num, den, confidence, draws, seed):
    """An independent paired process bootstrap: resample process indices, pair A with B."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(draws, len(num)))
    gm = sps.gmean(num[idx] / den[idx], axis=1)
    tail = (1.0 - confidence) / 2.0
    return np.quantile(gm, tail), np.quantile(gm, 1.0 - tail)


def long_table(per_process: dict[str, np.ndarray], steps: int, rng, extra: dict | None = None) -> pa.Table:
    """Step rows whose per-process means are exactly ``per_process`` (zero-mean noise)."""
    cols: dict[str, list] = {"process_index": [], "method": [], "step": [], "step_ms": []}
    for k in extra or {}:
        cols[k] = []
    for method, means in per_process.items():
        for p, mean in enumerate(means):
            noise = rng.normal(0.0, 0.02 * mean, steps)
            noise -= noise.mean()
            cols["process_index"] += [p] * steps
            cols["method"] += [method] * steps
            cols["step"] += list(range(steps))
            cols["step_ms"] += list(mean + noise)
            for k, v in (extra or {}).items():
                cols[k] += [v] * steps
    return pa.table(cols)


def test_the_point_estimate_is_the_geometric_mean_of_process_ratios():
    num, den = cohort(np.random.default_rng(1))
    r = paired_ratio(num, den, draws=2_000, seed=7)
    assert r.estimate == pytest.approx(sps.gmean(num / den), rel=1e-12)
    assert r.estimate == pytest.approx(np.prod(num / den) ** (1 / len(num)), rel=1e-12)
    assert (r.confidence, r.draws, r.processes, r.seed) == (0.975, 2_000, 50, 7)


def test_the_interval_matches_an_independent_paired_bootstrap():
    num, den = cohort(np.random.default_rng(2))
    r = paired_ratio(num, den, draws=20_000, confidence=0.975, seed=0)
    lo, hi = reference_interval(num, den, 0.975, 20_000, seed=12345)
    width = hi - lo
    # Different seeds: the bounds agree to Monte-Carlo error (about 0.5 % of the width
    # per bound at 20,000 draws); 3 % is six of those.
    assert r.lower == pytest.approx(lo, abs=0.03 * width)
    assert r.upper == pytest.approx(hi, abs=0.03 * width)
    assert r.lower < r.estimate < r.upper


def test_the_interval_width_follows_the_normal_theory_width():
    num, den = cohort(np.random.default_rng(3), n=50)
    logs = np.log(num / den)
    for confidence in (0.975, bonferroni_confidence(0.05, 6)):
        r = paired_ratio(num, den, draws=20_000, confidence=confidence, seed=1)
        z = sps.norm.ppf(1 - (1 - confidence) / 2)
        # The bootstrap spreads the mean with the plug-in deviation (ddof = 0).
        expected = 2 * z * logs.std(ddof=0) / math.sqrt(len(logs))
        assert math.log(r.upper / r.lower) == pytest.approx(expected, rel=0.05)


def test_bonferroni_levels_for_two_and_six_comparisons():
    assert bonferroni_confidence(0.05, 2) == pytest.approx(0.975, abs=1e-15)
    assert bonferroni_confidence(0.05, 6) == pytest.approx(1 - 0.05 / 6, abs=1e-15)
    assert bonferroni_confidence(0.05, 1) == pytest.approx(0.95, abs=1e-15)
    for bad in ((0.05, 0), (0.0, 2), (1.0, 2), (0.05, 2.5)):
        with pytest.raises(ValueError):
            bonferroni_confidence(*bad)


def test_compare_takes_every_interval_at_one_minus_alpha_over_m():
    rng = np.random.default_rng(4)
    num, den = cohort(rng)
    table = long_table({"regions": num, "whole": den}, steps=5, rng=rng)
    pair = ("regions", "whole", "step_ms")
    two = compare(table, [pair, ("whole", "regions", "step_ms")], draws=20_000, seed=3)
    six = compare(table, [pair] * 6, draws=20_000, seed=3)
    assert [r.ratio.confidence for r in two] == [0.975] * 2
    assert [r.m for r in six] == [6] * 6
    assert six[0].ratio.confidence == pytest.approx(1 - 0.05 / 6)
    # Each result is paired_ratio at the adjusted level (to the rounding of the step means).
    for got, level in ((two[0].ratio, 0.975), (six[0].ratio, 1 - 0.05 / 6)):
        want = paired_ratio(num, den, draws=20_000, confidence=level, seed=3)
        assert (got.estimate, got.lower, got.upper) == pytest.approx((want.estimate, want.lower, want.upper), rel=1e-12)
        assert (got.confidence, got.draws, got.processes, got.seed) == (want.confidence, 20_000, 50, 3)
    # Six comparisons widen every interval by about z(1 - .05/12) / z(1 - .05/4).
    w2 = math.log(two[0].ratio.upper / two[0].ratio.lower)
    w6 = math.log(six[0].ratio.upper / six[0].ratio.lower)
    assert w6 / w2 == pytest.approx(sps.norm.ppf(1 - 0.05 / 12) / sps.norm.ppf(1 - 0.05 / 4), rel=0.05)


@pytest.mark.parametrize("confidence", [0.90, 0.975])
def test_coverage_over_simulated_cohorts_is_close_to_nominal(confidence):
    rng = np.random.default_rng(5 if confidence == 0.90 else 6)
    cohorts = 1000
    covered = 0
    for k in range(cohorts):
        num, den = cohort(rng)
        r = paired_ratio(num, den, draws=500, confidence=confidence, seed=k)
        covered += r.lower <= TRUE_RATIO <= r.upper
    # Percentile intervals of a mean at n = 50 undercover a little: the plug-in spread and
    # normal rather than t quantiles cost about a point at 90 %, and 500 draws blur the
    # tails by about half a point more. The band adds three binomial standard errors and
    # excludes what a mis-set level would give (0.95 for 0.90, or 0.95 for 0.975).
    se = math.sqrt(confidence * (1 - confidence) / cohorts)
    assert confidence - 0.015 - 3 * se <= covered / cohorts <= confidence + 3 * se


def test_six_bonferroni_intervals_cover_jointly():
    rng = np.random.default_rng(7)
    cohorts, workloads = 150, ("queue", "prototype", "recurrence")
    all_covered = 0
    for k in range(cohorts):
        tables = []
        truths = {}
        for w, ratio in zip(workloads, (0.4, 0.6, 0.5), strict=True):
            num, den = cohort(rng, ratio=ratio)
            peak_num, peak_den = cohort(rng, ratio=ratio / 8)
            t = pa.table(
                {
                    "process_index": np.arange(50).repeat(2),
                    "method": np.tile(["regions", "whole"], 50),
                    "workload": [w] * 100,
                    "step_ms": np.column_stack([num, den]).ravel(),
                    "peak_bytes": np.column_stack([peak_num, peak_den]).ravel(),
                }
            )
            tables.append(t)
            truths[(w, "step_ms")], truths[(w, "peak_bytes")] = ratio, ratio / 8
        # One run's processes each run one workload: give each workload its own indices.
        table = pa.concat_tables(
            t.set_column(0, "process_index", pa.array(np.asarray(t["process_index"]) + 50 * i))
            for i, t in enumerate(tables)
        )
        specs = [
            Comparison("regions", "whole", metric, where=(("workload", w),))
            for w in workloads
            for metric in ("step_ms", "peak_bytes")
        ]
        results = compare(table, specs, draws=500, seed=k)
        assert all(r.ratio.processes == 50 for r in results)
        all_covered += all(
            r.ratio.lower <= truths[(dict(r.comparison.where)["workload"], r.comparison.metric)] <= r.ratio.upper
            for r in results
        )
    # Bonferroni guarantees at least 95 % family-wise (less the small-sample undercoverage
    # of each interval); unadjusted 95 % intervals would cover all six only ~74 % of the time.
    assert all_covered / cohorts >= 0.90


def test_identical_values_give_a_point_interval():
    r = paired_ratio(np.full(50, 1_000_000.0), np.full(50, 19_780_000.0), draws=20_000)
    assert r.lower == r.upper == r.estimate == 1_000_000.0 / 19_780_000.0
    # Identical ratios from differing values are identical observations of the ratio too.
    den = np.linspace(1.0, 9.0, 50)
    s = paired_ratio(den * 0.25, den)
    assert s.lower == s.upper == s.estimate == 0.25


def test_steps_are_averaged_per_process_and_never_counted_as_samples():
    rng = np.random.default_rng(8)
    num, den = cohort(rng, n=20)
    table = long_table({"joint": num, "eager_whole": den}, steps=40, rng=rng)
    (result,) = compare(
        table, [{"numerator": "joint", "denominator": "eager_whole", "metric": "step_ms"}], draws=2_000, seed=0
    )
    assert result.ratio.processes == 20
    assert result.process_indices == tuple(range(20))
    assert result.ratio.estimate == pytest.approx(sps.gmean(num / den), rel=1e-9)
    assert result.numerator_mean == pytest.approx(num.mean(), rel=1e-9)
    assert result.ratio.confidence == 0.95  # m = 1
    row = result.row()
    assert (row["comparison"], row["numerator"], row["denominator"], row["m"]) == (
        "joint/eager_whole step_ms",
        "joint",
        "eager_whole",
        1,
    )


def test_where_restricts_rows_and_unpaired_processes_are_named():
    rng = np.random.default_rng(9)
    num, den = cohort(rng, n=6)
    a = long_table({"regions": num, "whole": den}, steps=2, rng=rng, extra={"workload": "queue"})
    b = long_table({"regions": num * 2, "whole": den}, steps=2, rng=rng, extra={"workload": "proto"})
    table = pa.concat_tables([a, b.set_column(0, "process_index", pa.array(np.asarray(b["process_index"]) + 6))])
    queue, proto = compare(
        table,
        [
            Comparison("regions", "whole", "step_ms", where=(("workload", "queue"),)),
            {"numerator": "regions", "denominator": "whole", "metric": "step_ms", "where": {"workload": "proto"}},
        ],
        draws=500,
    )
    assert queue.ratio.estimate == pytest.approx(sps.gmean(num / den), rel=1e-9)
    assert proto.ratio.estimate == pytest.approx(2 * sps.gmean(num / den), rel=1e-9)
    assert proto.process_indices == tuple(range(6, 12))
    assert queue.comparison.label == "regions/whole step_ms workload=queue"

    lopsided = table.filter(~((np.asarray(table["process_index"]) == 3) & (np.asarray(table["method"]) == "whole")))
    with pytest.raises(ValueError, match=r"process\(es\) \[3\] have rows for only one of 'regions' and 'whole'"):
        compare(lopsided, [("regions", "whole", "step_ms")])
    with pytest.raises(ValueError, match="method 'joint' has no step_ms rows"):
        compare(table, [("joint", "whole", "step_ms")])
    with pytest.raises(ValueError, match=r"no column\(s\) \['peak'\]"):
        compare(table, [("regions", "whole", "peak")])
    mixed = table.append_column("run_id", pa.array(["r1"] * 24 + ["r2"] * 24))
    with pytest.raises(ValueError, match=r"mixes runs \['r1', 'r2'\]"):
        compare(mixed, [("regions", "whole", "step_ms")])


def test_bad_inputs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="equal length"):
        paired_ratio(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least 2 processes"):
        paired_ratio(np.ones(1), np.ones(1))
    with pytest.raises(ValueError, match=r"denominator must be finite and positive.*\[1\] hold \[0.0\]"):
        paired_ratio(np.ones(3), np.array([1.0, 0.0, 2.0]))
    with pytest.raises(ValueError, match="valid keys are: numerator, denominator, metric, where, name"):
        Comparison.coerce({"numerator": "a", "denominator": "b", "metrc": "step_ms"})
    with pytest.raises(ValueError, match="no comparisons"):
        compare({"process_index": [0], "method": ["a"], "step_ms": [1.0]}, [])


def test_a_seed_reproduces_the_interval_exactly():
    num, den = cohort(np.random.default_rng(10))
    assert paired_ratio(num, den, draws=3_000, seed=4) == paired_ratio(num, den, draws=3_000, seed=4)
    assert paired_ratio(num, den, draws=3_000, seed=4) != paired_ratio(num, den, draws=3_000, seed=5)
    assert isinstance(paired_ratio(num, den, draws=10), Ratio)


positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=25, deadline=None)
@given(
    pairs=st.lists(st.tuples(positive, positive), min_size=2, max_size=30),
    scale=st.floats(min_value=1e-3, max_value=1e3),
    seed=st.integers(0, 2**32 - 1),
)
def test_swapping_and_scaling_transform_the_interval(pairs, scale, seed):
    num = np.array([p[0] for p in pairs])
    den = np.array([p[1] for p in pairs])
    r = paired_ratio(num, den, draws=200, seed=seed)
    assert r.lower <= r.upper
    # B/A is the reciprocal: the same resamples, mirrored order statistics. Percentiles
    # interpolate linearly and 1/x is convex, so the swapped bounds can only sit at or
    # above the reciprocals (equal when no interpolation falls between distinct values).
    s = paired_ratio(den, num, draws=200, seed=seed)
    assert s.estimate == pytest.approx(1 / r.estimate, rel=1e-9)
    assert s.lower >= (1 / r.upper) * (1 - 1e-9)
    assert s.upper >= (1 / r.lower) * (1 - 1e-9)
    # Scaling the numerator scales every bound exactly (to rounding).
    c = paired_ratio(num * scale, den, draws=200, seed=seed)
    assert (c.estimate, c.lower, c.upper) == pytest.approx(
        (scale * r.estimate, scale * r.lower, scale * r.upper), rel=1e-9
    )


# --- the whole path for one run: records -> verification -> comparisons table -> view ------


def write_timing_run(out, *, processes=6, failed=(), steps=4, warmups=2, seed=11):
    """A two-method timing run through the record writer; returns per-process measured means."""
    from stateaware.records.writer import Identity, RecordWriter

    rng = np.random.default_rng(seed)
    ident = dict(run_id="r1", cohort="confirm44", source_hash="c" * 64, hardware="cpu", scale=0.001)
    RecordWriter(out, Identity(process_index=0, **ident)).write(
        "runs", [{"launcher": "inline", "processes": processes}], part="manifest"
    )
    means: dict[str, list[float]] = {"joint": [], "eager_whole": []}
    for p in range(processes):
        w = RecordWriter(out, Identity(process_index=p, **ident))
        w.write("processes", [{"status": "failed" if p in failed else "completed", "attempt": 1}], part="a001")
        base = rng.uniform(9.0, 11.0)
        for method, factor, peak in (("joint", 0.8, 42 * 2**20), ("eager_whole", 1.0, 43 * 2**20)):
            measured = base * factor * rng.uniform(0.97, 1.03, steps)
            means[method].append(float(measured.mean()))
            rows = [
                {"method": method, "step": s, "warmup": True, "step_ms": 1000.0, "peak_allocated_bytes": 1}
                for s in range(warmups)
            ]
            rows += [
                {"method": method, "step": s, "warmup": False, "step_ms": float(v), "peak_allocated_bytes": peak}
                for s, v in enumerate(measured)
            ]
            w.write("timings", rows, part=f"method={method}")
    return {k: np.array(v) for k, v in means.items()}


PRESPECIFIED = [
    {"numerator": "joint", "denominator": "eager_whole", "metric": "step_ms"},
    {"numerator": "joint", "denominator": "eager_whole", "metric": "peak_allocated_bytes"},
]


def test_comparisons_are_computed_from_measured_rows_and_queryable_as_a_view(tmp_path):
    from stateaware.analysis.stats.comparisons import comparisons_path, compute_comparisons, write_comparisons
    from stateaware.analysis.store.views import connect

    means = write_timing_run(tmp_path)
    run, results = compute_comparisons(connect(tmp_path), "r1", PRESPECIFIED, draws=2_000, seed=9)
    assert run.label == "complete (6 of 6 processes)"
    time, peak = results
    # Warm-up rows (1000 ms, 1 byte) are excluded; steps are averaged per process first.
    assert time.ratio.estimate == pytest.approx(sps.gmean(means["joint"] / means["eager_whole"]), rel=1e-12)
    assert time.numerator_mean == pytest.approx(means["joint"].mean(), rel=1e-12)
    assert peak.ratio.lower == peak.ratio.upper == peak.ratio.estimate == 42 / 43
    path = write_comparisons(tmp_path, results, run=run)
    assert path == comparisons_path(tmp_path, "confirm44", "r1")
    write_comparisons(tmp_path, results, run=run)  # recomputing replaces, never appends
    rows = (
        connect(tmp_path)
        .execute(
            "SELECT run_id, cohort, comparison, metric, numerator, denominator, estimate, lower, upper, "
            "confidence, draws, processes, partial, seed, m, expected_processes FROM comparisons ORDER BY metric DESC"
        )
        .fetchall()
    )
    assert [r[:6] for r in rows] == [
        ("r1", "confirm44", "joint/eager_whole step_ms", "step_ms", "joint", "eager_whole"),
        ("r1", "confirm44", "joint/eager_whole peak_allocated_bytes", "peak_allocated_bytes", "joint", "eager_whole"),
    ]
    assert rows[0][6:9] == (time.ratio.estimate, time.ratio.lower, time.ratio.upper)
    assert [r[9:] for r in rows] == [(0.975, 2_000, 6, False, 9, 2, 6)] * 2


def test_a_partial_analysis_is_marked_and_counts_only_completed_processes(tmp_path):
    from stateaware.analysis.stats.comparisons import compute_comparisons, write_comparisons
    from stateaware.analysis.store.verify import VerificationError
    from stateaware.analysis.store.views import connect

    means = write_timing_run(tmp_path, failed=(2,))
    with pytest.raises(VerificationError, match="process 2 ended 'failed'"):
        compute_comparisons(connect(tmp_path), "r1", PRESPECIFIED, draws=500)
    run, (time, _peak) = compute_comparisons(connect(tmp_path), "r1", PRESPECIFIED, draws=500, allow_partial=True)
    assert run.label == "partial (5 of 6 processes)"
    assert time.process_indices == (0, 1, 3, 4, 5)
    keep = np.array([0, 1, 3, 4, 5])
    assert time.ratio.estimate == pytest.approx(sps.gmean(means["joint"][keep] / means["eager_whole"][keep]))
    write_comparisons(tmp_path, [time], run=run)
    assert connect(tmp_path).execute("SELECT partial, processes, expected_processes FROM comparisons").fetchall() == [
        (True, 5, 6)
    ]


def test_the_analysis_modules_import_no_gpu_stack_and_defer_scipy_and_matplotlib():
    import subprocess
    import sys

    code = (
        "import sys; import stateaware.analysis.stats, stateaware.analysis.store.verify, "
        "stateaware.analysis.figures, stateaware.analysis.stats.comparisons; "
        "print(sorted(m for m in ('torch', 'jax', 'scipy', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
