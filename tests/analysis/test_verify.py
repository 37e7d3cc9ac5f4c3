"""Verification before analysis: synthetic results directories with one defect each."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from stateaware.analysis.store.verify import RunVerification, Verification, VerificationError, verify
from stateaware.analysis.store.views import connect as connect_results

from stateaware.records.writer import Identity, RecordWriter

HASH = "a" * 64
OTHER_HASH = "b" * 64
METHODS = ("joint", "eager_whole")
STEPS = 3  # measured steps per method
WARMUPS = 1


def write_run(
    out: Path,
    *,
    run_id: str = "r1",
    cohort: str = "confirm44",
    processes: int = 4,
    skip: tuple[int, ...] = (),
    status: dict[int, str] | None = None,
    source_hash: dict[int, str] | None = None,
    plan_digest: dict[int, str] | None = None,
    drop_step: dict[int, str] | None = None,
) -> None:
    """A timing run as a launcher and cohort would leave it, with the requested defects."""
    status = status or {}
    source_hash = source_hash or {}
    plan_digest = plan_digest or {}
    drop_step = drop_step or {}
    manifest = RecordWriter(out, Identity(run_id, cohort, 0, HASH, "cpu", 0.001))
    manifest.write("runs", [{"launcher": "local", "processes": processes}], part="manifest")
    for p in range(processes):
        if p in skip:
            continue
        w = RecordWriter(out, Identity(run_id, cohort, p, source_hash.get(p, HASH), "cpu", 0.001))
        st = status.get(p, "completed")
        w.write(
            "processes",
            [
                {
                    "status": st,
                    "attempt": 1,
                    "exception_type": None if st == "completed" else "RuntimeError",
                    "exception_message": None if st == "completed" else "CUDA error: boom",
                }
            ],
            part="a001",
        )
        for method in METHODS:
            rows = [
                {
                    "method": method,
                    "step": s,
                    "warmup": warm,
                    "step_ms": 10.0 + p + s,
                    "seed": 100 + p,
                    "peak_allocated_bytes": 1 << 20,
                    "workload": "feature_queue",
                    "cell": "large_sparse",
                }
                for warm, count in ((True, WARMUPS), (False, STEPS))
                for s in range(count)
                if not (drop_step.get(p) == method and not warm and s == STEPS - 1)
            ]
            w.write("timings", rows, part=f"method={method}")
            w.write(
                "policies",
                [
                    {
                        "method": method,
                        "planner": method,
                        "feasible": True,
                        "card_digest": "card0",
                        "plan_digest": plan_digest.get(p, f"plan-{method}"),
                        "workload": "feature_queue",
                        "cell": "large_sparse",
                    }
                ],
                part=f"method={method}",
            )


def connect(out: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for table in sorted(d.name for d in out.iterdir() if d.is_dir()):
        con.execute(
            f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{out}/{table}/**/*.parquet', "
            "union_by_name=true, hive_partitioning=true)"
        )
    return con


def problems_of(out: Path, **kwargs) -> str:
    with pytest.raises(VerificationError) as info:
        verify(connect(out), **kwargs)
    return str(info.value)


def test_a_whole_run_verifies_complete(tmp_path):
    write_run(tmp_path)
    result = verify(connect(tmp_path), run_id="r1")
    assert result == Verification((RunVerification("r1", "confirm44", 4, (0, 1, 2, 3)),))
    assert not result.partial
    assert result.label == "complete (4 of 4 processes)"


def test_a_missing_process_stops_the_analysis_and_is_named(tmp_path):
    write_run(tmp_path, skip=(2,))
    message = problems_of(tmp_path)
    assert "1 of 4 process(es) have no status row: process(es) 2" in message


def test_a_failed_process_stops_the_analysis_and_is_named(tmp_path):
    write_run(tmp_path, status={1: "failed"})
    message = problems_of(tmp_path, run_id="r1")
    assert "process 1 ended 'failed' (attempt 1): RuntimeError: CUDA error: boom" in message


def test_the_latest_attempt_decides(tmp_path):
    write_run(tmp_path, status={1: "failed"})
    retry = RecordWriter(tmp_path, Identity("r1", "confirm44", 1, HASH, "cpu", 0.001))
    retry.write("processes", [{"status": "completed", "attempt": 2}], part="a002")
    assert verify(connect(tmp_path)).label == "complete (4 of 4 processes)"


def test_mixed_source_hashes_stop_the_analysis_and_name_both(tmp_path):
    write_run(tmp_path, source_hash={3: OTHER_HASH})
    message = problems_of(tmp_path)
    assert "2 source hashes, expected one" in message
    assert f"{OTHER_HASH!r} in processes (process(es) 3), timings (process(es) 3), policies (process(es) 3)" in message
    assert f"{HASH!r} in runs (process(es) 0), processes (process(es) 0-2)" in message


def _write_retried_steps(out: Path) -> None:
    """The same steps of process 1 written again under another part name, as a resumed
    process that chose a non-deterministic part name would leave them."""
    w = RecordWriter(out, Identity("r1", "confirm44", 1, HASH, "cpu", 0.001))
    w.write(
        "timings",
        [
            {
                "method": "joint",
                "step": s,
                "warmup": False,
                "step_ms": 1.0,
                "seed": 101,
                "workload": "feature_queue",
                "cell": "large_sparse",
            }
            for s in range(STEPS)
        ],
        part="retry",
    )


DUPLICATED_PARTS = (
    "duplicated part across parts timings/cohort=confirm44/run_id=r1/p000001-method=joint.parquet, "
    "timings/cohort=confirm44/run_id=r1/p000001-retry.parquet"
)


def test_a_duplicated_part_stops_the_analysis_and_names_the_parts(tmp_path):
    write_run(tmp_path)
    _write_retried_steps(tmp_path)
    message = problems_of(tmp_path)
    assert "timings process 1 method 'joint': 3 row key(s)" in message
    assert DUPLICATED_PARTS in message
    # The duplicate also breaks the row count of that cell.
    assert "process 1 method 'joint': 7" in message


def test_the_parts_of_a_duplicate_are_named_alike_through_arrow_and_through_loaded_tables(tmp_path):
    """A report's connections have every table loaded by DuckDB (``LOAD_EVERY_TABLE``), each
    row's file kept: verification names a duplicate's parts as through Arrow's views."""
    from stateaware.analysis.store.views import LOAD_EVERY_TABLE

    write_run(tmp_path)
    _write_retried_steps(tmp_path)
    messages = []
    for load in (None, LOAD_EVERY_TABLE):
        with pytest.raises(VerificationError) as info:
            verify(connect_results(tmp_path, load=load))
        messages.append(str(info.value))
    assert messages[0] == messages[1] and DUPLICATED_PARTS in messages[1]


