"""Is this part file one of ours, whole? The one check every reader of a results directory shares.

A results directory is shared ground: a part can be truncated by a full disk, zeroed by a
crashed copy, have bytes flipped inside a page, be copied in from another run, or be
somebody else's Parquet dropped into a table folder. Every reader — the DuckDB views,
verification, the report, the launcher's resume scan — asks the same check before trusting
a file (through ``stateaware.records.part_cache``, which runs the expensive half once per
part), so they all agree on what "damaged" means. Two halves:

``part_problem``, the footer (a few KiB, whatever the part's size):

- not Parquet: zero bytes, random bytes, a truncated file (its footer is at the end, so a
  cut anywhere loses it), a footer whose column chunks point past the end of the file;
- another schema: a missing column, a column of another type, a column the table does not
  have. A part written by an older ``SCHEMA_VERSION`` of our own writer (its file metadata
  says so) may lack the columns added since, and carry a column under the name it had then
  (``schema.RENAMED``); identity columns are never optional.

``content_problem``, every page (``decode=True`` of ``part_problem``):

- a damaged page inside an intact footer: our writer stores a CRC-32 per page
  (``writer.PAGE_CHECKSUMS``) and every page is verified against it and decoded; a part
  written before checksums existed is decoded in full, which finds what breaks decoding
  but not a flipped byte that still decodes;
- a part that is not where its rows say they belong: its identity columns (``run_id``,
  ``cohort``, ``process_index``, ``source_hash``, ...) hold one value each, equal to the
  hive folders above it (``cohort=``, ``run_id=``) and to its name (``p<index>-``) — a part
  copied from another run or process is caught here. A compacted file
  (``records/compact.py``: ``compacted-<hash>.parquet``, its footer carrying
  ``COMPACTED``) holds many processes of one run: its ``process_index`` (and
  ``schema_version``) may hold several values, each process one its footer lists, with
  exactly the rows the footer says.
"""

from __future__ import annotations

import json
import os
import stat as _stat
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stateaware.records.part_names import parse_part_name
from stateaware.records.schema import IDENTITY, RENAMED, SCHEMA_VERSION, schema_for
from stateaware.records.verdicts import Content, Footer
from stateaware.records.writer import PAGE_CHECKSUMS
from stateaware.text import shorten

__all__ = [
    "COMPACTED",
    "Content",
    "Footer",
    "compacted_parts",
    "content_problem",
    "old_names",
    "part_footer",
    "part_problem",
]

_IDENTITY_NAMES = frozenset(f.name for f in IDENTITY)

try:  # see _read_footer
    from pyarrow._parquet import ParquetReader as _Reader
except ImportError:  # pragma: no cover - a pyarrow that moved it: pq.ParquetFile, as before
    _Reader = None

#: Columns listed by name in one message before the rest are counted: a foreign file can
#: have hundreds, and one line must stay readable.
_NAMES_AT_MOST = 4

#: File metadata key of a compacted file (``records/compact.py``): JSON whose ``parts`` lists
#: ``{"process", "part", "rows", ...}`` for every original part the file holds the rows of.
COMPACTED = b"stateaware.compacted"

#: Identity columns a compacted file may hold several values of: it is many processes' rows
#: (parts of one run written by older schema versions keep their own ``schema_version``).
_MANY_IN_COMPACTED = frozenset({"process_index", "schema_version"})


def compacted_parts(metadata: Mapping[bytes, bytes] | None) -> list[dict[str, Any]] | None:
    """The original parts a compacted file lists in its footer (``metadata``: its file metadata);
    ``None`` for a file that is not compacted. ``ValueError`` when the list does not parse."""
    raw = (metadata or {}).get(COMPACTED)
    if raw is None:
        return None
    parts = json.loads(raw)["parts"]
    if not isinstance(parts, list) or not all(
        isinstance(p, dict) and isinstance(p.get("process"), int) and isinstance(p.get("rows"), int)
        and isinstance(p.get("part"), str) for p in parts
    ):  # fmt: skip
        raise ValueError("its compaction record lists no valid parts")
    return parts


