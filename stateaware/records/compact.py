"""Compaction of one finished run: one file per table, atomically and exactly.

``python -m stateaware.analysis compact`` (``stateaware.analysis.compact``) runs it over
the chosen runs of a results folder.

A run of P processes leaves about P small part files per table (``p<index>-<part>.parquet``);
at lab scale a results directory holds tens of thousands of them, and every query opens
and checks each. Compaction rewrites the parts of a finished run's processes into one file
per table::

    OUT/<table>/cohort=<c>/run_id=<r>/compacted-<h>.parquet

where ``<h>`` is the first 12 hex digits of the SHA-256 of the file's rows (``rows_sha256``:
the rows as a multiset, whatever their order), so the same rows always get the same name.
Every column is kept exactly (the table's own Arrow schema: ``process_index``, the string
``cohort``/``run_id`` the hive folders repeat, types and nulls), rows written by an older
schema version are read as the views read them (renamed columns under their new names,
columns added since as nulls), and row groups hold ``ROW_GROUP_ROWS`` rows, DuckDB's own
row-group size. The footer (``stateaware.records.check.COMPACTED``) lists every original
part: its process, name, rows, file name and its own footer metadata (source hash, hardware,
scale, schema version); the part check vouches that each process's rows are those listed,
the launcher's resume scan and its attempt numbering read the list where they read file
names before, and verification reads the same views — so a compacted run verifies, resumes
and reports as before.

What is compacted, and what is not:

- the parts of processes whose latest attempt completed, in every record table that has
  per-process parts; an earlier compacted file of the run is merged in;
- not the parts of a process that did not complete (``--include-incomplete`` compacts a
  run with some): a resume runs that process again and replaces its parts *by name*, which
  only works while they are files of their own;
- not the launcher's ``runs`` manifest (``p-00001-manifest.parquet``) nor the ``comparisons``
  result (``comparisons.parquet``): each is already one file per run, rewritten by name by
  the next launch or report — under another name the next write would add a second copy.

NOTE [ The swap: no reader sees both, or neither ]
A reader (the views, verification, the resume scan) lists a run's partition folder and
reads every ``*.parquet`` in it. No order of renames and unlinks of the *files* in that
folder goes from "N old parts" to "1 new file" without a moment holding both (new file in
first) or neither (old parts out first) — and moving the originals into a hidden folder
beside them is no better, since a reader listing between two moves sees some of each.
So the *folder* is swapped, in one system call:

1. a staging folder ``OUT/.compacting/<table>/cohort=<c>/run_id=<r>/`` is made, outside
   every table folder (no table scan walks it; ``.``-names of ``OUT`` are never read), with
   the marker file ``MARKER`` written *first*;
2. the compacted file is written there under a temporary name, re-read and checked: its
   schema, its row count and ``rows_sha256`` equal the originals', and it passes the
   part check every reader runs; only then does it get its final name;
3. every entry of the live folder that is not compacted (the run lock, the manifest,
   unfinished processes' parts, ...) gets a hard link in the staging folder: the same
   files, the lock's inode included, so a launch still finds the lock held;
4. ``renameat2(RENAME_EXCHANGE)`` swaps the live folder and the staging folder atomically:
   before it, readers see the old parts only; after it, the new file only. A reader that
   opened the folder before the swap lists the old one to its end (a directory handle
   follows its inode); one that listed before and reads after finds its files gone and
   fails loudly — never with wrong rows;
5. the marker (now in the live folder) is removed; anything that landed in the old folder
   after step 3 is linked back into the live one; the old folder (now the staging path,
   holding the originals) is deleted.

A kill anywhere leaves either state, whole. A re-run first repairs the leftovers of its run:
a staging folder *with* the marker was never swapped in (delete it: the old parts are still
live); one *without* it is the swapped-out old folder (link back what the live compacted
file did not consume, then delete it); a marker in the live folder is removed. Tests kill
compaction at each of ``STEPS`` (``KILL_ENV``) and check exactly that. The whole
run is compacted under its run lock (``stateaware.records.runlock``), so no launch
writes parts meanwhile; a run whose lock is held is refused. Limits: Linux only
(``renameat2``, Linux 3.15, glibc 2.28; elsewhere the command refuses in one line), the
results directory on one filesystem, and a process of a compacted run that must run again
(a stray part beside it quarantined by a resume) writes parts beside rows the compacted
file still holds: verification then names the duplicated rows (it never passes silently).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stateaware.records.check import (
    COMPACTED,
    compacted_parts,
    content_problem,
    old_names,
    part_problem,
)
from stateaware.records.part_names import COMPACTED_NAME, compacted_file_name, parse_part_name, part_files, run_folder
from stateaware.records.run_scan import run_state
from stateaware.records.runlock import RunLocked, lock_path, run_lock
from stateaware.records.schema import SCHEMA_VERSION, TABLES
from stateaware.records.write_paths import make_folder, writable
from stateaware.records.writer import PAGE_CHECKSUMS
from stateaware.text import LIST_AT_MOST, index_ranges
from stateaware.units import format_bytes

__all__ = [
    "KILL_ENV",
    "MARKER",
    "ROW_GROUP_ROWS",
    "STAGING",
    "STEPS",
    "CompactError",
    "RunCompaction",
    "TableCompaction",
    "compact_run",
    "rows_sha256",
]

#: Rows per row group of a compacted file: DuckDB's own row-group size (122,880), so one
#: group is one unit of its parallel scan, and a file's footer stays small.
ROW_GROUP_ROWS = 122_880

#: Where staging folders live, under the results directory (a ``.`` name: never read as a table).
STAGING = ".compacting"

#: The file that marks a staging folder not yet swapped in (NOTE [ The swap: ... ]).
MARKER = ".compaction-staging"

#: A test hook: ``STATEAWARE_COMPACT_KILL_AT=<step>`` ends the process (``os._exit(9)``) the
#: first time compaction reaches that step — a kill at a chosen point, reproducibly.
KILL_ENV = "STATEAWARE_COMPACT_KILL_AT"

#: The points of one table's compaction a kill can fall between, in order.
STEPS = ("locked", "staging", "writing", "written", "verified", "linked", "swapped", "unmarked", "restored", "removed")

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class CompactError(ValueError):
    """A run compaction refused or could not finish; the message is one line naming the run and why."""


@dataclass(frozen=True)
class TableCompaction:
    """One table of one run: the files compacted, their bytes, and the file that replaces them."""

    table: str
    sources: tuple[Path, ...]
    bytes_before: int
    bytes_after: int
    target: Path


@dataclass(frozen=True)
class RunCompaction:
    """What compacting one run did (or, in a dry run, would do)."""

    cohort: str
    run_id: str
    tables: tuple[TableCompaction, ...] = ()
    dry_run: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def files_before(self) -> int:
        return sum(len(t.sources) for t in self.tables)

    @property
    def bytes_saved(self) -> int:
        return sum(t.bytes_before - t.bytes_after for t in self.tables)

    def line(self) -> str:
        """The one line the command prints for this run."""
        head = f"run {self.run_id} (cohort {self.cohort})"
        if not self.tables:
            return f"{head}: already compacted; nothing to do"
        verb = "would compact" if self.dry_run else "compacted"
        before = sum(t.bytes_before for t in self.tables)
        after = sum(t.bytes_after for t in self.tables)
        saves = "would save" if self.dry_run else "saved"
        return (
            f"{head}: {verb} {self.files_before} files ({format_bytes(before)}) into {len(self.tables)} "
            f"({format_bytes(after)}); {saves} {self.files_before - len(self.tables)} files and "
            f"{format_bytes(before - after)}"
        )


def _kill_point(step: str) -> None:
    """The test hook (``KILL_ENV``): die here, as a kill -9 would, when the hook names ``step``."""
    if os.environ.get(KILL_ENV) == step:
        sys.stderr.flush()
        os._exit(9)


def rows_sha256(tables: Iterable[pa.Table]) -> str:
    """The SHA-256 of the rows of ``tables`` as a multiset: the same rows in any order, split
    into any files, give the same digest; one changed value, or a row more or less, another.

    Each row is hashed from the ``repr`` of its Python values in schema order (exact for
    floats, time zones kept, nulls as ``None``); the row digests are sorted, then hashed.
    The tables must share one schema (column names and order are part of what is hashed).
    """
    digests: list[bytes] = []
    names: list[str] | None = None
    for table in tables:
        names = names or table.column_names
        for batch in table.to_batches():
            columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            digests += [hashlib.sha256(repr(row).encode()).digest() for row in zip(*columns, strict=True)]
    whole = hashlib.sha256(repr(names).encode())
    for digest in sorted(digests):
        whole.update(digest)
    return whole.hexdigest()


def _normalized(path: Path, schema: pa.Schema) -> tuple[pa.Table, dict[bytes, bytes]]:
    """The rows of the part at ``path`` as the views read them, in ``schema`` exactly: old column
    names under their new ones, columns added since as nulls (parts are checked before this);
    and the part's footer metadata, from the same read (a part is opened once)."""
    with pq.ParquetFile(path) as part:
        table = part.read()
    metadata = dict(table.schema.metadata or {})
    plain = pa.schema(list(schema))  # no metadata: the footer is built separately
    if table.schema.equals(plain):  # written by today's schema, as nearly every part: nothing to convert
        return table.replace_schema_metadata(None), metadata
    renamed = old_names(table.schema)
    table = table.rename_columns([renamed.get(n, n) for n in table.column_names])
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in plain
    ]
    return pa.Table.from_arrays(columns, schema=plain), metadata


