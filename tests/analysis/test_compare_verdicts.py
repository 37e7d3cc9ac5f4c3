"""The verdicts of ``analysis compare`` (``faster``/``slower``/``same``/``inconclusive``/
``unreliable``), ``--equivalence``, and the declared clock ``compare`` uses by default.

The verdict rule is tested on synthetic intervals and flags (``verdict_of`` needs no
records); the flags' path from records to a verdict on runs written through the
RecordWriter; the default clock on real ``demo`` runs.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stateaware.analysis.stats.compare_runs import (
    EQUIVALENCE,
    METRICS,
    VERDICTS,
    SideStability,
    compare_runs,
    format_comparisons,
    parse_equivalence,
    verdict_of,
)
from stateaware.analysis.store.views import connect

from stateaware.records.writer import Identity, RecordWriter
from tests.cli_inprocess import ANALYSIS, run_main


def side(n: int = 8, *, name: str = "B", method: str = "m", **flagged: set[int]) -> SideStability:
    """One side of a row with processes ``0..n-1`` and the given flagged indices."""
    return SideStability(
        name, f"run-{name}", method, frozenset(range(n)), **{k: frozenset(v) for k, v in flagged.items()}
    )


# --- the verdict rule, on synthetic intervals ---------------------------------------------


@pytest.mark.parametrize(
    ("lower", "upper", "metric", "want"),
    [
        (1.10, 1.30, "step_ms", "slower"),
        (0.70, 0.90, "cpu_ms", "faster"),
        (1.10, 1.30, "peak_allocated_bytes", "larger"),
        (0.70, 0.90, "peak_reserved_bytes", "smaller"),
        # resolved but smaller than the margin: still a real difference, so not "same"
        (1.001, 1.005, "step_ms", "slower"),
        (0.995, 0.999, "step_ms", "faster"),
        # the whole interval within [1 - d, 1 + d], both ends exactly on the margin included
        (0.98, 1.02, "step_ms", "same"),
        (0.99, 1.01, "cpu_ms", "same"),
        (1.0, 1.0, "step_ms", "same"),  # touching 1 is containing it
        (0.98, 1.02, "peak_allocated_bytes", "same"),
        # contains 1, but one end past the margin
        (0.9799, 1.01, "step_ms", "inconclusive"),
        (0.99, 1.0201, "step_ms", "inconclusive"),
        (0.50, 1.50, "cpu_ms", "inconclusive"),
        (None, None, "step_ms", "—"),
    ],
)
def test_each_verdict_and_its_boundaries(lower, upper, metric, want) -> None:
    assert verdict_of(lower, upper, metric, 0.02) == want


def test_the_margin_moves_the_line_between_same_and_inconclusive() -> None:
    assert verdict_of(0.96, 1.04, "step_ms", 0.02) == "inconclusive"
    assert verdict_of(0.96, 1.04, "step_ms", 0.04) == "same"  # exactly on the wider margin
    assert verdict_of(0.96, 1.04, "step_ms", 0.0399) == "inconclusive"
    assert EQUIVALENCE == 0.02


def test_exactly_a_quarter_disturbed_is_reliable_more_is_not() -> None:
    interval = (1.1, 1.3, "step_ms", 0.02)
    assert verdict_of(*interval, (side(), side(8, loaded={0, 1}))) == "slower"  # 2 of 8
    assert verdict_of(*interval, (side(), side(8, loaded={0, 1, 2}))) == "unreliable"  # 3 of 8
    assert verdict_of(*interval, (side(8, name="A", waited={5, 6}), side())) == "slower"
    assert verdict_of(*interval, (side(8, name="A", waited={4, 5, 6}), side())) == "unreliable"
    # a process both loaded and waited counts once; two distinct ones count twice
    assert verdict_of(*interval, (side(8, loaded={0, 1}, waited={0, 1}),)) == "slower"
    assert verdict_of(*interval, (side(8, loaded={0, 1}, waited={1, 2}),)) == "unreliable"
    # flags of processes outside the row (another method's, another cell's) do not count
    assert verdict_of(*interval, (side(4, loaded={4, 5, 6, 7}),)) == "slower"
    assert verdict_of(*interval, (side(4, loaded={0, 5, 6, 7}),)) == "slower"  # 1 of 4
    assert verdict_of(*interval, (side(4, loaded={0, 1, 6, 7}),)) == "unreliable"  # 2 of 4


def test_one_unstable_process_makes_its_method_unreliable_whatever_the_interval() -> None:
    for lower, upper in ((1.1, 1.3), (0.99, 1.01), (0.5, 1.5)):
        assert verdict_of(lower, upper, "cpu_ms", 0.02, (side(8, unstable={3}), side(name="A"))) == "unreliable"
    # without an interval there is no verdict to withhold
    assert verdict_of(None, None, "cpu_ms", 0.02, (side(8, unstable={3}),)) == "—"


def test_the_reasons_name_the_run_the_count_and_the_flag() -> None:
    assert side(6, loaded={0, 2, 4}).reasons() == ["run B: 3 of 6 processes loaded"]
    assert side(6, name="A", method="joint", waited={0, 1}).reasons() == [
        "run A: 2 of 6 processes waited (method joint)"
    ]
    assert side(6, method="joint", loaded={0}, waited={1}, unstable={5}).reasons() == [
        "run B: 2 of 6 processes loaded or waited (1 loaded, 1 waited on method joint)",
        "run B: method joint unstable in 1 of 6 processes",
    ]
    assert side(8, loaded={0, 1}).reasons() == []  # exactly a quarter: no reason


INTERVAL_ENDS = st.one_of(
    st.sampled_from([0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1]),
    st.floats(0.5, 1.5, allow_nan=False),
)


@st.composite
def sides(draw: st.DrawFn) -> SideStability:
    n = draw(st.integers(1, 12))
    subset = st.sets(st.integers(0, 15), max_size=6)  # indices past n-1: other rows' processes
    return SideStability(
        draw(st.sampled_from("AB")),
        "r",
        "m",
        frozenset(range(n)),
        loaded=frozenset(draw(subset)),
        waited=frozenset(draw(subset)),
        unstable=frozenset(draw(st.sets(st.integers(0, 15), max_size=1))),
    )


@settings(max_examples=400, deadline=None)
@given(
    ends=st.tuples(INTERVAL_ENDS, INTERVAL_ENDS).map(sorted),
    metric=st.sampled_from(METRICS),
    d=st.one_of(st.sampled_from([0.01, 0.02, 0.05]), st.floats(1e-4, 0.99)),
    flags=st.lists(sides(), max_size=2),
)
def test_every_interval_has_exactly_one_verdict_and_a_direction_only_when_it_excludes_1_on_reliable_data(
    ends, metric, d, flags
) -> None:
    lower, upper = ends
    verdict = verdict_of(lower, upper, metric, d, flags)
    reliable = all(
        4 * len((s.loaded | s.waited) & s.processes) <= len(s.processes) and not s.unstable & s.processes for s in flags
    )
    within = 1 - d <= lower and upper <= 1 + d
    time = metric.endswith("_ms")
    holds = {
        "unreliable": not reliable,
        "slower": reliable and time and lower > 1,
        "larger": reliable and not time and lower > 1,
        "faster": reliable and time and upper < 1,
        "smaller": reliable and not time and upper < 1,
        "same": reliable and lower <= 1 <= upper and within,
        "inconclusive": reliable and lower <= 1 <= upper and not within,
    }
    assert sum(holds.values()) == 1 and holds[verdict] and verdict in VERDICTS
    if verdict in ("faster", "slower", "smaller", "larger"):
        assert (lower > 1 or upper < 1) and reliable


# --- --equivalence --------------------------------------------------------------------


@pytest.mark.parametrize(("text", "want"), [("2%", 0.02), ("0.02", 0.02), ("0.5%", 0.005), ("99.9%", 0.999)])
def test_equivalence_takes_a_percentage_or_a_fraction(text, want) -> None:
    assert parse_equivalence(text) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("text", ["2", "1", "0", "0%", "-2%", "100%", "150%", "two", "2%%", "", "nan", "inf%"])
def test_any_other_equivalence_is_one_line_naming_the_flag_and_the_forms(tmp_path, text) -> None:
    # --equivalence=TEXT: a value starting with "-" would otherwise read as an option
    done = run_main(ANALYSIS, ["compare", "a", "b", "--results", str(tmp_path), f"--equivalence={text}"])
    assert done.status == 2 and not done.traceback and done.stdout == ""
    (line,) = done.error_lines
    assert "--equivalence" in line and "a percentage like 2% or a fraction like 0.02" in line
    assert "above 0 and below 100%" in line and repr(text) in line


def test_compare_runs_refuses_a_margin_out_of_range(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"--equivalence 1\.0: allowed values are above 0 and below 1"):
        compare_runs(tmp_path, "a", "b", equivalence=1.0)


# --- flags from records to verdicts -----------------------------------------------------

CONFIG = (
    "cohort:\n  name: confirm44\n  comparisons_clock: cpu\n"
    "hardware:\n  name: cpu\n  device: cpu\n  params:\n    cost_runtime:\n      threads: 1\n"
    "analysis:\n  stability: {}\n"
)


def write_run(
    out: Path,
    run_id: str,
    *,
    processes: int = 6,
    loaded=(),
    noisy=(),
    factor: float = 1.0,
    pair: tuple[str, str] | None = None,
    cell: str | None = "large_sparse",
) -> None:
    """A completed two-method timing run: quiet steps, ``joint`` ``factor`` times
    ``eager_whole``'s; processes in ``loaded`` shared their CPUs (``other_cpu_share`` 0.5),
    those in ``noisy`` have every other ``joint`` step doubled (an unstable method);
    ``pair`` ``(pair_id, side)`` makes it one side of an interleaved comparison."""
    RecordWriter(out, Identity(run_id, "confirm44", 0, "c" * 64, "cpu", 0.001)).write(
        "runs",
        [
            {
                "launcher": "local",
                "processes": processes,
                "config_yaml": CONFIG,
                "started_at": datetime(2026, 12, 1, tzinfo=UTC),
                "pair_id": pair[0] if pair else None,
                "side": pair[1] if pair else None,
            }
        ],
        part="manifest",
    )
    for p in range(processes):
        w = RecordWriter(out, Identity(run_id, "confirm44", p, "c" * 64, "cpu", 0.001))
        w.write(
            "processes",
            [{"status": "completed", "attempt": 1, "other_cpu_share": 0.5 if p in loaded else 0.01}],
            part="a001",
        )
        for method in ("joint", "eager_whole"):
            cpu = [
                10.0
                * (factor if method == "joint" else 1.0)
                * (1 + 0.01 * (s % 3 - 1))
                * (1 + 0.02 * p)
                * (2.0 if method == "joint" and p in noisy and s % 2 else 1.0)
                for s in range(8)
            ]
            w.write(
                "timings",
                {
                    "method": [method] * 8,
                    "step": list(range(8)),
                    "warmup": [False] * 8,
                    "step_ms": [c * 1.05 for c in cpu],
                    "cpu_ms": cpu,
                    "cell": [cell] * 8,
                },
                part=f"method={method}",
            )


def test_a_loaded_run_makes_every_row_unreliable_and_says_how_to_get_a_clean_one(tmp_path) -> None:
    write_run(tmp_path, "A")
    write_run(tmp_path, "B", loaded={0, 2, 4}, factor=1.5)
    rows = compare_runs(tmp_path, "A", "B", draws=500)
    assert [(r.method, r.verdict) for r in rows] == [("eager_whole", "unreliable"), ("joint", "unreliable")]
    assert all(r.unreliable_because == ["run B: 3 of 6 processes loaded"] for r in rows)
    # the same run with exactly a quarter of its processes loaded (1 of 4 here) keeps its verdicts
    write_run(tmp_path, "C", processes=4, loaded={1}, factor=1.5)
    write_run(tmp_path, "D", processes=4)
    assert [r.verdict for r in compare_runs(tmp_path, "D", "C", draws=500)] == ["same", "slower"]

    table = format_comparisons(rows, "A", "B").splitlines()
    (note,) = [line for line in table if line.startswith("unreliable:")]  # one line per run: only B
    assert note.startswith("unreliable: run B = B: 3 of 6 processes loaded (python -m stateaware.analysis check")
    assert all(hint in note for hint in ("a quiet machine", "launcher.cpus=N", "an interleaved comparison"))
    listed = json.loads(format_comparisons(rows, "A", "B", "json"))
    assert [(r["verdict"], r["equivalence"], r["unreliable_because"]) for r in listed] == [
        ("unreliable", 0.02, ["run B: 3 of 6 processes loaded"])
    ] * 2


def _columns(line: str) -> list[str]:
    """A table line's cells: the table separates columns by two spaces or more."""
    return re.split(r"  +", line.strip())


