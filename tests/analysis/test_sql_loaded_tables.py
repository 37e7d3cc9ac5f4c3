"""Tables DuckDB reads itself (NOTE [ Tables DuckDB reads itself ] in analysis/store/views.py): the
``sql`` command loads the tables its statements name (record tables and the analysis' result
tables), with the columns they name, and every answer equals the one the Arrow-backed views
give — parts of older schema versions (columns renamed, columns added since) included."""

from __future__ import annotations

import math
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stateaware.analysis.stats.comparisons import SCHEMA as COMPARISONS
from stateaware.analysis.stats.comparisons import comparisons_path
from stateaware.analysis.store.sql import columns_read, query
from stateaware.analysis.store.views import VIEWS, connect, snapshot

from stateaware.records.schema import RENAMED, SCHEMA_VERSION, TABLES
from stateaware.records.writer import Identity, RecordWriter, write_atomic


def _write_run(out, run: str, cohort: str, processes: int) -> None:
    for index in range(processes):
        writer = RecordWriter(out, Identity(run, cohort, index, "h" * 64, "cpu", 1.0))
        writer.write("processes", [{"status": "completed", "attempt": 1}], part="a001")
        writer.write(
            "timings",
            {
                "method": ["joint", "eager"] * 3,
                "step": list(range(6)),
                "warmup": [True, False] * 3,
                "step_ms": [1.5 * (index + 1) + s for s in range(6)],
                "peak_allocated_bytes": [2**20 * (s + 1) for s in range(6)],
            },
        )
        writer.write("records", [{"method": "joint", "check_name": "bytes", "outcome": "match"}], part="check")


def _comparison(out, run: str, cohort: str, *, before_clocks: bool = False) -> None:
    """A run's ``comparisons`` part; ``before_clocks``: as written before its clock columns were."""
    row = {name: None for name in COMPARISONS.names} | {
        "run_id": run, "cohort": cohort, "comparison": "joint/eager", "metric": "step_ms",
        "numerator": "joint", "denominator": "eager", "estimate": 0.8, "lower": 0.7, "upper": 0.9,
        "confidence": 0.99, "alpha": 0.05, "m": 4, "draws": 100, "seed": 0, "processes": 3,
        "partial": False, "clock": "wall", "other_clock": "cpu", "other_estimate": 0.85,
    }  # fmt: skip
    table = pa.Table.from_pylist([row], schema=COMPARISONS)
    if before_clocks:
        table = table.drop([n for n in table.column_names if "clock" in n or n.startswith("other_")])
    write_atomic(table, comparisons_path(out, cohort, run))


def _old_part(out, table: str, run: str, change) -> None:
    """A part of ``run`` as an older schema version wrote it (``change`` edits a current one)."""
    writer = RecordWriter(out, Identity(run, "old", 0, "h" * 64, "cpu", 1.0))
    if table == "records":
        writer.write("records", [{"method": "m", "check_name": "replay", "outcome": "reject"}], part="old")
    else:
        writer.write(table, {"method": ["m"], "step": [0], "warmup": [False], "step_ms": [2.0],
                             "peak_allocated_bytes": [1]}, part="old")  # fmt: skip
    path = next((out / table / "cohort=old" / f"run_id={run}").glob("*-old.parquet"))
    old, version = change(pq.read_table(path))
    pq.write_table(old.replace_schema_metadata({b"stateaware.schema_version": str(version).encode()}), path)


@pytest.fixture
def store(tmp_path):
    out = tmp_path / "results"
    _write_run(out, "r1", "co", 3)
    _write_run(out, "r2", "co", 2)
    _write_run(out, "2026", "44", 1)  # ids that look like numbers stay strings
    renamed_from = next(old for old, (new, _) in RENAMED.items() if new == "check_name")

    def before_rename(table: pa.Table) -> tuple[pa.Table, int]:
        names = [renamed_from if n == "check_name" else n for n in table.column_names]
        return table.rename_columns(names), RENAMED[renamed_from][1] - 1

    _old_part(out, "records", "o1", before_rename)
    _old_part(out, "timings", "o2", lambda table: (table.drop(["peak_allocated_bytes"]), SCHEMA_VERSION - 1))
    _comparison(out, "r1", "co")
    _comparison(out, "r2", "co", before_clocks=True)
    return out


def _multiset(con, sql: str) -> Counter:
    return Counter(con.execute(sql).fetchall())