def part_problem(
    path: Path | str, schema: pa.Schema | str, *, decode: bool = False, missing_ok: bool = False
) -> str | None:
    """What is wrong with the part file at ``path`` for a table of ``schema``; ``None`` if nothing.

    ``schema`` is an Arrow schema or the name of a record table. The answer is one short
    phrase ("zero bytes", "not a Parquet file (...)", "column 'process_index' is string,
    expected int32", ...) for a message that names the file. Nullability is not compared
    (Parquet readers differ on it); types are, exactly. ``missing_ok``: columns of
    ``schema`` the part lacks are accepted (an analysis result table written by an older
    analysis). ``decode=True`` also runs ``content_problem`` (every page, uncached).
    Never raises for a bad file; ``KeyError`` (listing the tables) for an unknown table name.
    """
    schema = schema_for(schema) if isinstance(schema, str) else schema
    problem = part_footer(path, schema, missing_ok=missing_ok).problem
    if problem is None and decode:
        return content_problem(path).problem
    return problem


def part_footer(path: Path | str, schema: pa.Schema, *, missing_ok: bool = False) -> Footer:
    """The footer half of ``part_problem`` (same answers), with what a scan needs besides.

    A scan of a store calls this once per part, so it is written for its per-part cost: one
    ``stat``, the footer read once (its Arrow schema serves the schema check and the old
    names both), and a part whose schema is exactly ``schema`` (every part of ours written
    by this schema version) compared in one call instead of column by column.
    """
    try:
        info = os.stat(path)
    except OSError:
        return Footer("not a regular file", {}, None)
    if not _stat.S_ISREG(info.st_mode):
        return Footer("not a regular file", {}, info)
    if info.st_size == 0:
        return Footer("zero bytes (an interrupted copy or a full disk)", {}, info)
    try:
        meta, found = _read_footer(path)
    except (OSError, pa.ArrowException, ValueError) as exc:
        first = _first_line(exc)
        if "magic bytes" in first:  # pyarrow's words for "no footer where a footer must be"
            return Footer("not a Parquet file (no footer): truncated, damaged or foreign", {}, info)
        return Footer(f"unreadable Parquet footer ({shorten(first, 100)}): damaged or foreign", {}, info)
    end = _data_end(meta)
    if end > info.st_size:
        return Footer(f"truncated: its footer points to byte {end:,} of a {info.st_size:,}-byte file", {}, info)
    if found.equals(schema):  # names, order and types equal (nullability too): nothing to compare further
        return Footer(None, {}, info)
    problem = _schema_problem(found, schema, missing_ok)
    if problem is not None:
        return Footer(problem, {}, info)
    renamed = old_names(found)
    present = {renamed.get(n, n) for n in found.names}
    return Footer(None, renamed, info, tuple(n for n in schema.names if n not in present))


def _read_footer(path: Path | str) -> tuple[pq.FileMetaData, pa.Schema]:
    """The footer of the Parquet file at ``path`` and its Arrow schema, nothing else read.

    pyarrow's own reader class, when this pyarrow has it where it has been for years: about
    70 us a part less than ``pq.ParquetFile`` on the store benchmark's parts (which also maps
    nested column paths and resolves a filesystem, unused here); else ``pq.ParquetFile``.
    """
    if _Reader is None:
        with pq.ParquetFile(path) as part:
            return part.metadata, part.schema_arrow
    reader = _Reader()
    try:
        reader.open(os.fspath(path))
        return reader.metadata, reader.schema_arrow
    finally:
        reader.close()


