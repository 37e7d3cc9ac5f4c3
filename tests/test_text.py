"""The one-line text rules every message and SQL statement shares (``stateaware/text.py``)."""

from __future__ import annotations

import duckdb
from hypothesis import given
from hypothesis import strategies as st

from stateaware.text import LIST_AT_MOST, index_ranges, shorten, sql_name


def _expand(ranges: str) -> set[int]:
    """The indices ``0-2, 5`` stands for (the inverse of index_ranges, without truncation)."""
    found: set[int] = set()
    for span in filter(None, ranges.split(", ")):
        first, _, last = span.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


@given(st.lists(st.integers(0, 300), max_size=60))
def test_index_ranges_lists_each_index_once_in_the_fewest_spans(values):
    text = index_ranges(values)
    assert _expand(text) == set(values)
    spans = text.split(", ") if text else []
    bounds = [tuple(int(b) for b in s.split("-")) for s in spans]
    # Sorted, and no two spans touch: a gap of at least one index between them.
    assert all(a[-1] + 1 < b[0] for a, b in zip(bounds, bounds[1:], strict=False))


def test_index_ranges_counts_what_it_leaves_out():
    values = list(range(0, 2 * (LIST_AT_MOST + 3), 2))  # every span one index: LIST_AT_MOST + 3 spans
    text = index_ranges(values, LIST_AT_MOST)
    assert text == ", ".join(str(v) for v in values[:LIST_AT_MOST]) + f", ... ({len(values)} in all)"
    assert index_ranges([0, 1, 2, 5, 7, 8, 8]) == "0-2, 5, 7-8"
    assert index_ranges([]) == ""


@given(st.text(max_size=300), st.integers(1, 200))
def test_shorten_keeps_one_line_within_the_limit(text, limit):
    short = shorten(text, limit)
    assert len(short) <= limit and "\n" not in short
    folded = text.strip().replace("\n", " ")
    assert short == folded if len(folded) <= limit else short == folded[: limit - 1] + "…"


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1))
def test_sql_name_round_trips_any_name_through_duckdb(name):
    con = duckdb.connect()
    assert con.execute(f"SELECT 1 AS {sql_name(name)}").description[0][0] == name
