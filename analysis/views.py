"""DuckDB views over one results directory: the SQL face of the record store.

Every table of ``stateaware.records.schema`` becomes a view of the same name, read with
``read_parquet('<DIR>/<table>/**/*.parquet', union_by_name = true, hive_partitioning =
true)``; a table with no parts yet is an empty view with the full schema, so a query
written today runs on any results directory. Two views are derived:

- ``attempts``: every ``processes`` row, one per attempt of a process;
- ``processes``: the latest attempt of each process (what "the status of process i" means).

Folders written by the analysis itself (e.g. ``comparisons``) become views too.
Temporary files of interrupted writes (``.name.tmp-PID``) never match ``*.parquet``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from stateaware.records.schema import TABLES

__all__ = ["VIEWS", "connect", "view_sql"]

#: Views every connection has, beyond any extra result folders.
VIEWS = ("runs", "processes", "attempts", *(t for t in TABLES if t not in ("runs", "processes")))

# The hive keys stay strings: a run id like "2026" must not become an integer.
_HIVE_TYPES = "{'cohort': 'VARCHAR', 'run_id': 'VARCHAR'}"


def view_sql(results: Path, folder: str) -> str:
    """The ``SELECT`` that reads every part under ``results/folder``."""
    pattern = (Path(results) / folder / "**" / "*.parquet").as_posix().replace("'", "''")
    return (f"SELECT * FROM read_parquet('{pattern}', union_by_name = true, hive_partitioning = true, "
            f"hive_types = {_HIVE_TYPES})")


def _has_parts(folder: Path) -> bool:
    return folder.is_dir() and next(folder.rglob("*.parquet"), None) is not None


def connect(results: Path | str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views over ``results``.

    The connection itself can write; :mod:`stateaware.analysis.sql` is the read-only
    front end for users. Views read the files at query time, so parts that land after
    ``connect`` are seen by the next query.
    """
    results = Path(results)
    con = duckdb.connect(":memory:")
    for table, schema in TABLES.items():
        name = "attempts" if table == "processes" else table
        if _has_parts(results / table):
            con.execute(f"CREATE VIEW {name} AS {view_sql(results, table)}")
        else:
            con.register(f"_empty_{table}", schema.empty_table())
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM _empty_{table}")
    con.execute(
        "CREATE VIEW processes AS SELECT * FROM attempts "
        "QUALIFY row_number() OVER (PARTITION BY run_id, cohort, process_index ORDER BY attempt DESC, finished_at DESC) = 1"
    )
    if results.is_dir():
        for folder in sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if folder.name not in TABLES and folder.name.isidentifier() and _has_parts(folder):
                con.execute(f"CREATE VIEW {folder.name} AS {view_sql(results, folder.name)}")
    return con
