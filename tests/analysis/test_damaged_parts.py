"""Damaged or foreign part files in a results directory: named by every reader, never in a view.

One real run (``cohort=demo launcher=inline``: the session's ``demo_results``) is built once;
each test copies it, drops one bad file into one table folder, and asserts what views,
verification, ``sql``, ``status`` and ``report`` do: the view keeps exactly the good rows and
the table's schema, the file is named with its problem, verification fails, no traceback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stateaware.analysis.__main__ import main
from stateaware.analysis.store.verify import VerificationError, verify
from stateaware.analysis.store.views import connect, views_sql

from stateaware.records.schema import TABLES
from stateaware.records.writer import Identity, RecordWriter

RUN = "r1"


pytestmark = pytest.mark.usefixtures("fresh_part_cache")


@pytest.fixture
def results(demo_results, tmp_path) -> Path:
    return Path(shutil.copytree(demo_results, tmp_path / "results"))


def _good_part(table: str, tmp_path: Path) -> Path:
    """A valid part of ``table`` (written by our writer), to damage."""
    writer = RecordWriter(tmp_path / "scratch", Identity(RUN, "demo", 0, "h" * 64, "cpu", 1.0))
    first_own_column = TABLES[table].names[7]  # after the seven identity columns
    return writer.write(table, {first_own_column: [None] * 50})


def _bad_bytes(table: str, kind: str, tmp_path: Path) -> bytes:
    good = _good_part(table, tmp_path)
    data = good.read_bytes()
    if kind == "zero":
        return b""
    if kind == "truncated":
        return data[: len(data) // 2]
    if kind == "random":
        return os.urandom(len(data))
    arrow = pq.read_table(good)
    if kind == "missing_column":
        arrow = arrow.drop(["process_index"])
    elif kind == "retyped_column":
        arrow = arrow.set_column(
            arrow.schema.get_field_index("process_index"), "process_index", pa.array(["zero"] * arrow.num_rows)
        )
    elif kind == "extra_column":
        arrow = arrow.append_column("forged", pa.array([1] * arrow.num_rows))
    elif kind == "foreign":
        arrow = pa.table({"a": [1, 2], "b": ["x", "y"]})
    pq.write_table(arrow, tmp_path / "bad.parquet")
    return (tmp_path / "bad.parquet").read_bytes()


KINDS = {
    "zero": "zero bytes",
    "truncated": "not a Parquet file (no footer)",
    "random": "not a Parquet file (no footer)",
    "missing_column": "missing column(s) 'process_index'",
    "retyped_column": "column 'process_index' is string, expected int32",
    "extra_column": "column(s) 'forged' not in the table",
    "foreign": "column(s) 'a', 'b' not in the table",
}


def _drop(results: Path, table: str, kind: str, tmp_path: Path) -> Path:
    bad = results / table / "cohort=demo" / f"run_id={RUN}" / "p000000-evil.parquet"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(_bad_bytes(table, kind, tmp_path))
    return bad


def _counts(results: Path) -> dict[str, int]:
    con = connect(results)
    return {
        t: con.execute(f"SELECT count(*) FROM {'attempts' if t == 'processes' else t}").fetchone()[0] for t in TABLES
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("table", TABLES)
def test_a_view_never_includes_a_bad_part_and_verification_names_it(results, table, kind, tmp_path):
    before = _counts(results)
    bad = _drop(results, table, kind, tmp_path)
    con = connect(results)
    view = "attempts" if table == "processes" else table
    assert _counts(results) == before
    described = con.execute(f"SELECT column_name FROM (DESCRIBE {view})").fetchall()
    assert [c for (c,) in described] == TABLES[table].names
    [(path, problem)] = con.execute("SELECT path, problem FROM damaged_parts").fetchall()
    assert path == bad.as_posix() and problem.startswith(KINDS[kind]), problem
    with pytest.raises(VerificationError) as failure:
        verify(con, run_id=RUN)
    assert f"damaged part {table}/cohort=demo/run_id={RUN}/p000000-evil.parquet: {KINDS[kind]}" in str(failure.value)
    # the plain SQL for the duckdb CLI leaves it out too
    assert all(bad.as_posix() not in statement for statement in views_sql(results))


def test_a_clean_run_verifies(results):
    assert verify(connect(results), run_id=RUN).label == "complete (2 of 2 processes)"


@pytest.mark.parametrize("kind", ["truncated", "retyped_column"])
def test_sql_skips_the_bad_part_with_one_warning_line(results, kind, tmp_path, capsys):
    bad = _drop(results, "timings", kind, tmp_path)
    assert (
        main(
            [
                "sql",
                "--results",
                str(results),
                "--format",
                "csv",
                "SELECT typeof(process_index), count(*) FROM timings GROUP BY ALL",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out == "typeof(process_index),count_star()\nINTEGER,6\n"
    assert captured.err == f"warning: skipped {bad.as_posix()}: {_problem(results, bad)}\n"


def _problem(results: Path, bad: Path) -> str:
    return dict(connect(results).execute("SELECT path, problem FROM damaged_parts").fetchall())[bad.as_posix()]


def test_status_shows_a_process_whose_status_part_is_damaged_as_unknown(results, tmp_path, capsys):
    status = next((results / "processes").rglob("p000001-*.parquet"))
    status.write_bytes(status.read_bytes()[:40])
    assert main(["status", "--results", str(results), "--format", "csv"]) == 1
    captured = capsys.readouterr()
    node = socket.gethostname()  # status names where each process ran (and its logs: none inline)
    assert captured.out.splitlines()[1:] == [f"demo,r1,0,completed,1,,,{node},,", "demo,r1,1,-,,,,,,"]
    assert (
        captured.err
        == f"warning: skipped {status.as_posix()}: not a Parquet file (no footer): truncated, damaged or foreign\n"
    )


@pytest.mark.parametrize("kind", ["zero", "foreign"])
def test_report_refuses_naming_the_bad_part_without_a_traceback(results, kind, tmp_path):
    bad = _drop(results, "records", kind, tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "report", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"damaged part records/cohort=demo/run_id={RUN}/{bad.name}: {KINDS[kind]}" in done.stderr
    assert not (results / "report" / "report.md").exists()


def test_a_link_out_of_the_results_directory_is_never_followed(results, tmp_path):
    outside = tmp_path / "outside.parquet"
    shutil.copy(next((results / "timings").rglob("*.parquet")), outside)
    link = results / "timings" / "cohort=demo" / f"run_id={RUN}" / "p000009-link.parquet"
    link.symlink_to(outside)
    con = connect(results)
    assert con.execute("SELECT count(*) FROM timings").fetchone() == (6,)
    assert con.execute("SELECT problem FROM damaged_parts").fetchall() == [
        ("a link to a file outside the results directory",)
    ]


def _page_of(path: Path, column: int) -> tuple[int, int]:
    """``(data page offset, chunk end)`` of one column chunk, from the footer."""
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(column)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    return chunk.data_page_offset, start + chunk.total_compressed_size


#: Damage inside a data page of a real part, its footer left valid: which bytes, and what is said.
PAGE_DAMAGE = {
    "payload flipped": (lambda first, end: range(end - 3, end - 1), "a page fails its checksum"),
    "page header zeroed": (lambda first, end: range(first, first + 6), "data does not decode"),
}


@pytest.mark.parametrize("damage", sorted(PAGE_DAMAGE))
def test_a_page_damaged_inside_a_valid_footer_is_named_by_every_reader(results, capsys, damage):
    where, said = PAGE_DAMAGE[damage]
    part = results / "timings" / "cohort=demo" / f"run_id={RUN}" / "p000001-matmul.parquet"
    column = pq.read_schema(part).get_field_index("step_ms")
    data = bytearray(part.read_bytes())
    for i in where(*_page_of(part, column)):
        data[i] ^= 0xFF if damage == "payload flipped" else data[i]
    part.write_bytes(bytes(data))
    assert pq.ParquetFile(part).metadata.num_rows == 3  # the footer still reads

    assert main(["sql", "--results", str(results), "--format", "csv", "SELECT count(*) FROM timings"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "count_star()\n3\n"
    assert captured.err.startswith(f"warning: skipped {part.as_posix()}: {said}") and captured.err.count("\n") == 1
    assert main(["status", "--results", str(results)]) == 0
    assert capsys.readouterr().err == captured.err
    assert main(["report", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert f"damaged part timings/cohort=demo/run_id={RUN}/p000001-matmul.parquet: {said}" in err
    assert "Traceback" not in err and "thrift" not in err.split("\n", 1)[0]
