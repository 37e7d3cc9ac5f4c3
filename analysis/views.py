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

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from stateaware.records.schema import TABLES

__all__ = ["VIEWS", "connect", "view_sql", "views_sql"]

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


_DUCKDB_TYPES = {"string": "VARCHAR", "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT",
                 "double": "DOUBLE", "bool": "BOOLEAN", "timestamp[us, tz=UTC]": "TIMESTAMPTZ",
                 "list<item: string>": "VARCHAR[]"}


def _empty_sql(schema: pa.Schema) -> str:
    columns = ", ".join(f"CAST(NULL AS {_DUCKDB_TYPES[str(f.type)]}) AS {f.name}" for f in schema)
    return f"SELECT {columns} WHERE false"


def views_sql(results: Path | str, run_ids: Sequence[str] | None = None) -> list[str]:
    """The ``CREATE VIEW`` statements for ``results``, in an order that runs as written.

    Plain SQL, so the same views work in the ``duckdb`` CLI
    (``python -m stateaware.analysis views --sql > views.sql; duckdb -init views.sql``).
    ``run_ids`` restricts every view to those runs (a report of chosen runs).
    """
    results = Path(results).resolve()
    scope = ""
    if run_ids is not None:
        quoted = ", ".join("'" + r.replace("'", "''") + "'" for r in run_ids) or "NULL"
        scope = f" WHERE run_id IN ({quoted})"
    statements = []
    for table, schema in TABLES.items():
        name = "attempts" if table == "processes" else table
        body = view_sql(results, table) + scope if _has_parts(results / table) else _empty_sql(schema)
        statements.append(f"CREATE VIEW {name} AS {body};")
    statements.append(
        "CREATE VIEW processes AS SELECT * FROM attempts "
        "QUALIFY row_number() OVER (PARTITION BY run_id, cohort, process_index ORDER BY attempt DESC, finished_at DESC) = 1;"
    )
    if results.is_dir():
        for folder in sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if folder.name not in TABLES and folder.name.isidentifier() and _has_parts(folder):
                statements.append(f"CREATE VIEW {folder.name} AS {view_sql(results, folder.name)}{scope};")
    return statements


def connect(results: Path | str, run_ids: Sequence[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views over ``results``.

    The connection itself can write; :mod:`stateaware.analysis.sql` is the read-only
    front end for users. Views read the files at query time, so parts that land after
    ``connect`` are seen by the next query (a table that had no parts at ``connect``
    stays empty until the next ``connect``).
    """
    con = duckdb.connect(":memory:")
    for statement in views_sql(results, run_ids):
        con.execute(statement)
    return con