def test_every_column_has_a_header_and_each_verdict_its_reason_on_its_line(tmp_path) -> None:
    write_run(tmp_path, "A")
    write_run(tmp_path, "B", factor=1.5)
    lines = format_comparisons(compare_runs(tmp_path, "A", "B", draws=500), "A", "B").splitlines()
    header, *rows = lines[2:]
    assert _columns(header) == [
        "cell", "method", "A cpu_ms", "B cpu_ms", "B/A", "interval", "processes", "verdict", "because"
    ]  # fmt: skip
    assert [_columns(row)[:2] + _columns(row)[6:] for row in rows] == [
        ["large_sparse", "eager_whole", "6 paired", "same", "interval contains 1, within ±2%"],
        ["large_sparse", "joint", "6 paired", "slower", "interval above 1"],
    ]
    write_run(tmp_path, "C", loaded={0, 2, 4}, factor=1.5)
    unreliable = format_comparisons(compare_runs(tmp_path, "A", "C", draws=500), "A", "C").splitlines()
    assert [_columns(row)[7:] for row in unreliable[3:5]] == [["unreliable", "run B: 3 of 6 processes loaded"]] * 2


def test_a_cohort_without_cells_has_no_cell_column(tmp_path) -> None:
    write_run(tmp_path, "A", cell=None)
    write_run(tmp_path, "B", cell=None, factor=1.5)
    rows = compare_runs(tmp_path, "A", "B", draws=500)
    header, *body = format_comparisons(rows, "A", "B").splitlines()[2:]
    assert _columns(header)[:2] == ["method", "A cpu_ms"] and "—" not in header
    assert [_columns(row)[0] for row in body] == ["eager_whole", "joint"]
    assert all(len(_columns(row)) == len(_columns(header)) for row in body)