def test_a_duplicated_part_is_named_through_a_view_with_filenames(tmp_path):
    write_run(tmp_path, processes=2)
    w = RecordWriter(tmp_path, Identity("r1", "confirm44", 0, HASH, "cpu", 0.001))
    w.write(
        "policies",
        [
            {
                "method": "joint",
                "planner": "joint",
                "card_digest": "card0",
                "plan_digest": "plan-joint",
                "workload": "feature_queue",
                "cell": "large_sparse",
            }
        ],
        part="again",
    )
    con = connect(tmp_path)
    con.execute(
        f"CREATE OR REPLACE VIEW policies AS SELECT p.*, 1 AS extra FROM read_parquet("
        f"'{tmp_path}/policies/**/*.parquet', union_by_name=true, hive_partitioning=true, filename=true) p"
    )
    with pytest.raises(VerificationError, match=r"policies process 0 method 'joint'.*p000000-again\.parquet"):
        verify(con)


def test_a_short_cell_is_named_with_its_count(tmp_path):
    write_run(tmp_path, drop_step={2: "eager_whole"})
    message = problems_of(tmp_path)
    assert "timings expected 4 rows per process and method (the mode over 8 process x method cells)" in message
    assert "1 cell(s) differ: process 2 method 'eager_whole': 3" in message


