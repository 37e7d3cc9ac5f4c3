"""Atomic Parquet part files: the only way rows reach the record store.

Layout under a results directory ``OUT`` (hive partitions, read back by DuckDB)::

    OUT/<table>/cohort=<cohort>/run_id=<run_id>/p<process_index:06d>-<part>.parquet

A part is written under a temporary name (``.<name>.tmp-<pid>``, which no ``*.parquet``
glob matches) and renamed into place, so a process killed mid-write leaves no readable
partial file. Part names are chosen by the cohort and must be deterministic (``"main"``,
``"method=joint"``): writing the same part again replaces it, which is what makes a
resumed or requeued process unable to duplicate rows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import pyarrow as pa
import pyarrow.parquet as pq

from stateaware.records.schema import IDENTITY, SCHEMA_VERSION, schema_for

__all__ = ["Identity", "RecordWriter", "part_path", "write_atomic"]

Rows = Union[Sequence[Mapping[str, Any]], Mapping[str, Sequence[Any]], pa.Table]

_IDENTITY_NAMES = [f.name for f in IDENTITY]


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
    """Where ``part`` of ``process_index`` of a run lands for ``table``."""
    _check_part_name(part)
    return (
        Path(out)
        / table
        / f"cohort={cohort}"
        / f"run_id={run_id}"
        / f"p{process_index:06d}-{part}.parquet"
    )


def write_atomic(table: pa.Table, path: Path) -> Path:
    """Write ``table`` to ``path`` through a temporary file and a rename (POSIX-atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            pq.write_table(table, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
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

    def write(self, table: str, rows: Rows, part: str = "main") -> Path:
        """Write ``rows`` as ``part`` of ``table``, replacing an earlier part of that name."""
        arrow = self.to_arrow(table, rows)
        meta = {**self._metadata, "stateaware.table": table}
        arrow = arrow.replace_schema_metadata({k.encode(): v.encode() for k, v in meta.items()})
        return write_atomic(arrow, self.path(table, part))

    def to_arrow(self, table: str, rows: Rows) -> pa.Table:
        """``rows`` as an Arrow table of ``table``'s schema, identity columns filled in."""
        schema = schema_for(table)
        columns = _as_columns(rows)
        unknown = sorted(set(columns) - set(schema.names))
        if unknown:
            valid = [n for n in schema.names if n not in _IDENTITY_NAMES]
            raise ValueError(
                f"table {table!r} has no column(s) {unknown}; valid columns are: {', '.join(valid)}"
            )
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


def _check_part_name(part: str) -> None:
    if not part or "/" in part or part.startswith(".") or not part.isprintable():
        raise ValueError(f"part name {part!r} must be a non-empty file-name fragment without '/'")
