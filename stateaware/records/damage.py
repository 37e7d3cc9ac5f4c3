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
from datetime import UTC, datetime
from pathlib import Path

from stateaware.records import check

__all__ = ["QUARANTINE", "part_problem", "quarantine"]

#: The folder under a results directory that damaged parts are moved to.
QUARANTINE = ".quarantine"


def part_problem(path: Path | str, table: str) -> str | None:
    """What is wrong with ``path`` as a part of ``table`` (one short phrase), or ``None``.

    The one check every reader shares (:func:`stateaware.records.check.part_problem`:
    Parquet, the table's columns and types, identity columns present, a part of an older
    schema version may lack later columns), plus every page decoded — affordable once per
    launch. Never raises for a bad file.
    """
    return check.part_problem(path, table, decode=True)


def quarantine(out: Path | str, path: Path | str) -> Path:
    """Move ``path`` (inside ``out``) to ``out/.quarantine/<relative path>.<UTC time>``; the new path.

    The time suffix (with a counter if needed) means an earlier quarantined copy of the
    same part is never overwritten.
    """
    out, path = Path(out), Path(path)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    base = out / QUARANTINE / path.relative_to(out)
    base.parent.mkdir(parents=True, exist_ok=True)
    dest, n = base.with_name(f"{base.name}.{stamp}"), 1
    while dest.exists():
        dest, n = base.with_name(f"{base.name}.{stamp}-{n}"), n + 1
    os.replace(path, dest)
    return dest