def test_every_view_loaded_equals_its_arrow_view_rows_columns_and_types(store):
    parts = snapshot(store)
    arrow = connect(store, parts=parts)
    loaded = connect(store, parts=parts, load={table: None for table in [*TABLES, "comparisons"]})
    for view in VIEWS:
        assert loaded.execute(f'DESCRIBE "{view}"').fetchall() == arrow.execute(f'DESCRIBE "{view}"').fetchall()
        assert _multiset(loaded, f'SELECT * FROM "{view}"') == _multiset(arrow, f'SELECT * FROM "{view}"'), view
    # The old parts read under the current names, nulls where a column did not exist yet.
    assert loaded.execute("SELECT check_name FROM records WHERE run_id = 'o1'").fetchall() == [("replay",)]
    assert loaded.execute("SELECT peak_allocated_bytes FROM timings WHERE run_id = 'o2'").fetchall() == [(None,)]
    clocks = loaded.execute("SELECT run_id, clock FROM comparisons ORDER BY 1").fetchall()
    assert clocks == [("r1", "wall"), ("r2", None)]


QUERIES = [
    "SELECT method, exp(avg(ln(step_ms))) AS g FROM timings WHERE NOT warmup GROUP BY method ORDER BY method",
    "SELECT count(*) FROM timings",
    "SELECT * FROM processes ORDER BY ALL",
    "SELECT p.status, t.step_ms FROM processes p JOIN timings t USING (run_id, cohort, process_index) ORDER BY ALL",
    "SELECT * FROM runs NATURAL JOIN processes ORDER BY ALL",
    "SELECT COLUMNS('step.*') FROM timings ORDER BY ALL",
    "SELECT t FROM timings t ORDER BY t.step_ms, t.run_id, t.process_index, t.method",
    "SELECT timings FROM timings ORDER BY ALL",
    "FROM attempts ORDER BY ALL",
    "WITH x AS (SELECT run_id, max(step_ms) AS m FROM timings GROUP BY 1) SELECT * FROM x ORDER BY 1",
    "SELECT run_id, (SELECT count(*) FROM records r WHERE r.run_id = t.run_id) AS n FROM timings t ORDER BY ALL",
    "SELECT run_id, check_name FROM records ORDER BY ALL",
    "SELECT typeof(run_id), run_id, cohort FROM timings WHERE cohort = '44' LIMIT 1",
    "SELECT count(*) FROM comparisons",
    "SELECT run_id, estimate, clock, other_estimate FROM comparisons ORDER BY ALL",
    "SELECT c.run_id, c.estimate, count(*) FROM comparisons c JOIN timings USING (run_id) GROUP BY ALL ORDER BY ALL",
    "DESCRIBE timings",
    "SELECT count(*) FROM processes; SELECT max(step) FROM timings",
    "SELECT count(*) FROM query_table('timings')",
    "SELECT count(*) FROM query_table('tim' || 'ings')",
    "SELECT processes FROM runs ORDER BY ALL",
    "SELECT filename, count(*) FROM _parts_timings GROUP BY ALL ORDER BY ALL",
    "SELECT * FROM timings ORDER BY ALL; SELECT count(DISTINCT filename) FROM _parts_records",
]


