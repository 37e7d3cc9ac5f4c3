"""Read-only SQL by construction: no statement writes, installs, loads or reads outside the views.

Every statement below is run through the CLI (``main(["sql", ...])``) and must end in one
error line and exit 2, leaving every file of the results directory byte-identical; the
lock itself (``connect(read_only=True)``) is tested without the keyword filter in front.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stateaware.analysis.__main__ import main
from stateaware.analysis.store.views import connect

from stateaware.records.writer import Identity, RecordWriter


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("results")
    for index in range(2):
        writer = RecordWriter(out, Identity("r1", "demo", index, "h" * 64, "cpu", 1.0))
        writer.write("runs", [{"processes": 2, "launcher": "inline"}], part="manifest")
        writer.write("processes", [{"status": "completed", "attempt": 1}], part="a001")
        writer.write("timings", {"method": ["joint"] * 3, "step": [0, 1, 2], "step_ms": [1.0, 2.0, 3.0]})
    # a Parquet file beside (not inside) the results directory, reachable by "../"
    pq.write_table(pa.table({"secret": [42]}), out.parent / "outside.parquet")
    return out


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the SHA-256 of its bytes (and every directory, as '')."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            tree[os.path.relpath(os.path.join(dirpath, name), root)] = ""
        for name in filenames:
            path = os.path.join(dirpath, name)
            tree[os.path.relpath(path, root)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return tree


def _part(results: Path) -> str:
    return str(next((results / "timings").rglob("*.parquet")))


# {R} is the results directory, {P} one of its part files.
STATEMENTS = [
    "COPY (SELECT 1) TO '{P}'",
    "COPY (SELECT * FROM timings) TO '{R}/forged.parquet' (FORMAT parquet)",
    "EXPLAIN ANALYZE COPY (SELECT * FROM timings) TO '{P}' (FORMAT parquet)",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{R}/x.csv'",
    "explain   analyze\n copy (select 1) to '{R}/../escaped.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '/dev/stdout'",
    "CREATE TABLE t AS SELECT * FROM timings; COPY t TO '{R}/t.csv'",
    "SELECT 1; COPY (SELECT 1) TO '{R}/second.csv'",
    "EXPORT DATABASE '{R}/export'",
    "EXPLAIN ANALYZE EXPORT DATABASE '{R}/export'",
    "ATTACH '{R}/new.db' AS n",
    "EXPLAIN ANALYZE ATTACH '{R}/new.db' AS n",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET lock_configuration",
    "SET allowed_directories = ['/']",
    "PRAGMA enable_profiling",
    "EXPLAIN ANALYZE SET enable_external_access = true",
    "INSTALL httpfs",
    "FORCE INSTALL httpfs",
    "LOAD httpfs",
    "EXPLAIN ANALYZE INSTALL httpfs",
    "EXPLAIN ANALYZE LOAD httpfs",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM read_json('/etc/passwd')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM glob('{R}/**')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM read_parquet('{R}/../outside.parquet')",
    "SELECT * FROM read_parquet('{O}')",
    "SELECT * FROM '{O}'",
    "SELECT * FROM read_parquet('{P}')",
    "WITH x AS (SELECT * FROM read_text('/etc/hostname')) SELECT * FROM x",
    "EXPLAIN ANALYZE SELECT * FROM read_text('/etc/passwd')",
    "CALL pragma_version(); SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM os",  # a Python replacement scan of a module in scope
]


@pytest.mark.parametrize("statement", STATEMENTS)
def test_no_statement_writes_installs_or_reads_outside(results, statement, capsys, monkeypatch):
    monkeypatch.chdir(results)
    sql = statement.format(R=results, P=_part(results), O=results.parent / "outside.parquet")
    before = _tree(results)
    assert main(["sql", "--results", str(results), sql]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    assert _tree(results) == before
    assert not (results.parent / "escaped.csv").exists()


LOCK_BYPASSES = [  # what the keyword filter would pass, or a statement run without it
    "EXPLAIN ANALYZE COPY (SELECT * FROM timings) TO '{P}' (FORMAT parquet)",
    "COPY (SELECT 1) TO '{R}/x.csv'",
    "EXPORT DATABASE '{R}/export'",
    "ATTACH '{R}/new.db' AS n",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "SET python_enable_replacements = true",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_parquet('{R}/../outside.parquet')",
]


@pytest.mark.parametrize("statement", LOCK_BYPASSES)
def test_the_locked_connection_refuses_without_the_filter(results, statement):
    sql = statement.format(R=results, P=_part(results))
    before = _tree(results)
    con = connect(results, read_only=True)
    with pytest.raises(duckdb.Error):
        con.execute(sql)
    assert _tree(results) == before
    assert con.execute("SELECT count(*) FROM timings").fetchone() == (6,)  # the views still read


def test_reads_through_the_views_still_work_when_locked(results, capsys):
    assert (
        main(
            [
                "sql",
                "--results",
                str(results),
                "--format",
                "csv",
                "SELECT process_index, sum(step_ms) FROM timings GROUP BY ALL ORDER BY 1",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == "process_index,sum(step_ms)\n0,6.0\n1,6.0\n"


def test_a_writable_connection_is_only_given_when_asked(results, tmp_path):
    con = connect(results, read_only=False)
    con.execute(f"COPY (SELECT count(*) AS n FROM timings) TO '{tmp_path / 'n.csv'}'")
    assert (tmp_path / "n.csv").read_text() == "n\n6\n"


# -- every statement form that is not a read is refused by DuckDB's parser, before anything runs --

# (statement, what the one error line names). The lock keeps the disk safe; these would
# otherwise change the connection's own catalog, so that a later statement of the same input
# reads forged views (NOTE [ Only reads run ] in analysis/store/sql.py).
FORGERIES = [
    (
        "EXPLAIN ANALYZE CREATE OR REPLACE VIEW records AS SELECT 'forged' AS x; SELECT * FROM records",
        "EXPLAIN ANALYZE (it runs the statement it explains) (statement 1 of 2)",
    ),
    ("explain analyze create or replace view timings as select 'forged' as method", "EXPLAIN ANALYZE"),
    ("EXPLAIN ANALYSE DROP VIEW timings", "EXPLAIN ANALYZE"),
    ("/* why not */ Explain Analyze DROP VIEW IF EXISTS runs", "EXPLAIN ANALYZE"),
    ("EXPLAIN ANALYZE INSERT INTO damaged_parts SELECT * FROM damaged_parts", "EXPLAIN ANALYZE"),
    ("EXPLAIN (ANALYZE) INSERT INTO damaged_parts SELECT * FROM damaged_parts", "EXPLAIN ANALYZE"),
    ("EXPLAIN (FORMAT json, ANALYZE true) SET VARIABLE forged = 1", "EXPLAIN ANALYZE"),
    ("EXPLAIN ANALYZE SET VARIABLE forged = 'yes'", "EXPLAIN ANALYZE"),
    ("-- a macro\nEXPLAIN ANALYZE CREATE MACRO timings_count() AS 1", "EXPLAIN ANALYZE"),
    ("eXpLaIn AnAlYzE create or replace temp macro m(x) as x", "EXPLAIN ANALYZE"),
    (
        "SELECT 1; EXPLAIN ANALYZE CREATE VIEW x AS SELECT 1",
        "EXPLAIN ANALYZE (it runs the statement it explains) (statement 2 of 2)",
    ),
    ("SELECT 1; CREATE OR REPLACE VIEW timings AS SELECT 'forged' AS method", "CREATE statement (statement 2 of 2)"),
    ("SELECT 1;\n-- and then\nDROP VIEW timings;", "DROP statement (statement 2 of 2)"),
    (
        "select 1; select 2; insert into damaged_parts select * from damaged_parts",
        "INSERT statement (statement 3 of 3)",
    ),
    ("SET VARIABLE forged = 1; SELECT getvariable('forged')", "SET statement (statement 1 of 2)"),
    ("create macro timings_count() as 1", "CREATE statement"),
    ("CREATE OR REPLACE TEMP VIEW damaged_parts AS SELECT 1", "CREATE statement"),
    ("ALTER VIEW timings RENAME TO t", "ALTER statement"),
    ("COMMENT ON VIEW timings IS 'forged'", "ALTER statement"),
    ("DELETE FROM damaged_parts", "DELETE statement"),
    ("UPDATE damaged_parts SET problem = 'none'", "UPDATE statement"),
    ("PREPARE p AS SELECT 1", "PREPARE statement"),
    ("BEGIN TRANSACTION", "TRANSACTION statement"),
    ("USE memory", "SET statement"),
    ("CHECKPOINT", "CALL statement"),
    ("VACUUM", "VACUUM statement"),
    ("PIVOT timings ON method", "MULTI statement"),
    (
        "WITH a AS (INSERT INTO damaged_parts SELECT * FROM damaged_parts RETURNING *) SELECT count(*) FROM a",
        "INSERT inside a SELECT (a data-modifying WITH)",
    ),
    ("with a as (delete from damaged_parts returning *) select * from a", "DELETE inside a SELECT"),
    ("WITH a AS MATERIALIZED (UPDATE damaged_parts SET problem = 'x' RETURNING *) FROM a", "UPDATE inside a SELECT"),
    ("WITH a AS (COPY (SELECT 1) TO '{R}/x.csv') SELECT * FROM a", "COPY inside a SELECT"),
    ("SELECT (WITH a AS (DELETE FROM damaged_parts RETURNING *) SELECT count(*) FROM a)", "DELETE inside a SELECT"),
    ("EXPLAIN WITH a AS (DELETE FROM damaged_parts RETURNING *) SELECT * FROM a", "EXPLAIN of DELETE inside"),
    ("EXPLAIN INSERT INTO damaged_parts SELECT * FROM damaged_parts", "EXPLAIN INSERT statement"),
    ("explain create or replace view timings as select 1", "EXPLAIN CREATE statement"),
    ("EXPLAIN (FORMAT json) DROP VIEW timings", "EXPLAIN DROP statement"),
    ("SELECT * FROM query('SELECT 1')", "query() (it runs SQL text"),
    (
        "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('WITH a AS (DELETE FROM damaged_parts "
        "RETURNING *) SELECT * FROM a'))",
        "json_execute_serialized_sql()",
    ),
]


@pytest.mark.parametrize(("statement", "named"), FORGERIES)
def test_no_statement_that_is_not_a_read_runs(results, statement, named, capsys, monkeypatch):
    monkeypatch.chdir(results)
    before = _tree(results)
    assert main(["sql", "--results", str(results), statement.format(R=results)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: refused: "), captured.err
    assert named in lines[0] and "no statement of the input ran" in lines[0]
    assert "Traceback" not in captured.err and captured.out == ""  # not even a SELECT before it
    assert _tree(results) == before


def test_the_forged_view_of_the_issue_is_never_read(results, capsys):
    forged = "EXPLAIN ANALYZE CREATE OR REPLACE VIEW timings AS SELECT 'forged' AS method; SELECT * FROM timings"
    assert main(["sql", "--results", str(results), forged]) == 2
    assert "forged" not in capsys.readouterr().out
    assert main(["sql", "--results", str(results), "--format", "csv", "SELECT DISTINCT method FROM timings"]) == 0
    assert capsys.readouterr().out == "method\njoint\n"


READS = [
    "SELECT 1",
    "select 1; SELECT 2",
    "-- a comment\n/* and another */ SELECT 'insert into x; drop view y' AS \"delete\"",
    "/* EXPLAIN ANALYZE */ SELECT 1",
    "WITH a AS (SELECT 2 AS x) SELECT x FROM a",
    "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 3) SELECT * FROM t",
    "VALUES (1), (2)",
    "FROM timings",
    "FROM timings SELECT count(*)",
    "TABLE timings",
    "SELECT 1 UNION ALL SELECT 2 EXCEPT SELECT 3",
    "DESCRIBE timings",
    "SHOW TABLES",
    "SUMMARIZE timings",
    "PIVOT timings ON method IN ('joint') USING count(*)",
    "SELECT * FROM query_table('timings')",
    "EXPLAIN SELECT count(*) FROM timings",
    "explain select 1",
    "-- plan\nExplain FROM timings",
    "EXPLAIN (FORMAT json) SELECT * FROM timings",
    "EXPLAIN (SELECT 1)",
    "EXPLAIN WITH a AS (SELECT 1) SELECT * FROM a",
    "EXPLAIN DESCRIBE timings",
]


@pytest.mark.parametrize("statement", READS)
def test_every_form_of_read_runs(results, statement, capsys):
    assert main(["sql", "--results", str(results), statement]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.strip()


def test_a_statement_nested_too_deeply_to_check_is_refused_in_one_line(results, capsys):
    deep = "SELECT " + "list_value(" * 900 + "1" + ")" * 900 + " IS NOT NULL"
    assert main(["sql", "--results", str(results), deep]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "cannot be checked (nested too deeply)" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""
