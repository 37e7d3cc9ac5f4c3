"""Row counts: a valid part holding other rows than its process wrote never verifies as complete.

One real run (``cohort=demo``, two processes: the session's ``demo_results``) is built once;
each test copies it and damages process 1 in one way — a part emptied, replaced by another
run's or another process's, a stray part beside it, a part lost. Verification fails naming
the process, the table and both counts (and the file, when the part itself is foreign); the
next launch agrees, quarantines what it cannot trust, runs process 1 again, and the run then
verifies with every row exactly once.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stateaware.analysis.__main__ import main as analysis_main
from stateaware.analysis.store.verify import VerificationError, verify
from stateaware.analysis.store.views import connect

from stateaware.cli import run
from stateaware.launch.launcher import latest_statuses
from stateaware.records.writer import write_atomic

RUN = "r1"
ARGS = (
    "cohort=demo",
    "launcher=inline",
    "processes=2",
    f"run_id={RUN}",
    "cohort.params.steps=2",
    "cohort.params.warmup=1",
)
PARTITION = Path("cohort=demo") / f"run_id={RUN}"


pytestmark = pytest.mark.usefixtures("fresh_part_cache")


@pytest.fixture
def results(demo_results, tmp_path) -> Path:
    return Path(shutil.copytree(demo_results, tmp_path / "results"))


def _part(results: Path, table: str, process: int, name: str) -> Path:
    return results / table / PARTITION / f"p{process:06d}-{name}.parquet"


def _rewrite(path: Path, change) -> None:
    """``path`` rewritten by our own writer (a valid part: checksums, metadata) with ``change`` applied."""
    write_atomic(change(pq.read_table(path)), path)


def _other_run(table: pa.Table) -> pa.Table:
    meta = {**table.schema.metadata, b"stateaware.run_id": b"r2"}
    column = pa.array(["r2"] * table.num_rows, pa.string())
    return table.set_column(table.schema.get_field_index("run_id"), "run_id", column).replace_schema_metadata(meta)


def _empty(results: Path) -> Path:
    path = _part(results, "records", 1, "main")
    _rewrite(path, lambda t: t.slice(0, 0))
    return path


def _another_runs(results: Path) -> Path:
    path = _part(results, "records", 1, "main")
    _rewrite(path, _other_run)
    return path


def _another_process(results: Path) -> Path:
    path = _part(results, "timings", 1, "matmul")
    shutil.copyfile(_part(results, "timings", 0, "matmul"), path)
    return path


def _stray(results: Path) -> Path:
    path = _part(results, "records", 1, "extra")
    shutil.copyfile(_part(results, "records", 1, "main"), path)
    return path


def _lost(results: Path) -> Path:
    path = _part(results, "timings", 1, "matmul")
    path.unlink()
    return path


#: damage -> (what it does, the count verification names, whether the file itself is foreign)
DAMAGES = {
    "emptied": (_empty, "process 1 records: 0 row(s) found, 1 recorded by attempt 1", None),
    "another run's": (
        _another_runs,
        "process 1 records: 0 row(s) found, 1 recorded by attempt 1",
        "its run_id column says 'r2', but it lies under run_id=r1",
    ),
    "another process's": (
        _another_process,
        "process 1 timings: 0 row(s) found, 3 recorded by attempt 1",
        "its process_index column says 0, but its name says p000001",
    ),
    "a stray beside it": (_stray, "process 1 records: 2 row(s) found, 1 recorded by attempt 1", None),
    "lost": (_lost, "process 1 timings: 0 row(s) found, 3 recorded by attempt 1", None),
}


def test_each_process_records_what_it_wrote(results):
    con = connect(results)
    rows = con.execute("SELECT process_index, parts_json FROM processes ORDER BY 1").fetchall()
    wrote = [{"table": "records", "part": "main", "rows": 1}, {"table": "timings", "part": "matmul", "rows": 3}]
    assert [(p, json.loads(j)) for p, j in rows] == [(0, wrote), (1, wrote)]
    assert verify(con, run_id=RUN).label == "complete (2 of 2 processes)"


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_wrong_rows_fail_verification_and_the_next_launch_runs_the_process_again(results, compose, capsys, damage):
    act, counted, foreign = DAMAGES[damage]
    path = act(results)
    relative = path.relative_to(results).as_posix()

    with pytest.raises(VerificationError) as failed:
        verify(connect(results), run_id=RUN)
    assert counted in str(failed.value)
    if foreign:
        assert f"damaged part {relative}: {foreign}" in str(failed.value)
    assert analysis_main(["sql", "--results", str(results), "SELECT count(*) FROM records"]) == 0
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == (
        [f"warning: skipped {path.as_posix()}: {foreign} (copied from another run or process?)"] if foreign else []
    )
    assert latest_statuses(results, "demo", RUN) == {0: "completed", 1: "damaged"}  # resume agrees

    assert run(compose(*ARGS, f"out={results}"), progress=False) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    named = [line for line in err.splitlines() if line.startswith(("quarantined", "missing part"))]
    assert (
        len(named) == 1
        and named[0].startswith(f"{'missing' if damage == 'lost' else 'quarantined damaged'} part {path}: ")
        and "process 1 will run again" in named[0]
    ), err
    con = connect(results)
    assert verify(con, run_id=RUN).label == "complete (2 of 2 processes)"
    assert con.execute("SELECT process_index, count(*) FROM records GROUP BY 1 ORDER BY 1").fetchall() == [
        (0, 1),
        (1, 1),
    ]
    assert con.execute("SELECT process_index, count(*) FROM timings GROUP BY 1 ORDER BY 1").fetchall() == [
        (0, 3),
        (1, 3),
    ]
    assert con.execute("SELECT attempt, status FROM attempts WHERE process_index = 1 ORDER BY 1").fetchall() == [
        (1, "completed"),
        (2, "damaged"),
        (3, "completed"),
    ]


def test_status_rows_written_before_parts_json_still_verify(results):
    old = {b"stateaware.schema_version": b"5"}
    for status in (results / "processes").rglob("*.parquet"):
        _rewrite(status, lambda t: t.drop(["parts_json"]).replace_schema_metadata({**t.schema.metadata, **old}))
    con = connect(results)
    assert "parts_json" in {c for (c,) in con.execute("SELECT column_name FROM (DESCRIBE attempts)").fetchall()}
    assert verify(con, run_id=RUN).label == "complete (2 of 2 processes)"
    assert latest_statuses(results, "demo", RUN) == {0: "completed", 1: "completed"}