def test_an_interleaved_unreliable_pair_is_advised_what_interleaving_cannot_fix(tmp_path) -> None:
    write_run(tmp_path, "p-a", loaded={0, 2, 4}, pair=("p~1", "a"))
    write_run(tmp_path, "p-b", loaded={0, 2, 4}, factor=1.5, pair=("p~1", "b"))
    rows = compare_runs(tmp_path, "p-a", "p-b", draws=500)
    assert [(r.interleaved, r.verdict) for r in rows] == [(True, "unreliable")] * 2
    table = format_comparisons(rows, "p-a", "p-b").splitlines()
    assert table[0].startswith("B = p-b against A = p-a (an interleaved pair); intervals at 97.50% each")
    notes = [line for line in table if line.startswith("unreliable:")]
    assert [note.split(" (python")[0] for note in notes] == [
        "unreliable: run A = p-a: 3 of 6 processes loaded",
        "unreliable: run B = p-b: 3 of 6 processes loaded",
    ]
    for note in notes:
        assert note.endswith(
            "; the pair was already interleaved (its processes alternated, so the load fell on both sides); what "
            "would help: a quieter machine, pinned cores (launcher.cpus=N) or more processes (processes=N, more "
            "pairs to rest on)"
        )
        assert "compare_to=" not in note and "an interleaved comparison" not in note
    assert {r["interleaved"] for r in json.loads(format_comparisons(rows, "p-a", "p-b", "json"))} == {True}
    # two runs of one pair id but the same side, or of different pairs, were not interleaved with each other
    write_run(tmp_path, "q-b", loaded={0, 2, 4}, pair=("q~1", "b"))
    assert {r.interleaved for r in compare_runs(tmp_path, "p-b", "q-b", draws=500)} == {False}
    apart = format_comparisons(compare_runs(tmp_path, "p-a", "q-b", draws=500), "p-a", "q-b")
    assert "interleaved pair" not in apart and "or an interleaved comparison (python -m stateaware" in apart