def _own_metadata(meta: dict[bytes, bytes]) -> dict[str, str]:
    """A part's own ``stateaware.*`` footer metadata (source hash, hardware, schema version, ...)."""
    return {k.decode(): v.decode("utf-8", "replace") for k, v in sorted(meta.items()) if k.startswith(b"stateaware.")}


def _exchange(a: Path, b: Path) -> None:
    """Swap the entries at ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available (Linux 3.15 and glibc 2.28 needed)")
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a), None, str(b))


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _entries(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except FileNotFoundError:
        return []


def _staging(results: Path, table: str, cohort: str, run_id: str) -> Path:
    return run_folder(results / STAGING, table, cohort, run_id)


def _live(results: Path, table: str, cohort: str, run_id: str) -> Path:
    return run_folder(results, table, cohort, run_id)


def _remove_staging(results: Path, staging: Path) -> None:
    """Delete ``staging`` and the folders above it up to ``OUT/.compacting`` that it leaves empty."""
    shutil.rmtree(staging)
    top = results / STAGING
    for folder in staging.parents:
        if folder != top and top not in folder.parents:
            break
        try:
            folder.rmdir()
        except OSError:  # not empty: another run's staging, or a table's
            break


def _consumed(live: Path) -> set[str]:
    """The file names the live folder's compacted files say they replaced."""
    names: set[str] = set()
    for name in _entries(live):
        if COMPACTED_NAME.fullmatch(name):
            try:
                raw = (pq.read_schema(live / name).metadata or {}).get(COMPACTED)
                names.update(json.loads(raw or b"{}").get("sources", []))
            except (OSError, ValueError, pa.ArrowException):
                continue
    return names


