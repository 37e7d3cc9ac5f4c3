"""SQL over the views: every view exists, joins work, nothing writes."""

from __future__ import annotations

import pytest
from stateaware.analysis.store.sql import ReadOnlyError, format_result, query
from stateaware.analysis.store.views import VIEWS, connect

from stateaware.records.schema import RESULT_TABLES, TABLES
from stateaware.records.writer import Identity, RecordWriter


def _write(out, index, *, status="completed", attempt=1, steps=3):
    writer = RecordWriter(out, Identity("run", "co", index, "h" * 64, "cpu", 1.0))
    writer.write("processes", [{"status": status, "attempt": attempt}], part=f"a{attempt:03d}")
    writer.write(
        "timings",
        {
            "method": ["joint"] * steps,
            "step": list(range(steps)),
            "warmup": [False] * steps,
            "step_ms": [10.0 * (index + 1)] * steps,
            "peak_allocated_bytes": [2**30] * steps,
        },
    )


def test_views_exist_with_their_columns_on_an_empty_directory(tmp_path):
    con = connect(tmp_path / "nothing-here")
    for view in VIEWS:
        names = [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()]
        assert names[:2] == ["run_id", "cohort"], view
        assert con.execute(f"SELECT count(*) FROM {view}").fetchone() == (0,)
    for table, schema in TABLES.items():
        view = "attempts" if table == "processes" else table
        assert [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()] == schema.names
    # The analysis' own tables (README queries `comparisons`) exist before any report ran.
    for table, schema in RESULT_TABLES.items():
        assert [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()] == schema.names
    assert set(RESULT_TABLES) <= set(VIEWS) and "comparisons" in RESULT_TABLES


def test_the_views_sql_of_an_empty_directory_has_the_comparisons_view_too(tmp_path):
    import duckdb
    from stateaware.analysis.store.views import views_sql

    con = duckdb.connect()
    for statement in views_sql(tmp_path):
        con.execute(statement)
    assert con.execute("SELECT count(*) FROM comparisons").fetchone() == (0,)
    assert [r[0] for r in con.execute("DESCRIBE comparisons").fetchall()] == RESULT_TABLES["comparisons"].names


