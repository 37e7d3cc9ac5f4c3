"""Text for one-line messages and SQL: index ranges (and CPU lists), shortened text, quoted identifiers.

Every command's messages and every generated SQL statement spell these the same way, so
the rules live here once: a list of process indices reads ``0-2, 5, 7-8`` wherever it is
printed, a long error text is cut at the same mark, and a view or column name is quoted
for DuckDB by one function.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["LIST_AT_MOST", "format_cpus", "index_ranges", "parse_cpus", "shorten", "sql_name"]

#: The most items a one-line message lists before it counts the rest: past a dozen a line
#: stops being read.
LIST_AT_MOST = 12


def index_ranges(values: Iterable[int], at_most: int | None = None, *, separator: str = ", ") -> str:
    """``[0, 1, 2, 5, 7, 8]`` as ``0-2, 5, 7-8``: sorted, duplicates dropped, consecutive ones joined.

    ``at_most``: the most spans shown; past it the list ends ``, ... (<N> in all)``, ``N``
    counting the distinct values. ``None`` shows every span. An empty input gives ``""``.
    ``separator`` joins the spans (``","`` gives the kernel's cpulist form, ``format_cpus``).
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
        return separator.join(shown[:at_most]) + f"{separator}... ({len(distinct)} in all)"
    return separator.join(shown)


def format_cpus(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"`` (the kernel's cpulist form)."""
    return index_ranges(cpus, separator=",")


def parse_cpus(value: Any) -> tuple[int, ...]:
    """A CPU set from ``"1"``, ``"2-3"``, ``"0,2-3"``, an integer or a list of those; sorted.

    Raises ``ValueError`` naming the bad piece for anything else (empty, negative,
    reversed ranges).
    """
    items: Sequence[Any] = value if isinstance(value, (list, tuple)) else [value]
    cpus: set[int] = set()
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"CPU set {value!r}: {item!r} is not a CPU number")
        if isinstance(item, int):
            pieces = [str(item)]
        else:
            pieces = [p.strip() for p in str(item).split(",")]
        for piece in pieces:
            low, dash, high = piece.partition("-")
            try:
                first, last = int(low), int(high) if dash else int(low)
            except ValueError:
                raise ValueError(f"CPU set {value!r}: {piece!r} is not a CPU number or range like 2-3") from None
            if first < 0 or last < first:
                raise ValueError(f"CPU set {value!r}: {piece!r} is not a non-negative, increasing range")
            cpus.update(range(first, last + 1))
    if not cpus:
        raise ValueError(f"CPU set {value!r} is empty")
    return tuple(sorted(cpus))


def shorten(text: str | None, limit: int) -> str:
    """``text`` on one line (stripped, newlines as spaces), cut to ``limit`` characters ending ``…``.

    ``None`` gives ``""``. The result is never longer than ``limit`` (``limit`` >= 1).
    """
    text = (text or "").strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sql_name(name: str) -> str:
    """``name`` as a double-quoted SQL identifier, inner quotes doubled: never parsed as a keyword or SQL."""
    return '"' + name.replace('"', '""') + '"'