def _repair(results: Path, table: str, cohort: str, run_id: str) -> None:
    """Finish or undo what a killed compaction of this table left (NOTE [ The swap: ... ])."""
    live, staging = _live(results, table, cohort, run_id), _staging(results, table, cohort, run_id)
    writable(results, live), writable(results, staging)  # never repair through a link
    if (live / MARKER).exists():  # swapped in, killed before the marker went
        (live / MARKER).unlink()
    if not staging.is_dir():
        return
    if not (staging / MARKER).exists() and live.is_dir():
        # The swapped-out old folder: what the live file did not consume, and the live folder
        # lacks, arrived after the links were made — it goes back, never lost.
        consumed, present = _consumed(live), set(_entries(live))
        for name in _entries(staging):
            if name not in consumed and name not in present and (staging / name).is_file():
                os.link(staging / name, live / name)
    _remove_staging(results, staging)


@dataclass(frozen=True)
class _Plan:
    table: str
    live: Path
    sources: tuple[Path, ...]


def _plan_tables(results: Path, cohort: str, run_id: str, completed: set[int]) -> list[_Plan]:
    """Per table, the files to compact: parts of completed processes, and earlier compacted files."""
    plans = []
    for table in TABLES:
        live = _live(results, table, cohort, run_id)
        parts, compacted = [], []
        for name in _entries(live):
            named = parse_part_name(name)
            if named is not None and named.process_index in completed:
                parts.append(live / name)
            elif COMPACTED_NAME.fullmatch(name):
                compacted.append(live / name)
        if parts or len(compacted) > 1:  # one compacted file and nothing new: done already
            plans.append(_Plan(table, live, tuple(sorted(compacted + parts))))
    return plans


