"""Read-only SQL over a results directory, printed as a table, CSV or JSON.

Read-only by construction: the statements run on the locked connection of
:func:`stateaware.analysis.views.connect` (NOTE [ Read-only by construction ] there), which
can read the views and nothing else — no file written or read, no extension installed or
loaded, no setting changed — whatever a statement's spelling (``EXPLAIN ANALYZE COPY …
TO``, ``read_text('/etc/passwd')``, ``SET lock_configuration = false``, ...).

Before that, a friendly first filter: only statements that read are run — ``SELECT``
(including ``WITH``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``, ``FROM``-first queries) and
``EXPLAIN`` — and anything else (``INSERT``, ``CREATE``, ``COPY ... TO``, ``ATTACH``,
``SET``, ``PRAGMA``, ``INSTALL``) is refused by name before anything runs.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
from stateaware.analysis.views import connect

__all__ = ["ReadOnlyError", "FORMATS", "query", "format_result"]

FORMATS = ("table", "csv", "json")

_READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class ReadOnlyError(ValueError):
    """A statement would write; results are read-only."""


def query(
    results: Path | str, sql: str, run_ids: Sequence[str] | None = None, *, warn: Callable[[str], None] | None = None
) -> list[tuple[list[str], list[tuple]]]:
    """Run every statement of ``sql`` over ``results``; ``(column names, rows)`` per statement.

    ``run_ids`` restricts every view to those runs. Raises :class:`ReadOnlyError` (naming
    the statement) before running anything if any statement is not a read, and
    ``duckdb.Error`` for what the locked connection refuses. ``warn`` is called with one
    line per damaged part file the views left out.
    """
    con = connect(results, run_ids, read_only=True)
    if warn is not None:
        for path, problem in con.execute("SELECT path, problem FROM damaged_parts ORDER BY path").fetchall():
            warn(f"warning: skipped {path}: {problem}")
    statements = con.extract_statements(sql)
    if not statements:
        raise ValueError("no SQL statement given")
    for statement in statements:
        if statement.type not in _READING:
            kind = statement.type.name
            raise ReadOnlyError(
                f"refused: {kind} statement ({statement.query.strip()[:60]!r}); results are read-only, "
                f"only SELECT/WITH/DESCRIBE/SHOW/EXPLAIN queries run. To keep a result, use --format csv "
                f"and redirect the output."
            )
    answers = []
    for statement in statements:
        relation = con.execute(statement.query)
        names = [d[0] for d in relation.description] if relation.description else []
        answers.append((names, relation.fetchall()))
    return answers


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return str(_plain(value))


def format_result(names: Sequence[str], rows: Sequence[tuple], fmt: str = "table") -> str:
    """``rows`` as an aligned text table (numbers right-aligned), CSV, or a JSON array of objects."""
    if fmt == "json":
        return json.dumps([{n: _plain(v) for n, v in zip(names, row, strict=True)} for row in rows], indent=1)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([[_plain(v) if v is not None else "" for v in row] for row in rows])
        return buffer.getvalue().rstrip("\n")
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; valid formats are: {', '.join(FORMATS)}")
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [
        all(isinstance(row[i], (int, float, Decimal)) or row[i] is None for row in rows) and rows
        for i in range(len(names))
    ]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(names)), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)
