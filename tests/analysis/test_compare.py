"""``analysis compare RUN_A RUN_B`` and ``sql --run-id``: comparing runs of a cohort."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from stateaware.analysis.stats.compare_runs import compare_runs

from stateaware.records.writer import Identity, RecordWriter


def _write_run(
    out: Path, run_id: str, step_ms: dict[int, list[float]], method: str = "m", cell: str | None = None
) -> None:
    for process, values in step_ms.items():
        writer = RecordWriter(out, Identity(run_id, "synthetic", process, "0" * 64, "cpu", 1.0))
        writer.write(
            "timings",
            {
                "method": [method] * (len(values) + 1),
                "step": [0, *range(len(values))],
                "warmup": [True] + [False] * len(values),
                "step_ms": [1e6, *values],
                "cell": [cell] * (len(values) + 1),
            },
            part=f"{cell}-{method}",
        )


def test_paired_ratio_is_the_geometric_mean_of_per_process_ratios(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    a = {p: list(rng.uniform(10, 20, size=4)) for p in range(6)}
    factors = rng.uniform(1.4, 1.6, size=6)
    b = {p: [v * factors[p] for v in a[p]] for p in range(6)}
    _write_run(tmp_path, "A", a)
    _write_run(tmp_path, "B", b)
    (row,) = compare_runs(tmp_path, "A", "B", draws=2_000)
    assert row.paired and (row.a_processes, row.b_processes) == (6, 6)
    # Warm-ups (1e6 ms) are excluded, a process's steps are averaged before the ratio.
    expected = np.exp(np.mean([np.log(np.mean(b[p]) / np.mean(a[p])) for p in range(6)]))
    assert row.ratio == pytest.approx(expected, rel=1e-12)
    assert 1.4 <= row.lower <= row.ratio <= row.upper <= 1.6
    assert row.verdict == "slower"


def test_runs_with_different_processes_are_compared_unpaired(tmp_path: Path) -> None:
    _write_run(tmp_path, "A", {p: [10.0 + p, 11.0 + p] for p in range(4)})
    _write_run(tmp_path, "B", {p: [10.0 + p - 4, 11.0 + p - 4] for p in range(4, 8)})
    (row,) = compare_runs(tmp_path, "A", "B", draws=2_000)
    assert not row.paired and (row.a_processes, row.b_processes) == (4, 4)
    assert row.ratio == pytest.approx(1.0, rel=1e-12)  # the same per-process means, other indices
    # about [0.88, 1.14]: contains 1 but far wider than the ±2 % margin of "same"
    assert row.lower < 0.98 and row.upper > 1.02 and row.verdict == "inconclusive"


def test_one_process_gives_a_ratio_without_interval(tmp_path: Path) -> None:
    _write_run(tmp_path, "A", {0: [4.0]})
    _write_run(tmp_path, "B", {0: [2.0]})
    (row,) = compare_runs(tmp_path, "A", "B")
    assert row.ratio == 0.5 and row.lower is None and row.verdict == "—"


def test_every_cell_and_method_both_runs_timed_is_a_row_at_the_bonferroni_level(tmp_path: Path) -> None:
    for cell in ("queue", "memory"):
        for method in ("whole", "regions"):
            _write_run(tmp_path, "A", {p: [5.0 + p] for p in range(3)}, method=method, cell=cell)
            _write_run(tmp_path, "B", {p: [10.0 + 2 * p] for p in range(3)}, method=method, cell=cell)
    _write_run(tmp_path, "A", {p: [1.0] for p in range(3)}, method="only_in_a", cell="queue")
    rows = compare_runs(tmp_path, "A", "B")
    assert [(r.cell, r.method) for r in rows] == [
        ("memory", "regions"),
        ("memory", "whole"),
        ("queue", "regions"),
        ("queue", "whole"),
    ]
    assert all(r.ratio == 2.0 and r.lower == r.upper == 2.0 and r.confidence == 1 - 0.05 / 4 for r in rows)


def test_an_unknown_run_or_metric_is_a_one_line_error_naming_the_choices(tmp_path: Path) -> None:
    _write_run(tmp_path, "A", {0: [1.0], 1: [2.0]})
    with pytest.raises(ValueError, match="run 'nope' has no timing rows.*runs with timings: A"):
        compare_runs(tmp_path, "A", "nope")
    with pytest.raises(ValueError, match="choose one of step_ms"):
        compare_runs(tmp_path, "A", "A", metric="bogus")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_two_runs_of_a_cohort_compare_and_sql_restricts_to_chosen_runs(tmp_path: Path) -> None:
    for run_id in ("first", "second"):
        done = _cli(
            "stateaware",
            "cohort=demo",
            "launcher=inline",
            "processes=3",
            f"run_id={run_id}",
            "out=results",
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    compared = _cli(
        "stateaware.analysis",
        "compare",
        "first",
        "second",
        "--results",
        "results",
        "--format",
        "json",
        "--draws",
        "500",
        cwd=tmp_path,
    )
    assert compared.returncode == 0, compared.stderr
    (row,) = json.loads(compared.stdout)
    assert (row["method"], row["paired"], row["a_processes"], row["b_processes"]) == ("matmul", True, 3, 3)
    assert row["lower"] <= row["ratio"] <= row["upper"]

    counted = _cli(
        "stateaware.analysis",
        "sql",
        "--results",
        "results",
        "--run-id",
        "second",
        "--format",
        "json",
        "SELECT run_id, count(*) AS n FROM processes GROUP BY ALL",
        cwd=tmp_path,
    )
    assert json.loads(counted.stdout) == [{"run_id": "second", "n": 3}]
    both = _cli(
        "stateaware.analysis",
        "sql",
        "--results",
        "results",
        "--run-id",
        "first",
        "--run-id",
        "second",
        "--format",
        "json",
        "SELECT count(DISTINCT run_id) AS runs FROM timings",
        cwd=tmp_path,
    )
    assert json.loads(both.stdout) == [{"runs": 2}]

    unknown = _cli("stateaware.analysis", "compare", "first", "third", "--results", "results", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "first, second" in unknown.stderr