def test_an_explicit_row_expectation_replaces_the_mode(tmp_path):
    write_run(tmp_path)
    message = problems_of(tmp_path, expected_rows=5)
    assert "timings expected 5 rows per process and method (as given); 8 cell(s) differ" in message
    assert verify(connect(tmp_path), expected_rows=4).completed == 4


def test_a_second_plan_digest_is_named(tmp_path):
    write_run(tmp_path, plan_digest={3: "plan-other"})
    message = problems_of(tmp_path)
    assert (
        "policies for workload='feature_queue', cell='large_sparse', method='eager_whole' carry 2 plan_digests"
        in message
    )
    assert "'plan-other' in process(es) 3" in message


def test_every_problem_is_listed_not_just_the_first(tmp_path):
    write_run(tmp_path, skip=(0,), status={2: "lost"}, source_hash={1: OTHER_HASH})
    message = problems_of(tmp_path)
    assert "verification failed with 3 problem(s)" in message
    assert "process(es) 0" in message and "process 2 ended 'lost'" in message and OTHER_HASH in message


def test_allow_partial_returns_counts_and_labels_partial(tmp_path):
    write_run(tmp_path, skip=(0,), status={3: "failed"})
    result = verify(connect(tmp_path), allow_partial=True)
    run = result.run("r1")
    assert run.completed == (1, 2)
    assert result.partial and run.partial
    assert result.label == "partial (2 of 4 processes)" == run.label
    assert len(run.incomplete) == 2


def test_allow_partial_still_stops_on_integrity_problems(tmp_path):
    write_run(tmp_path, status={3: "failed"}, source_hash={1: OTHER_HASH})
    message = problems_of(tmp_path, allow_partial=True)
    assert "2 source hashes" in message and "ended 'failed'" not in message


def test_allow_partial_ignores_rows_of_unfinished_processes(tmp_path):
    # A failed process's rows may be short or carry drifted code; a partial analysis
    # leaves them out, so they do not count against the completed processes.
    write_run(tmp_path, status={3: "source_drift"}, source_hash={3: OTHER_HASH}, drop_step={3: "joint"})
    assert verify(connect(tmp_path), allow_partial=True).label == "partial (3 of 4 processes)"


def test_unknown_run_and_runs_of_several_are_handled(tmp_path):
    write_run(tmp_path, run_id="r1")
    write_run(tmp_path, run_id="r2", cohort="confirm32", processes=2, skip=(1,))
    with pytest.raises(VerificationError, match=r"run 'r9' is not in runs; runs present: \['r1', 'r2'\]"):
        verify(connect(tmp_path), run_id="r9")
    assert verify(connect(tmp_path), run_id="r1").label == "complete (4 of 4 processes)"
    message = problems_of(tmp_path)
    assert "run 'r2': 1 of 2 process(es) have no status row: process(es) 1" in message
    both = verify(connect(tmp_path), allow_partial=True)
    assert both.label == "partial (5 of 6 processes)"
    assert both.run("r1").label == "complete (4 of 4 processes)"


def test_verify_reads_the_results_views_of_the_analysis_package(tmp_path):
    write_run(tmp_path, status={2: "failed"})
    retry = RecordWriter(tmp_path, Identity("r1", "confirm44", 2, HASH, "cpu", 0.001))
    retry.write("processes", [{"status": "completed", "attempt": 2}], part="a002")
    assert verify(connect_results(tmp_path)).label == "complete (4 of 4 processes)"
    # The same attempt written under two part names is a duplicated status part.
    retry.write("processes", [{"status": "completed", "attempt": 2}], part="again")
    message = str(pytest.raises(VerificationError, verify, connect_results(tmp_path)).value)
    assert "attempts process 2: 1 row key(s) (process_index, attempt) appear up to 2 times" in message
    assert (
        "across parts processes/cohort=confirm44/run_id=r1/p000002-a002.parquet, "
        "processes/cohort=confirm44/run_id=r1/p000002-again.parquet\n"
    ) in message


