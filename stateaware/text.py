"""Text for one-line messages and SQL: index ranges, shortened text, quoted identifiers.

Every command's messages and every generated SQL statement spell these the same way, so
the rules live here once: a list of process indices reads ``0-2, 5, 7-8`` wherever it is
printed, a long error text is cut at the same mark, and a view or column name is quoted
for DuckDB by one function.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["LIST_AT_MOST", "index_ranges", "sql_name", "shorten"]

#: The most items a one-line message lists before it counts the rest: past a dozen a line
#: stops being read.
LIST_AT_MOST = 12


def index_ranges(values: Iterable[int], at_most: int | None = None) -> str:
    """``[0, 1, 2, 5, 7, 8]`` as ``0-2, 5, 7-8``: sorted, duplicates dropped, consecutive ones joined.

    ``at_most``: the most spans shown; past it the list ends ``, ... (<N> in all)``, ``N``
    counting the distinct values. ``None`` shows every span. An empty input gives ``""``.
    """
    spans: list[list[int]] = []
    distinct = sorted({int(v) for v in values})
    for v in distinct:
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    shown = [f"{a}-{b}" if b > a else f"{a}" for a, b in spans]
    if at_most is not None and len(shown) > at_most:
        return ", ".join(shown[:at_most]) + f", ... ({len(distinct)} in all)"
    return ", ".join(shown)


def shorten(text: str | None, limit: int) -> str:
    """``text`` on one line (stripped, newlines as spaces), cut to ``limit`` characters ending ``…``.

    ``None`` gives ``""``. The result is never longer than ``limit`` (``limit`` >= 1).
    """
    text = (text or "").strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sql_name(name: str) -> str:
    """``name`` as a double-quoted SQL identifier, inner quotes doubled: never parsed as a keyword or SQL."""
    return '"' + name.replace('"', '""') + '"'
