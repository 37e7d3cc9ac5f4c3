"""Is this part file one of ours? One footer read says, for every reader of a results directory.

A results directory is shared ground: a part can be truncated by a full disk, zeroed by a
crashed copy, or be somebody else's Parquet dropped into a table folder. Every reader — the
DuckDB views, verification, the report, the launcher's resume scan — asks
:func:`part_problem` before trusting a file, so they all agree on what "damaged" means.

Only the footer is read (a few KiB, whatever the part's size), so checking every part of a
large run costs milliseconds. What it catches:

- not Parquet: zero bytes, random bytes, a truncated file (its footer is at the end, so a
  cut anywhere loses it), a footer whose column chunks point past the end of the file;
- another schema: a missing column, a column of another type, a column the table does not
  have. A part written by an older ``SCHEMA_VERSION`` of our own writer (its file metadata
  says so) may lack the columns added since, and carry a column under the name it had then
  (``schema.RENAMED``); identity columns are never optional.

What the footer alone does not catch: a page corrupted in the middle of an intact file;
``decode=True`` reads the data too (once per launch, for resume, is affordable; on every
``sql`` is not), otherwise DuckDB names the file in its error when a query reaches it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stateaware.records.schema import IDENTITY, RENAMED, SCHEMA_VERSION, schema_for

__all__ = ["old_names", "part_problem"]

_IDENTITY_NAMES = frozenset(f.name for f in IDENTITY)

#: Columns listed by name in one message before the rest are counted: a foreign file can
#: have hundreds, and one line must stay readable.
_NAMES_AT_MOST = 4


def part_problem(path: Path | str, schema: pa.Schema | str, *, decode: bool = False) -> str | None:
    """What is wrong with the part file at ``path`` for a table of ``schema``; ``None`` if nothing.

    ``schema`` is an Arrow schema or the name of a record table. The answer is one short
    phrase ("zero bytes", "not a Parquet file (...)", "column 'process_index' is string,
    expected int32", ...) for a message that names the file. Nullability is not compared
    (Parquet readers differ on it); types are, exactly. ``decode=True`` also reads every
    page. Never raises for a bad file; ``KeyError`` (listing the tables) for an unknown
    table name.
    """
    schema = schema_for(schema) if isinstance(schema, str) else schema
    path = Path(path)
    try:
        if not path.is_file():
            return "not a regular file"
        size = path.stat().st_size
        if size == 0:
            return "zero bytes (an interrupted copy or a full disk)"
        with pq.ParquetFile(path) as part:  # reads the footer only
            meta, found = part.metadata, part.schema_arrow
    except (OSError, pa.ArrowException, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "magic bytes" in first:  # pyarrow's words for "no footer where a footer must be"
            return "not a Parquet file (no footer): truncated, damaged or foreign"
        return f"unreadable Parquet footer ({_shorten(first)}): damaged or foreign"
    end = _data_end(meta)
    if end > size:
        return f"truncated: its footer points to byte {end:,} of a {size:,}-byte file"
    problem = _schema_problem(found, schema)
    if problem is None and decode:
        try:
            pq.read_table(path)
        except (OSError, pa.ArrowException, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"data does not decode ({_shorten(first)})"
    return problem


def _data_end(meta: pq.FileMetaData) -> int:
    """The last byte the footer says any column chunk occupies."""
    end = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
            end = max(end, (start or 0) + column.total_compressed_size)
    return end


def _schema_problem(found: pa.Schema, schema: pa.Schema) -> str | None:
    expected = {f.name: f.type for f in schema}
    version = _older_version(found)
    names = {n: _current_name(n, version, expected) for n in found.names}
    extra = [n for n, current in names.items() if current not in expected]
    if extra:
        return f"column(s) {_names(extra)} not in the table (a foreign file?)"
    for field in found:
        if field.type != expected[names[field.name]]:
            return f"column {field.name!r} is {field.type}, expected {expected[names[field.name]]}"
    missing = [n for n in schema.names if n not in set(names.values())]
    if missing and (version is None or _IDENTITY_NAMES.intersection(missing)):
        return f"missing column(s) {_names(missing)}"
    return None


def _current_name(name: str, version: int | None, expected: dict[str, pa.DataType]) -> str:
    """``name`` as this code calls it: renamed when the part predates the rename."""
    renamed = RENAMED.get(name)
    if renamed is not None and name not in expected and version is not None and version < renamed[1]:
        return renamed[0]
    return name


def old_names(found: pa.Schema) -> dict[str, str]:
    """``{old name: new name}`` of the renamed columns a part carries under their old name."""
    version = _older_version(found)
    present = set(found.names)
    return {
        n: RENAMED[n][0]
        for n in found.names
        if n in RENAMED and version is not None and version < RENAMED[n][1] and RENAMED[n][0] not in present
    }


def _older_version(found: pa.Schema) -> int | None:
    """The schema version our writer stamped on the file, when older than this code's."""
    raw = (found.metadata or {}).get(b"stateaware.schema_version")
    try:
        version = int(raw) if raw is not None else None
    except ValueError:
        return None
    return version if version is not None and version < SCHEMA_VERSION else None


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_NAMES_AT_MOST])
    return shown + (f" and {len(names) - _NAMES_AT_MOST} more" if len(names) > _NAMES_AT_MOST else "")


def _shorten(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
