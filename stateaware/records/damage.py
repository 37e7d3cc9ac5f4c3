"""Damaged or foreign part files: tell them from good ones, and move them aside.

A part can be damaged after it was written (a truncated copy, a zero-byte file from a full
disk elsewhere, bytes overwritten) or not be ours at all (a Parquet file of another schema
dropped into a table folder). :func:`part_problem` says what is wrong with one part, or
nothing; :func:`quarantine` moves a part to ``OUT/.quarantine/<same relative path>.<UTC
time>`` — out of every view's ``OUT/<table>/**/*.parquet`` glob, and never over an
earlier quarantined file — so a resumed run can write the part again.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from stateaware.records.schema import IDENTITY, TABLES

__all__ = ["QUARANTINE", "part_problem", "quarantine"]

#: The folder under a results directory that damaged parts are moved to.
QUARANTINE = ".quarantine"

_IDENTITY = {f.name for f in IDENTITY}


def part_problem(path: Path | str, table: str) -> str | None:
    """What is wrong with ``path`` as a part of ``table`` (one short phrase), or ``None``.

    Reads the whole file for real, not just its footer: a part is good when it is a Parquet
    file whose columns are all columns of ``table`` with the table's types, that has every
    identity column, and whose data decodes. A part of an older schema version (fewer
    columns) is good. Never raises for a bad file.
    """
    import pyarrow.parquet as pq

    path = Path(path)
    expected = TABLES[table]
    try:
        if path.stat().st_size == 0:
            return "empty file (0 bytes)"
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        return f"not a readable Parquet file ({_first_line(exc)})"
    for name in schema.names:
        if name not in expected.names:
            return f"column {name!r} is not a column of table {table!r} (a file of another schema)"
        want = expected.field(name).type
        if not schema.field(name).type.equals(want):
            return f"column {name!r} is {schema.field(name).type}, table {table!r} has {want}"
    missing = sorted(_IDENTITY - set(schema.names))
    if missing:
        return f"identity column(s) {missing} missing (a file of another schema)"
    try:
        pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        return f"data does not decode ({_first_line(exc)})"
    return None


def quarantine(out: Path | str, path: Path | str) -> Path:
    """Move ``path`` (inside ``out``) to ``out/.quarantine/<relative path>.<UTC time>``; the new path.

    The time suffix (with a counter if needed) means an earlier quarantined copy of the
    same part is never overwritten.
    """
    out, path = Path(out), Path(path)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    base = out / QUARANTINE / path.relative_to(out)
    base.parent.mkdir(parents=True, exist_ok=True)
    dest, n = base.with_name(f"{base.name}.{stamp}"), 1
    while dest.exists():
        dest, n = base.with_name(f"{base.name}.{stamp}-{n}"), n + 1
    os.replace(path, dest)
    return dest


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