def test_records_written_before_check_was_renamed_read_as_check_name(tmp_path, sql):
    """A schema-4 part has ``check`` (a DuckDB keyword); the view reads it as ``check_name``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stateaware.records.schema import RENAMED

    writer = RecordWriter(tmp_path, Identity("new", "co", 0, "h" * 64, "cpu", 1.0))
    writer.write("records", [{"method": "a", "check_name": "bytes", "outcome": "match"}], part="now")
    old = pq.read_table(next((tmp_path / "records").rglob("*.parquet")))
    old = old.rename_columns(["check" if n == "check_name" else n for n in old.column_names])
    old = old.set_column(old.column_names.index("run_id"), "run_id", pa.array(["old"], pa.string()))
    before_rename = RENAMED["check"][1] - 1  # the last version that called it `check`
    old = old.replace_schema_metadata({b"stateaware.schema_version": str(before_rename).encode()})
    folder = tmp_path / "records" / "cohort=co" / "run_id=old"
    folder.mkdir(parents=True)
    pq.write_table(old, folder / "old.parquet")
    assert sql(tmp_path, "SELECT run_id, check_name FROM records ORDER BY run_id") == [
        ("new", "bytes"),
        ("old", "bytes"),
    ]
    assert sql(tmp_path, "SELECT count(*) FROM damaged_parts") == [(0,)]
    # ... and the plain-SQL views say the same.
    import duckdb
    from stateaware.analysis.store.views import views_sql

    con = duckdb.connect()
    for statement in views_sql(tmp_path):
        con.execute(statement)
    assert con.execute("SELECT run_id, check_name FROM records ORDER BY run_id").fetchall() == [
        ("new", "bytes"),
        ("old", "bytes"),
    ]


def test_processes_shows_the_latest_attempt_and_attempts_all(tmp_path, sql):
    _write(tmp_path, 0)
    _write(tmp_path, 1, status="failed", attempt=1)
    _write(tmp_path, 1, status="completed", attempt=2)
    assert sql(tmp_path, "SELECT process_index, status, attempt FROM processes ORDER BY 1") == [
        (0, "completed", 1),
        (1, "completed", 2),
    ]
    assert sql(tmp_path, "SELECT count(*) FROM attempts") == [(3,)]
    assert sql(tmp_path, "SELECT slurm_job_id, node FROM processes LIMIT 1") == [(None, None)]


def test_joins_across_views(tmp_path, sql):
    for i in range(3):
        _write(tmp_path, i)
    rows = sql(
        tmp_path,
        """
        SELECT p.process_index, avg(t.step_ms) AS ms, count(*) AS n
        FROM processes p JOIN timings t USING (run_id, cohort, process_index)
        WHERE p.status = 'completed' AND NOT t.warmup GROUP BY ALL ORDER BY 1""",
    )
    assert rows == [(0, 10.0, 3), (1, 20.0, 3), (2, 30.0, 3)]


def test_hive_keys_stay_strings(tmp_path, sql):
    RecordWriter(tmp_path, Identity("2026", "44", 0, "h", "cpu", 1.0)).write("records", [{"method": "m"}])
    assert sql(tmp_path, "SELECT typeof(run_id), run_id, cohort FROM records") == [("VARCHAR", "2026", "44")]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO timings SELECT * FROM timings",
        "CREATE TABLE x AS SELECT 1",
        "COPY (SELECT 1) TO 'out.csv'",
        "ATTACH 'other.db'",
        "SET threads = 1",
        "PRAGMA version",
        "SELECT 1; DROP VIEW timings",
    ],
)
def test_writes_are_refused_before_anything_runs(tmp_path, statement, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ReadOnlyError, match="refused: .*results are read-only"):
        query(tmp_path, statement)
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "other.db").exists()


def test_reads_of_every_form_run(tmp_path):
    _write(tmp_path, 0)
    for text in (
        "SELECT 1",
        "WITH a AS (SELECT 2 AS x) SELECT x FROM a",
        "DESCRIBE timings",
        "FROM timings SELECT count(*)",
        "EXPLAIN SELECT * FROM timings",
        "SUMMARIZE timings",
    ):
        assert query(tmp_path, text)


def test_formats():
    names, rows = ["method", "ms", "n"], [("joint", 3061.5, 50), ("eager_whole", None, 7)]
    table = format_result(names, rows).splitlines()
    assert table[0] == "method           ms   n"
    assert table[2] == "joint        3061.5  50"
    assert table[3] == "eager_whole    NULL   7"
    assert table[-1] == "(2 rows)"
    assert format_result(names, rows, "csv") == "method,ms,n\njoint,3061.5,50\neager_whole,,7"
    assert format_result(names, rows[:1], "json") == '[\n {\n  "method": "joint",\n  "ms": 3061.5,\n  "n": 50\n }\n]'


def test_the_views_as_plain_sql_work_in_a_bare_duckdb(tmp_path):
    import duckdb
    from stateaware.analysis.store.views import views_sql

    _write(tmp_path, 0)
    con = duckdb.connect()
    con.execute("\n".join(views_sql(tmp_path)))
    assert con.execute("SELECT count(*) FROM timings").fetchone() == (3,)
    assert con.execute("SELECT count(*) FROM profiles").fetchone() == (0,)


def test_views_sql_checks_each_part_once_for_the_warnings_and_the_statements(tmp_path, monkeypatch, capsys):
    from stateaware.analysis.__main__ import main

    from stateaware.records.part_cache import PartChecks

    for index in range(2):
        _write(tmp_path, index)
    (tmp_path / "timings" / "broken.parquet").write_bytes(b"not parquet")
    checked = []
    real = PartChecks.inspect
    monkeypatch.setattr(
        PartChecks, "inspect", lambda self, path, *a, **k: checked.append(path) or real(self, path, *a, **k)
    )
    assert main(["views", "--sql", "--results", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert sorted(checked) == sorted(tmp_path.rglob("*.parquet")) and len(checked) == 5
    assert err.count("warning: skipped") == 1 and "broken.parquet" in err
    assert out.count('CREATE VIEW "timings" AS') == 1 and "broken.parquet" not in out


def test_the_command_ends_at_once_with_every_byte_of_its_output_written(tmp_path):
    """``python -m stateaware.analysis sql`` skips the interpreter's teardown
    (``run_main(skip_teardown=True)``): what it printed is all there, on both streams, with
    its exit status."""
    import os
    import subprocess
    import sys

    for index in range(2):
        _write(tmp_path, index)
    (tmp_path / "timings" / "broken.parquet").write_bytes(b"not parquet")
    env = {**os.environ, "STATEAWARE_CACHE": str(tmp_path / "cache")}

    def sql(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "stateaware.analysis", "sql", "--results", str(tmp_path), *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)

    done = sql("--format", "csv", "SELECT range AS n FROM range(100000); SELECT count(*) FROM timings")
    assert done.returncode == 0
    assert done.stdout == "n\n" + "".join(f"{n}\n" for n in range(100000)) + "\ncount_star()\n6\n"
    assert done.stderr.startswith("warning: skipped ") and done.stderr.count("\n") == 1
    refused = sql("DROP TABLE timings")
    assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.startswith("error: refused: DROP")
