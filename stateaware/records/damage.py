"""Damaged or foreign part files: tell them from good ones, and move them aside.

A part can be damaged after it was written (a truncated copy, a zero-byte file from a full
disk elsewhere, bytes overwritten inside a page) or not be ours at all (a Parquet file of
another schema dropped into a table folder, a part copied from another run).
``part_problem`` says what is wrong with one part, or nothing; ``quarantine`` moves
a part to ``OUT/.quarantine/<same relative path>.<UTC time>`` — out of every view's
``OUT/<table>/**/*.parquet`` glob, and never over an earlier quarantined file — so a resumed
run can write the part again.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from stateaware.records.part_cache import checked_problem
from stateaware.records.write_paths import make_folder, writable

__all__ = ["QUARANTINE", "part_problem", "quarantine"]

#: The folder under a results directory that damaged parts are moved to.
QUARANTINE = ".quarantine"


def part_problem(path: Path | str, table: str, results: Path | str | None = None) -> str | None:
    """What is wrong with ``path`` as a part of ``table`` (one short phrase), or ``None``.

    The one check every reader shares (``stateaware.records.part_cache.checked_problem``:
    Parquet, the table's columns and types, identity columns present and agreeing with the
    part's place, a part of an older schema version may lack later columns, every page's
    checksum and decoding — the pages read once per version of the file). ``results`` is
    the results directory the part belongs to (whose cache answers; default: the folder
    three levels above the part, ``OUT/<table>/cohort=/run_id=/``). Never raises for a bad file.
    """
    # Imported here: every worker imports this module for QUARANTINE (its attempt numbers),
    # and the part checks' modules (pyarrow.compute among them) are no part of its steps.
    path = Path(path)
    if results is None:
        results = path.parents[3] if len(path.parents) > 3 else path.parent
    return checked_problem(results, path, table)


def quarantine(out: Path | str, path: Path | str) -> Path:
    """Move ``path`` (inside ``out``) to ``out/.quarantine/<relative path>.<UTC time>``; the new path.

    The time suffix (with a counter if needed) means an earlier quarantined copy of the
    same part is never overwritten. The destination must lie inside ``out`` once links are
    followed, and neither it nor ``path`` may be reached through a link below ``out``
    (``stateaware.records.write_paths.writable`` raises otherwise: a ``.quarantine`` link
    planted in ``out`` never sends a part elsewhere, a run folder linked elsewhere loses nothing).
    """
    out, path = Path(out), Path(path)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    base = out / QUARANTINE / path.relative_to(out)
    writable(out, path)  # the part's own folders too: a part found through a link stays where it is
    make_folder(base.parent, out)
    dest, n = base.with_name(f"{base.name}.{stamp}"), 1
    while dest.exists():
        dest, n = base.with_name(f"{base.name}.{stamp}-{n}"), n + 1
    writable(out, dest)
    os.replace(path, dest)
    return dest