def _build(plan: _Plan, cohort: str, run_id: str) -> tuple[pa.Table, dict[bytes, bytes], str]:
    """The compacted table of ``plan``'s sources, its footer metadata and its rows' digest."""
    schema = TABLES[plan.table]
    pieces, listed, sources = [], [], []
    for path in plan.sources:
        rows, meta = _normalized(path, schema)
        pieces.append(rows)
        held = compacted_parts(meta)
        if held is not None:  # an earlier compacted file: its list carries over, and what it replaced
            listed += held
            sources += json.loads(meta.get(COMPACTED) or b"{}").get("sources", [])
        else:
            named = parse_part_name(path.name)
            assert named is not None  # _plan_tables admits only these
            listed.append(
                {
                    "process": named.process_index,
                    "part": named.part,
                    "rows": pieces[-1].num_rows,
                    "file": path.name,
                    "metadata": _own_metadata(meta),
                }
            )
        sources.append(path.name)
    table = pa.concat_tables(pieces) if pieces else schema.empty_table()
    digest = rows_sha256([table])
    listed.sort(key=lambda p: (p["process"], p["part"]))
    record = {"format": 1, "rows": table.num_rows, "sha256": digest, "parts": listed, "sources": sorted(set(sources))}
    meta = {
        # The current version: rows of older parts are read under today's names (_normalized).
        b"stateaware.schema_version": str(SCHEMA_VERSION).encode(),
        b"stateaware.table": plan.table.encode(),
        b"stateaware.run_id": run_id.encode(),
        b"stateaware.cohort": cohort.encode(),
        COMPACTED: json.dumps(record, sort_keys=True, separators=(",", ":")).encode(),
        PAGE_CHECKSUMS[0]: PAGE_CHECKSUMS[1],
    }
    return table.replace_schema_metadata(meta), meta, digest


def _write(table: pa.Table, sink: Any) -> None:
    """``table`` as Parquet into ``sink``, row group by row group; the kill point ``writing``
    falls after the first row group reached the disk, before the footer (a torn file)."""
    options = {"compression": "zstd", "write_page_checksum": True}
    with pq.ParquetWriter(sink, table.schema, **options) as writer:
        for start in range(0, max(table.num_rows, 1), ROW_GROUP_ROWS):
            writer.write_table(table.slice(start, ROW_GROUP_ROWS), row_group_size=ROW_GROUP_ROWS)
            if start == 0:
                sink.flush()
                _kill_point("writing")