def test_a_duplicated_part_is_named_through_a_view_that_filters_runs(tmp_path):
    write_run(tmp_path, processes=2)
    w = RecordWriter(tmp_path, Identity("r1", "confirm44", 0, HASH, "cpu", 0.001))
    w.write(
        "timings",
        [
            {
                "method": "joint",
                "step": 0,
                "warmup": True,
                "step_ms": 1.0,
                "seed": 100,
                "workload": "feature_queue",
                "cell": "large_sparse",
            }
        ],
        part="stray",
    )
    con = connect(tmp_path)
    con.execute(
        f"CREATE OR REPLACE VIEW timings AS SELECT * FROM read_parquet('{tmp_path}/timings/**/*.parquet', "
        "union_by_name = true, hive_partitioning = true, hive_types = {'run_id': 'VARCHAR'}) WHERE run_id IN ('r1')"
    )
    with pytest.raises(VerificationError) as info:
        verify(con)
    assert (
        "timings process 0 method 'joint': 1 row key(s) (process_index, method, precision, warmup, step, "
        "workload, cell, budget_bytes, seed) appear up to 2 times — a duplicated part across parts "
        "timings/cohort=confirm44/run_id=r1/p000000-method=joint.parquet, "
        "timings/cohort=confirm44/run_id=r1/p000000-stray.parquet"
    ) in str(info.value)


def _declare(out: Path, methods, run_id: str = "r1", cohort: str = "confirm44", processes: int = 4) -> None:
    """The runs row with the stored config a timing launch writes (cohort.timing, cohort.params.methods)."""
    from omegaconf import OmegaConf

    config = {"cohort": {"name": cohort, "kind": "timing", "timing": True, "params": {"methods": list(methods)}}}
    RecordWriter(out, Identity(run_id, cohort, 0, HASH, "cpu", 0.001)).write(
        "runs",
        [{"launcher": "local", "processes": processes, "config_yaml": OmegaConf.to_yaml(config)}],
        part="manifest",
    )


def test_a_declared_method_without_timings_fails_unless_its_plan_was_infeasible(tmp_path):
    write_run(tmp_path)
    # Declared, never timed in any process: the timings alone look complete and consistent.
    _declare(tmp_path, [*METHODS, "regions"])
    with pytest.raises(VerificationError) as raised:
        verify(connect(tmp_path))
    assert (
        "run 'r1': 4 declared process x method cell(s) were not timed and have no infeasible plan (methods "
        "declared: joint, eager_whole, regions): process 0 method 'regions': no timings and no record saying why"
    ) in str(raised.value)

    # Recorded infeasible in every process: planned, never executed — the run verifies.
    for p in range(4):
        RecordWriter(tmp_path, Identity("r1", "confirm44", p, HASH, "cpu", 0.001)).write(
            "policies",
            [
                {
                    "method": "regions",
                    "planner": "regions",
                    "feasible": False,
                    "card_digest": "card0",
                    "plan_digest": "plan-regions",
                    "workload": "feature_queue",
                    "cell": "large_sparse",
                }
            ],
            part="method=regions",
        )
    assert verify(connect(tmp_path)).run("r1").completed == (0, 1, 2, 3)

    # One process lost a declared method's timings: named, whatever the others have.
    (tmp_path / "timings" / "cohort=confirm44" / "run_id=r1" / "p000002-method=joint.parquet").unlink()
    with pytest.raises(VerificationError, match="1 declared process x method cell.*process 2 method 'joint'"):
        verify(connect(tmp_path))
