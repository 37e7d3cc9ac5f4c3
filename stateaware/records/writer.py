"""Atomic Parquet part files: the only way rows reach the record store.

Layout under a results directory ``OUT`` (hive partitions, read back by DuckDB)::

    OUT/<table>/cohort=<cohort>/run_id=<run_id>/p<process_index:06d>-<part>.parquet

A part is written under a temporary name (``.<name>.tmp-<host>-<pid>``, which no
``*.parquet`` glob matches) and renamed into place, so a process killed mid-write leaves no
readable partial file, and a failed write (a full disk) removes its temporary file. The
host and pid in the name say who owns a temporary file: ``stale_temporary`` tells
debris of a dead writer from the file of a live one, which must never be removed. Part
names are chosen by the cohort and must be deterministic (``"main"``, ``"method=joint"``):
writing the same part again replaces it, which is what makes a resumed or requeued
process unable to duplicate rows.

Every part is written with Parquet page checksums (CRC-32 of each page, ``write_page_checksum``)
and says so in its file metadata (``PAGE_CHECKSUMS``), so a reader can tell a page damaged
after it was written from a good one (``stateaware.records.check``). Every path built from
names is checked by ``stateaware.records.write_paths.writable`` (no link below ``out``, the
resolved path inside it) right before it is written.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from stateaware.names import check_name
from stateaware.records.part_names import MAX_PART_NAME, check_part_name, part_file_name, run_folder
from stateaware.records.schema import IDENTITY, SCHEMA_VERSION, schema_for
from stateaware.records.write_paths import checked, writable
from stateaware.units import format_bytes

__all__ = [
    "Identity",
    "RecordWriter",
    "DiskFullError",
    "Space",
    "free_space",
    "PAGE_CHECKSUMS",
    "MAX_PART_NAME",
    "part_path",
    "write_atomic",
    "write_bytes_atomic",
    "temporary_path",
    "stale_temporary",
    "disk_full",
    "as_disk_full",
]

Rows: TypeAlias = Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]] | pa.Table

_IDENTITY_NAMES = [f.name for f in IDENTITY]

#: File metadata key (and value) of a part written with page checksums: parts written before
#: checksums existed lack it, and get a one-time full decode instead (records.check).
PAGE_CHECKSUMS = (b"stateaware.page_checksums", b"crc32")


@dataclass(frozen=True)
class Identity:
    """The identity columns that lead every row a process writes."""

    run_id: str
    cohort: str
    process_index: int
    source_hash: str
    hardware: str
    scale: float

    def columns(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "cohort": self.cohort,
            "process_index": self.process_index,
            "source_hash": self.source_hash,
            "schema_version": SCHEMA_VERSION,
            "hardware": self.hardware,
            "scale": self.scale,
        }


def part_path(out: Path | str, table: str, cohort: str, run_id: str, process_index: int, part: str) -> Path:
    """Where ``part`` of ``process_index`` of a run lands for ``table`` (not resolved: as given under ``out``).

    ``table``, ``cohort`` and ``run_id`` must follow the name rule (``stateaware.names.check_name``)
    and ``part`` the part-name rule (the name rule, ``=`` allowed, at most ``MAX_PART_NAME``
    characters): ``InvalidName`` otherwise. No entry below ``out`` on the
    way may be a link and the path must lie inside ``out`` once links are followed
    (``stateaware.records.write_paths.writable``, which raises otherwise): a link planted in
    a table folder never redirects a write.
    """
    check_name("table", table)
    check_name("cohort", cohort)
    check_name("run_id", run_id)
    check_part_name(part)
    return writable(out, run_folder(out, table, cohort, run_id) / part_file_name(process_index, part))


class Space(NamedTuple):
    """What a filesystem has left: bytes an unprivileged writer may use, and whether it is out of inodes."""

    free: int
    no_inodes: bool


class DiskFullError(OSError):
    """A write failed for lack of space (or of inodes); nothing of it was left behind.

    ``str()`` is the one line a command prints: the file being written (or, when only that is
    known, the folder it was written under), the bytes it needed and what its filesystem has
    left — "no free inodes" when inodes, not bytes, ran out — and what to do.
    """

    def __init__(
        self, path: Path | str | None, needed: int | None, space: Space | None, *, under: Path | str | None = None
    ):
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path) if path is not None else None)
        self.path = Path(path) if path is not None else None
        self.under = Path(under) if under is not None else None
        self.needed, self.space = needed, space

    @property
    def free(self) -> int | None:
        """Bytes free on the filesystem of the file, when known."""
        return self.space.free if self.space is not None else None

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError pickles its (errno, strerror, filename) args, which this __init__ does not take;
        # a worker's error must reach the launcher (submitit pickles it) as the same message.
        return (_disk_full_error, (self.path, self.needed, self.space, self.under))

    def __str__(self) -> str:
        if self.path is not None:
            what = str(self.path)
        elif self.under is not None:
            what = f"a file under {self.under}"
        else:
            what = "a file (the error did not say which)"
        needed = f"needed {_size(self.needed)}" if self.needed is not None else "needed more space"
        if self.space is None:
            left, action = "free space unknown", "free some space"
        elif self.space.no_inodes:
            left, action = f"no free inodes there ({_size(self.space.free)} free)", "remove some files"
        else:
            left, action = f"{_size(self.space.free)} free there", "free some space"
        return f"disk full writing {what}: {needed}, {left}; {action} and re-run the same command to resume"


def _disk_full_error(path: Path | None, needed: int | None, space: Space | None, under: Path | None) -> DiskFullError:
    return DiskFullError(path, needed, space, under=under)


def _size(n: int) -> str:
    return format_bytes(n)


def free_space(path: Path | str) -> Space | None:
    """What the filesystem holding ``path`` has left; ``None`` when no ancestor of it can be read.

    ``path`` need not exist: its nearest existing ancestor is asked (a folder about to be
    created lives on its parent's filesystem). A filesystem that reports no inode count at
    all (``f_files == 0``: btrfs, many network filesystems) is never called out of inodes.
    """
    path = Path(os.path.abspath(path))
    for folder in (path, *path.parents):
        try:
            stat = os.statvfs(folder)
        except OSError:
            continue
        return Space(stat.f_bavail * stat.f_frsize, stat.f_files > 0 and (stat.f_favail == 0 or stat.f_ffree == 0))
    return None


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-space error (ENOSPC, or EDQUOT: a quota is a full disk too)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def as_disk_full(
    exc: OSError, path: Path | str | None = None, needed: int | None = None, *, under: Path | str | None = None
) -> DiskFullError:
    """``exc`` (an out-of-space error) as a ``DiskFullError`` naming the file being written.

    The file is ``path`` (what the caller was writing), else the file ``exc`` names; when
    neither is known, ``under`` (the folder the write went to, e.g. the results directory)
    is named instead. The free space is that of the named file's filesystem — never the
    working directory's.
    """
    if isinstance(exc, DiskFullError):
        return exc
    named = path if path is not None else exc.filename
    if isinstance(named, (str, bytes, os.PathLike)) and os.fsdecode(named):
        return DiskFullError(os.fsdecode(named), needed, free_space(os.fsdecode(named)))
    if under is not None:
        return DiskFullError(None, needed, free_space(under), under=under)
    return DiskFullError(None, needed, None)


def _host() -> str:
    return socket.gethostname().replace("/", "_").replace("-", "_") or "localhost"


def temporary_path(path: Path) -> Path:
    """The temporary name this process writes ``path`` under: ``.<name>.tmp-<host>-<pid>``."""
    return path.with_name(f".{path.name}.tmp-{_host()}-{os.getpid()}")


def stale_temporary(tmp: Path) -> bool:
    """Whether ``tmp`` (a temporary file name) was left by a writer that is gone.

    Only a writer on this host can be checked: the file is stale when its pid no longer
    runs here. A temporary file of another host, or one whose name says nothing, is never
    called stale — removing a file a live writer is filling is worse than leaving debris
    (which no ``*.parquet`` glob ever reads). Older names without a host (``.tmp-<pid>``)
    are taken as this host's.
    """
    _, sep, owner = tmp.name.rpartition(".tmp-")
    if not sep:
        return False
    host, _, pid = owner.rpartition("-")
    if host and host != _host():
        return False
    try:
        os.kill(int(pid), 0)
    except ValueError:
        return False
    except ProcessLookupError:
        return True
    except PermissionError:  # a live process of another user
        return False
    return False


def write_bytes_atomic(data: bytes, path: Path, *, exclusive: bool = False, out: Path | str | None = None) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename (see ``write_atomic``)."""
    return _write_via_temporary(
        path, lambda handle: handle.write(data), lambda: len(data), exclusive=exclusive, out=out
    )


def write_atomic(table: pa.Table, path: Path, *, exclusive: bool = False, out: Path | str | None = None) -> Path:
    """Write ``table`` to ``path`` through a temporary file and a rename (POSIX-atomic).

    ``out``: the results directory ``path`` lies in (default: the one of the enclosing
    ``writing_under``, if any). Right before the folders
    are made and again before the rename, ``writable``
    refuses a link below ``out`` on the way and a path resolving outside it.

    ``exclusive``: never replace an existing ``path`` — raise ``FileExistsError`` instead
    (a hard link, atomic like ``O_EXCL``), so two writers of one name cannot overwrite each
    other. Out of space, the temporary file is removed and ``DiskFullError`` raised.
    Pages carry CRC-32 checksums and the file metadata says so (``PAGE_CHECKSUMS``).
    """
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), PAGE_CHECKSUMS[0]: PAGE_CHECKSUMS[1]})

    def fill(sink: Any) -> None:
        pq.write_table(table, sink, compression="zstd", write_page_checksum=True)

    def needed() -> int:  # only on the failure path: the exact size of the file
        sink = pa.BufferOutputStream()
        fill(sink)
        return sink.getvalue().size

    return _write_via_temporary(path, fill, needed, exclusive=exclusive, out=out)


