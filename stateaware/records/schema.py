"""The record store's tables: one explicit Arrow schema per table, for every cohort.

Every cohort the paper runs lands in these few tables, so SQL written against one cohort
works against the next:

==============  =====================================================================
``runs``        one row per run: the manifest (config, source hash, versions, host)
``processes``   one row per process attempt: terminal status, node, Slurm ids, error
``records``     one row per outcome: semantic matches/rejections/divergences, finite
                suites (derivative, bytes, engines, joint alias), application scores
``timings``     one row per measured or warm-up step: time and measured peaks
``policies``    one row per planned method: the chosen per-segment policy or infeasible
``profiles``    one row per (profile card, segment, option): r, q and c of eq. 3
``epochs``      one row per application epoch (encoder or probe)
``peaks``       one row per allocator observation (before a reset, or at exit)
``artifacts``   one row per file a process produced and hashed (test-score files, cards)
==============  =====================================================================

Identity columns (``IDENTITY``) lead every table; a writer fills them from the process
spec, never the cohort. Every other column is nullable, so a cohort writes only what
applies to it. A column a cohort needs and no table has is added to
``stateaware.records.columns`` (the one definition of the columns, as plain data, so a
reader that needs no Arrow imports that alone), once, with a bump of ``SCHEMA_VERSION``
there — never smuggled into a JSON blob; ``detail`` exists only for free-form diagnostics
that no query should depend on. This module builds the Arrow schemas from it.
"""

from __future__ import annotations

import pyarrow as pa

from stateaware.records.columns import (
    IDENTITY_COLUMNS,
    OUTCOMES,
    RENAMED,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    STATUSES,
    TABLE_COLUMNS,
    Columns,
    columns_for,
)

__all__ = [
    "SCHEMA_VERSION",
    "IDENTITY",
    "RENAMED",
    "RESULT_TABLES",
    "TABLES",
    "OUTCOMES",
    "STATUSES",
    "arrow_schema",
    "schema_for",
]

#: Arrow's type of each type name a column may have (``columns.ARROW_TYPES``).
_ARROW: dict[str, pa.DataType] = {
    str(t): t
    for t in (
        pa.string(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.float64(),
        pa.bool_(),
        pa.timestamp("us", tz="UTC"),
        pa.list_(pa.string()),
    )
}


#: Schemas built, by the id of their columns (kept, so an id is never reused while here): a
#: cold scan asks once per part, and building one costs more than the footer check's compare.
_BUILT: dict[int, tuple[Columns, pa.Schema]] = {}


def arrow_schema(columns: Columns | pa.Schema) -> pa.Schema:
    """The Arrow schema of ``columns`` (names, types and nullability, in order), built once
    per ``Columns`` object; a schema is returned as it is."""
    if isinstance(columns, pa.Schema):
        return columns
    built = _BUILT.get(id(columns))
    if built is None or built[0] is not columns:
        schema = pa.schema([pa.field(c.name, _ARROW[c.type], nullable=c.nullable) for c in columns])
        built = _BUILT[id(columns)] = (columns, schema)
    return built[1]


IDENTITY: list[pa.Field] = list(arrow_schema(IDENTITY_COLUMNS))

TABLES: dict[str, pa.Schema] = {name: arrow_schema(columns) for name, columns in TABLE_COLUMNS.items()}

#: folder -> schema of every result table the analysis writes (``columns.RESULT_COLUMNS``).
RESULT_TABLES: dict[str, pa.Schema] = {name: arrow_schema(columns) for name, columns in RESULT_COLUMNS.items()}


def schema_for(table: str) -> pa.Schema:
    """The Arrow schema of ``table``; a ``KeyError`` that lists the valid tables otherwise."""
    return arrow_schema(columns_for(table))