def test_an_unstable_method_is_unreliable_for_that_method_only(tmp_path) -> None:
    write_run(tmp_path, "A")
    write_run(tmp_path, "B", noisy={3})  # joint's steps in process 3 swing by 2x
    by_method = {r.method: r for r in compare_runs(tmp_path, "A", "B", draws=500, equivalence=0.5)}
    assert by_method["joint"].verdict == "unreliable"
    assert by_method["joint"].unreliable_because == ["run B: method joint unstable in 1 of 6 processes"]
    assert by_method["eager_whole"].verdict == "same" and by_method["eager_whole"].unreliable_because == []
    listed = {r["method"]: r for r in json.loads(format_comparisons(list(by_method.values()), "A", "B", "json"))}
    assert "unreliable_because" not in listed["eager_whole"] and listed["eager_whole"]["equivalence"] == 0.5


# --- the declared clock, on real runs ----------------------------------------------------


@pytest.fixture
def demo_runs(compose, tmp_path: Path) -> Path:
    """Runs ``a`` and ``b`` of the demo cohort on the CPU profile (one thread: the declared
    clock is ``cpu``) and ``w``, the same cohort declaring ``wall``. The stability thresholds
    are relaxed in the runs' own configs: this machine's load is not what these tests check."""
    from stateaware.cli import run

    quiet = [f"analysis.stability.{k}=1000" for k in ("max_cv", "max_wall_over_cpu", "max_other_share")]
    for run_id, extra in (("a", []), ("b", []), ("w", ["cohort.comparisons_clock=wall"])):
        cfg = compose(
            "cohort=demo",
            "processes=2",
            "launcher=inline",
            "hardware=cpu",
            f"out={tmp_path}",
            f"run_id={run_id}",
            "cohort.params.steps=3",
            *quiet,
            *extra,
        )
        assert run(cfg, progress=False) == 0
    return tmp_path