def _same_answer(ours: list, theirs: list) -> bool:
    """Equal rows, a float equal to a few ulps: DuckDB sums a float column in parallel, in an
    order that depends on how its threads split the scan (Arrow's fragments or the loaded
    table's row groups), so ``avg`` may differ in its last bits between two reads alike."""

    def same(a: object, b: object) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-13, abs_tol=0.0)
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
            return len(a) == len(b) and all(map(same, a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return type(a) is type(b) and a == b

    return same(ours, theirs)


@pytest.mark.parametrize("sql", QUERIES)
def test_the_sql_command_answers_as_the_arrow_views_do(store, sql):
    arrow = connect(store)
    expected = [arrow.execute(text).fetchall() for text in sql.split("; ")]
    answered = [rows for _names, rows in query(store, sql)]
    assert _same_answer(answered, expected), (answered, expected)


@pytest.mark.parametrize("run_ids", [["r2"], ["o1", "o2"], ["2026"]])
def test_a_pruned_query_loads_the_chosen_runs_only(store, run_ids):
    import io

    from stateaware.analysis.store.sql import run

    out = io.StringIO()
    run(store, "SELECT run_id, count(*) FROM timings GROUP BY 1 ORDER BY 1", out, fmt="csv", run_ids=run_ids)
    arrow = connect(store, run_ids=run_ids)
    rows = arrow.execute("SELECT run_id, count(*) FROM timings GROUP BY 1 ORDER BY 1").fetchall()
    assert out.getvalue().splitlines()[1:] == [f"{r},{n}" for r, n in rows] and rows


def test_columns_read_names_the_tables_and_columns_a_statement_may_read():
    assert columns_read(["SELECT count(*) FROM timings"]) == {"timings": set()}
    assert columns_read(["SELECT method, step_ms FROM timings WHERE NOT warmup"]) == {
        "timings": {"method", "step_ms", "warmup"}
    }
    both = columns_read(["SELECT p.status FROM attempts p JOIN runs r USING (run_id)"])
    assert both is not None and both["processes"] >= {"status", "run_id"} and both["runs"] >= {"run_id"}
    for whole in ["SELECT * FROM runs", "SELECT t FROM timings t", "FROM timings"]:
        assert set((columns_read([whole]) or {}).values()) == {None}, whole
    # A parts relation: every column and each row's file, whatever another statement reads.
    with_files = {"timings": {*TABLES["timings"].names, "filename"}}
    assert columns_read(["SELECT step FROM _parts_timings"]) == with_files
    assert columns_read(["SELECT * FROM timings", "SELECT filename FROM _parts_timings"]) == with_files
    assert columns_read(["EXPLAIN SELECT step FROM timings"]) == {"timings": {"step"}}
    assert columns_read(["SELECT 1"]) == {}
    assert columns_read(["SELECT count(*) FROM query_table('tim' || 'ings')"]) is None  # a computed name
    assert columns_read(["SELECT 'timings' AS name"]) == {"timings": None}  # a view named as a value


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(columns=st.lists(st.sampled_from(TABLES["timings"].names), min_size=1, max_size=6, unique=True))
def test_any_choice_of_columns_reads_the_same(store, columns):
    listed = ", ".join(f'"{c}"' for c in columns)
    sql = f"SELECT {listed} FROM timings ORDER BY ALL"
    assert query(store, sql)[0][1] == connect(store).execute(sql).fetchall()


def test_a_loaded_table_keeps_the_listed_order_of_its_parts_read_either_way(store, monkeypatch):
    """Few files are read in their listed order, many in any order and sorted back
    (``ORDERED_READ_MAX_FILES``): the rows come the same, each part's rows together, the
    parts in the order the snapshot lists them."""
    import itertools

    import stateaware.analysis.store.views as views

    runs = ["r1", "r2", "2026"]  # parts of one shape (o2's lacks a column): one read_parquet
    parts = snapshot(store, runs)
    answers = []
    for most in (10**6, 0):
        monkeypatch.setattr(views, "ORDERED_READ_MAX_FILES", most)
        con = connect(store, runs, parts=parts, load={"timings": ["filename"]})
        answers.append(con.execute("SELECT * FROM _parts_timings").fetchall())
    assert answers[0] == answers[1]
    timings = next(groups for folder, _schema, groups, _bad in parts.folders if folder == "timings")
    listed = [path.resolve().as_posix() for paths in timings.values() for path in paths]
    files = [row[-1] for row in answers[0]]
    assert [f for f, _rows in itertools.groupby(files)] == listed and len(listed) == 6


def test_queries_from_many_threads_each_get_their_own_database(store):
    """A command hands the database its statements were parsed with over to its views
    (``sql._database_for_views``): threads querying at once never share one (a view created
    twice in one database would fail)."""
    from concurrent.futures import ThreadPoolExecutor

    sql = "SELECT run_id, count(*) FROM timings GROUP BY run_id ORDER BY run_id"
    expected = query(store, sql)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: query(store, sql), range(16)))
    assert answers == [expected] * 16


def test_the_sql_command_opens_one_database_while_it_checks_the_parts(store, monkeypatch, capsys):
    """``analysis sql`` opens its database in the background before its scan
    (``sql.open_database_early``), parses the statements in it and builds the views in it:
    one ``duckdb.connect`` per command, on the opening thread, whatever the query."""
    import threading

    import duckdb
    from stateaware.analysis.__main__ import main
    from stateaware.analysis.store import sql as store_sql

    # As in a fresh command's process: no database opened early by an earlier test's parse.
    monkeypatch.setattr(store_sql, "_OPENED", None)
    opened = []
    real = duckdb.connect
    monkeypatch.setattr(
        duckdb, "connect", lambda *a, **k: opened.append(threading.current_thread().name) or real(*a, **k)
    )
    for sql in ["SELECT count(*) FROM timings", "SELECT 1; SELECT count(*) FROM processes"]:
        opened.clear()
        assert main(["sql", "--results", str(store), "--format", "csv", sql]) == 0
        assert opened == ["stateaware-open-database"], sql
    assert capsys.readouterr().out == "count_star()\n37\n1\n1\n\ncount_star()\n6\n"