def _verify_written(path: Path, table: str, rows: int, digest: str) -> str | None:
    """What is wrong with the written file ``path`` against the originals; ``None`` if nothing."""
    with pq.ParquetFile(path) as written:
        found = written.read()
    if pa.schema(list(found.schema)) != pa.schema(list(TABLES[table])):
        return "its schema differs from the table's"
    if found.num_rows != rows:
        return f"it holds {found.num_rows} rows, the originals {rows}"
    if rows_sha256([found.replace_schema_metadata(None)]) != digest:
        return "its rows differ from the originals' (SHA-256 of the rows)"
    return part_problem(path, table) or content_problem(path).problem


def _compact_table(results: Path, plan: _Plan, cohort: str, run_id: str) -> TableCompaction:
    """Compact one table of one run, swapping its folder (NOTE [ The swap: ... ])."""
    table, meta, digest = _build(plan, cohort, run_id)
    target = plan.live / compacted_file_name(digest)
    staging = _staging(results, plan.table, cohort, run_id)
    make_folder(staging, results)
    (staging / MARKER).write_bytes(b"")  # first: from now on this folder reads as "not swapped in"
    _fsync_folder(staging)
    _kill_point("staging")
    tmp = staging / f".{target.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as handle:
        _write(table, handle)
        handle.flush()
        os.fsync(handle.fileno())
    _kill_point("written")
    problem = _verify_written(tmp, plan.table, table.num_rows, digest)
    if problem is not None:
        _remove_staging(results, staging)
        raise CompactError(f"run {run_id} (cohort {cohort}): table {plan.table}: the compacted file fails: {problem}")
    os.replace(tmp, staging / target.name)
    _kill_point("verified")
    snapshot = _entries(plan.live)
    consumed = {p.name for p in plan.sources}
    for name in snapshot:
        entry = plan.live / name
        if name in consumed or name == target.name:
            continue
        if entry.is_dir() or entry.is_symlink():
            _remove_staging(results, staging)
            raise CompactError(
                f"run {run_id} (cohort {cohort}): table {plan.table}: {entry} is not a plain file; "
                "a run's partition holds files only: move it away and compact again"
            )
        os.link(entry, staging / name)  # the same file: the run lock's inode stays the held one
    _fsync_folder(staging)
    _kill_point("linked")
    writable(results, plan.live)  # at the swap itself: a link made meanwhile is refused
    try:
        _exchange(plan.live, staging)
    except OSError as exc:
        _remove_staging(results, staging)
        raise CompactError(
            f"run {run_id} (cohort {cohort}): table {plan.table}: cannot swap its folder atomically "
            f"({exc.strerror or exc}); nothing was changed"
        ) from None
    _fsync_folder(plan.live.parent)
    _kill_point("swapped")
    (plan.live / MARKER).unlink()
    _kill_point("unmarked")
    present = set(_entries(plan.live))
    for name in _entries(staging):  # arrived in the old folder after the snapshot: keep it
        if name not in snapshot and name not in present and (staging / name).is_file():
            os.link(staging / name, plan.live / name)
    _kill_point("restored")
    before = sum(p.stat().st_size for p in (staging / p.name for p in plan.sources) if p.exists())
    _remove_staging(results, staging)
    _fsync_folder(plan.live)
    _kill_point("removed")
    return TableCompaction(plan.table, plan.sources, before, target.stat().st_size, target)


def _expected_processes(results: Path, cohort: str, run_id: str) -> int | None:
    """The run's declared process count, from its ``runs`` row(s); ``None`` without one."""
    counts = []
    for path in part_files(_live(results, "runs", cohort, run_id)):
        try:
            counts += pq.read_table(path, columns=["processes"]).column("processes").to_pylist()
        except (OSError, pa.ArrowException, KeyError):
            continue
    counts = [c for c in counts if c is not None]
    return max(counts) if counts else None