def _geometric_ratio(results: Path, column: str, a: str, b: str) -> float:
    """B/A on ``column`` straight from the records: the paired geometric mean of per-process means."""
    (value,) = (
        connect(results)
        .execute(
            f"WITH m AS (SELECT run_id, process_index, avg({column}) AS v FROM timings WHERE NOT warmup GROUP BY ALL) "
            "SELECT exp(avg(ln(b.v / a.v))) FROM m a JOIN m b USING (process_index) "
            "WHERE a.run_id = ? AND b.run_id = ?",
            [a, b],
        )
        .fetchone()
    )
    return float(value)


def test_compare_uses_the_declared_clock_unless_metric_says_otherwise(demo_runs: Path) -> None:
    results = str(demo_runs)
    done = run_main(ANALYSIS, ["compare", "a", "b", "--results", results, "--draws", "500", "--format", "json"])
    assert done.status == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert (row["metric"], row["clock"], row["clock_basis"]) == ("cpu_ms", "cpu", "the cohort's declared clock")
    assert row["ratio"] == pytest.approx(_geometric_ratio(demo_runs, "cpu_ms", "a", "b"), rel=1e-9)
    assert row["verdict"] in ("faster", "slower", "same", "inconclusive") and row["equivalence"] == 0.02

    table = run_main(ANALYSIS, ["compare", "a", "b", "--results", results, "--draws", "500", "--equivalence", "5%"])
    lines = table.stdout.splitlines()
    assert (
        lines[1] == "clock: cpu (cpu_ms), the cohort's declared clock; "
        "same: an interval containing 1 within ±5% of it (--equivalence)"
    )
    assert lines[2].split()[:5] == ["method", "A", "cpu_ms", "B", "cpu_ms"]  # the demo has no cells

    chosen = run_main(
        ANALYSIS,
        ["compare", "a", "b", "--results", results, "--draws", "500", "--metric", "step_ms", "--format", "json"],
    )
    (row,) = json.loads(chosen.stdout)
    assert (row["metric"], row["clock"], row["clock_basis"]) == ("step_ms", "wall", "chosen with --metric")
    assert row["ratio"] == pytest.approx(_geometric_ratio(demo_runs, "step_ms", "a", "b"), rel=1e-9)


def test_runs_declaring_different_clocks_are_refused_unless_metric_is_given(demo_runs: Path) -> None:
    results = str(demo_runs)
    refused = run_main(ANALYSIS, ["compare", "a", "w", "--results", results])
    assert refused.status == 2 and refused.stdout == "" and not refused.traceback
    (line,) = refused.error_lines
    assert line == (
        "error: run A 'a' declares the cpu clock (cpu_ms) and run B 'w' the wall clock (step_ms): their ratio "
        "would mix two clocks; choose one with --metric step_ms or --metric cpu_ms"
    )
    chosen = run_main(ANALYSIS, ["compare", "a", "w", "--results", results, "--draws", "500", "--metric", "cpu_ms"])
    assert chosen.status == 0 and chosen.stdout.splitlines()[1].startswith("clock: cpu (cpu_ms), chosen with --metric;")


def test_records_without_a_manifest_compare_on_wall_time(tmp_path: Path) -> None:
    # no runs row: no declared clock, so the clock every record has (as the comparisons do)
    for run_id, factor in (("A", 1.0), ("B", 2.0)):
        for p in range(2):
            RecordWriter(tmp_path, Identity(run_id, "synthetic", p, "0" * 64, "cpu", 1.0)).write(
                "timings",
                {
                    "method": ["m"] * 2,
                    "step": [0, 1],
                    "warmup": [False] * 2,
                    "step_ms": [factor * (1 + p)] * 2,
                    "cpu_ms": [1.0] * 2,
                },
                part="m",
            )
    (row,) = compare_runs(tmp_path, "A", "B", draws=200)
    assert (row.metric, row.clock, row.ratio, row.verdict) == ("step_ms", "wall", 2.0, "slower")