def _link_exclusive(tmp: Path, path: Path) -> None:
    """Give ``tmp``'s file the name ``path`` unless ``path`` exists (``FileExistsError``)."""
    try:
        os.link(tmp, path)  # atomic: fails if path exists, so never replaces another writer's file
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        # A filesystem without hard links: check, then rename (a narrow race, not atomic).
        if path.exists():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
        os.replace(tmp, path)


def _open_temporary(tmp: Path):
    """The file a write fills (a seam: tests make it run out of space)."""
    return open(tmp, "wb")


def _write_via_temporary(path: Path, fill, needed, *, exclusive: bool, out: Path | str | None) -> Path:
    tmp = temporary_path(checked(path, out, file=True))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _open_temporary(checked(tmp, out)) as handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        checked(path, out)  # the folders again, just before the rename: a link made meanwhile is refused
        if exclusive:
            _link_exclusive(tmp, path)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        if disk_full(exc):
            tmp.unlink(missing_ok=True)
            raise as_disk_full(exc, path, needed()) from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return path


class RecordWriter:
    """Writes one process's rows, each table as named parts, atomically.

    ``write(table, rows, part=...)`` accepts a list of row dicts, a dict of columns, or an
    Arrow table. The identity columns are added here; a row that names a column the table
    does not have raises ``ValueError`` listing the valid ones — a typo never becomes a
    silently null column.
    """

    def __init__(self, out: Path | str, identity: Identity, metadata: Mapping[str, str] | None = None):
        self.out = Path(out)
        self.identity = identity
        self._written: dict[tuple[str, str], int] = {}  # (table, part) -> rows of its last write
        self._metadata = {
            "stateaware.schema_version": str(SCHEMA_VERSION),
            **{f"stateaware.{k}": str(v) for k, v in identity.columns().items()},
            **{f"stateaware.{k}": str(v) for k, v in (metadata or {}).items()},
        }

    def path(self, table: str, part: str) -> Path:
        i = self.identity
        return part_path(self.out, table, i.cohort, i.run_id, i.process_index, part)

    def exists(self, table: str, part: str) -> bool:
        """Whether ``part`` was already written (by this or an earlier attempt)."""
        return self.path(table, part).exists()

    def write(self, table: str, rows: Rows, part: str = "main", *, exclusive: bool = False) -> Path:
        """Write ``rows`` as ``part`` of ``table``, replacing an earlier part of that name.

        ``exclusive``: raise ``FileExistsError`` rather than replace an existing part (a
        status row claims its attempt number this way). Raises ``DiskFullError``
        when the disk is full, leaving nothing behind.
        """
        arrow = self.to_arrow(table, rows)
        meta = {**self._metadata, "stateaware.table": table}
        arrow = arrow.replace_schema_metadata({k.encode(): v.encode() for k, v in meta.items()})
        path = write_atomic(arrow, self.path(table, part), exclusive=exclusive, out=self.out)
        self._written[(table, part)] = arrow.num_rows
        return path

    def parts_written(self) -> list[dict[str, Any]]:
        """Every part this writer wrote, ``{"table", "part", "rows"}``, sorted; a part written twice once.

        What the worker records in its terminal ``processes`` row (``parts_json``), so that
        verification and resume can tell a part that lost or gained rows afterwards from the
        one that was written. Status parts (``processes``) are left out: they are the record.
        """
        return [
            {"table": table, "part": part, "rows": rows}
            for (table, part), rows in sorted(self._written.items())
            if table != "processes"
        ]

    def to_arrow(self, table: str, rows: Rows) -> pa.Table:
        """``rows`` as an Arrow table of ``table``'s schema, identity columns filled in."""
        schema = schema_for(table)
        columns = _as_columns(rows)
        unknown = sorted(set(columns) - set(schema.names))
        if unknown:
            valid = [n for n in schema.names if n not in _IDENTITY_NAMES]
            raise ValueError(f"table {table!r} has no column(s) {unknown}; valid columns are: {', '.join(valid)}")
        clash = sorted(set(columns) & set(_IDENTITY_NAMES))
        if clash:
            raise ValueError(f"identity column(s) {clash} are filled by the writer; do not pass them")
        n = _length(columns)
        arrays = []
        for fld in schema:
            if fld.name in _IDENTITY_NAMES:
                value = self.identity.columns()[fld.name]
                arrays.append(pa.array([value] * n, type=fld.type))
            elif fld.name in columns:
                try:
                    arrays.append(pa.array(columns[fld.name], type=fld.type))
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
                    raise ValueError(f"table {table!r}, column {fld.name!r} ({fld.type}): {exc}") from exc
            else:
                arrays.append(pa.nulls(n, type=fld.type))
        return pa.Table.from_arrays(arrays, schema=schema)


def _as_columns(rows: Rows) -> dict[str, Sequence[Any]]:
    if isinstance(rows, pa.Table):
        return {name: rows.column(name) for name in rows.column_names}
    if isinstance(rows, Mapping):
        return dict(rows)
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return {name: [row.get(name) for row in rows] for name in names}


def _length(columns: Mapping[str, Sequence[Any]]) -> int:
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"columns have different lengths: {sorted(lengths)}")
    return lengths.pop() if lengths else 0