def _lock_free(results: Path, cohort: str, run_id: str) -> str | None:
    """Who holds the run's lock, or ``None`` when no launch does — without writing anything."""
    path = lock_path(results, cohort, run_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file: no launch ever held it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: refused only while a launch holds it
        return None
    except BlockingIOError:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        return text or "another launcher"
    finally:
        os.close(fd)


def compact_run(
    results: Path | str,
    cohort: str,
    run_id: str,
    *,
    dry_run: bool = False,
    include_incomplete: bool = False,
    progress: Callable[[str], None] | None = None,
) -> RunCompaction:
    """Compact one run (module docstring: what is compacted), or with ``dry_run`` say what it would do.

    Holds the run's lock throughout (a dry run only looks at it, writing nothing). Raises
    ``CompactError`` (one line naming the run) when a launch holds the lock, when the
    run is incomplete (a process of ``runs.processes`` not completed) and not
    ``include_incomplete``, when any part of the run is damaged (a launch quarantines those
    first), or when a compacted file fails its check (the run is then left as it was).
    Compacting a compacted run again changes nothing (``tables`` empty). ``progress`` is
    called with each table's name as it is done.
    """
    results = Path(results)
    head = f"run {run_id} (cohort {cohort})"

    if _expected_processes(results, cohort, run_id) is None:  # before the lock, which would make its folder
        raise CompactError(f"{head}: refused: it has no runs row (a launch that never started?)")

    def refuse_unless_ready() -> tuple[list[_Plan], tuple[str, ...]]:
        expected = _expected_processes(results, cohort, run_id) or 0
        statuses, damaged = run_state(results, cohort, run_id)  # one check per part
        if damaged:
            path, problem = damaged[0]
            raise CompactError(
                f"{head}: refused: {len(damaged)} damaged part(s), first {path}: {problem}; re-run the launch "
                "(it quarantines them and runs their processes again), then compact"
            )
        completed = {i for i, s in statuses.items() if s == "completed"}
        unfinished = [i for i in range(expected) if i not in completed]
        notes: tuple[str, ...] = ()
        if unfinished and not include_incomplete:
            raise CompactError(
                f"{head}: refused: incomplete, process(es) {index_ranges(unfinished, LIST_AT_MOST)} "
                f"of {expected} not completed; "
                "re-run the launch to finish it, or pass --include-incomplete (their parts are then left as they are)"
            )
        if unfinished:
            notes = (
                f"{head}: process(es) {index_ranges(unfinished, LIST_AT_MOST)} not completed: "
                "their parts are left as they are",
            )
        return _plan_tables(results, cohort, run_id, completed), notes

    if dry_run:
        holder = _lock_free(results, cohort, run_id)
        if holder is not None:
            raise CompactError(f"{head}: refused: a live launch holds its lock ({holder}); compact it after it ends")
        plans, notes = refuse_unless_ready()
        tables = []
        for plan in plans:
            built, _meta, digest = _build(plan, cohort, run_id)
            sink = pa.BufferOutputStream()  # written in memory: the exact size it would have
            _write(built, sink)
            before = sum(p.stat().st_size for p in plan.sources)
            target = plan.live / compacted_file_name(digest)
            tables.append(TableCompaction(plan.table, plan.sources, before, sink.getvalue().size, target))
        return RunCompaction(cohort, run_id, tuple(tables), True, notes)
    try:
        with run_lock(results, cohort, run_id):
            _kill_point("locked")
            for table in TABLES:
                _repair(results, table, cohort, run_id)
            plans, notes = refuse_unless_ready()
            done = []
            for plan in plans:
                done.append(_compact_table(results, plan, cohort, run_id))
                if progress is not None:
                    progress(plan.table)
    except RunLocked as exc:
        raise CompactError(f"{head}: refused: a live launch holds it — {exc}") from None
    return RunCompaction(cohort, run_id, tuple(done), False, notes)