def content_problem(path: Path | str) -> Content:
    """Read every page of the part at ``path``: checksums verified, values decoded, identity checked.

    The part's footer is taken as already checked (``part_problem``); this is the
    expensive half — the whole file is read, one row group at a time — so
    ``stateaware.records.part_cache`` runs it once per part. Never raises for a bad file.
    """
    path = Path(path)
    checksums = False
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as part:
            found = part.schema_arrow
            checksums = (found.metadata or {}).get(PAGE_CHECKSUMS[0]) == PAGE_CHECKSUMS[1]
            expected = _expected_identity(path, found.names)
            listed = compacted_parts(found.metadata)
            seen: dict[str, set[object]] = {name: set() for name in _IDENTITY_NAMES & set(found.names)}
            per_process: Counter[object] = Counter()
            for group in range(part.metadata.num_row_groups):
                rows = part.read_row_group(group)  # every page: checksum (when stored) and decoding
                for name, values in seen.items():
                    values.update(rows.column(name).unique().to_pylist())
                if listed is not None and "process_index" in rows.column_names:
                    per_process.update(rows.column("process_index").to_pylist())
    except Exception as exc:  # noqa: BLE001 - whatever a damaged page makes pyarrow raise is the file's problem
        first = shorten(_first_line(exc), 100)
        if "CRC checksum" in first:  # pyarrow's words for a page whose bytes changed after it was written
            return Content(f"a page fails its checksum ({first}): damaged after it was written", checksums)
        return Content(f"data does not decode ({first}): damaged", checksums)
    if listed is not None:
        return Content(_compacted_problem(seen, expected, listed, per_process), checksums)
    return Content(_identity_problem(seen, expected), checksums)


def _compacted_problem(
    seen: dict[str, set[object]], expected: dict[str, object], listed: list[dict[str, Any]], rows: Counter[object]
) -> str | None:
    """The identity check of a compacted file: one run's, and each process's rows as its footer lists."""
    problem = _identity_problem({n: v for n, v in seen.items() if n not in _MANY_IN_COMPACTED}, expected)
    if problem is not None:
        return problem
    wrote: Counter[object] = Counter()
    for entry in listed:
        wrote[entry["process"]] += entry["rows"]
    wrote = Counter({k: v for k, v in wrote.items() if v})  # a listed empty part has no rows to find
    if rows != wrote:
        odd = sorted(set(rows) ^ set(wrote) or {k for k in rows if rows[k] != wrote[k]}, key=str)[:_NAMES_AT_MOST]
        return f"its rows of process(es) {', '.join(map(str, odd))} are not those its footer lists (edited since?)"
    return None


def _expected_identity(path: Path, columns: list[str]) -> dict[str, object]:
    """What the part's place says its identity columns hold: hive folders, and ``p<index>-``."""
    expected: dict[str, object] = {}
    for folder in path.parents:
        key, sep, value = folder.name.partition("=")
        if not sep or not key.isidentifier():
            break  # above the partitions: the table folder
        if key in columns:
            expected[key] = value
    named = parse_part_name(path.name)
    if named is not None and "process_index" in columns:
        expected["process_index"] = named.process_index
    return expected


def _identity_problem(seen: dict[str, set[object]], expected: dict[str, object]) -> str | None:
    for name, values in seen.items():
        if len(values) > 1:
            shown = ", ".join(sorted(repr(v) for v in values)[:_NAMES_AT_MOST])
            return f"its {name} column holds {len(values)} values ({shown}); a part is one process's"
    for name, want in expected.items():
        values = seen.get(name, set())
        got = next(iter(values)) if values else None
        if values and str(got) != str(want):
            where = (
                f"its name says p{int(str(want)):06d}" if name == "process_index" else f"it lies under {name}={want}"
            )
            return f"its {name} column says {got!r}, but {where} (copied from another run or process?)"
    return None


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


def _schema_problem(found: pa.Schema, schema: pa.Schema, missing_ok: bool = False) -> str | None:
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
    if missing and ((version is None and not missing_ok) or _IDENTITY_NAMES.intersection(missing)):
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
