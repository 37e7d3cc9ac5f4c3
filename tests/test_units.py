from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateaware.units import format_bytes, parse_bytes


@pytest.mark.parametrize(
    "text, expected",
    [
        ("44GiB", 44 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", 3 * 2**29),
        ("123456", 123456),
        (" 7 KiB ", 7168),
        (5, 5),
        ("0.1KiB", 102),
    ],
)
def test_parse(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["44GB", "GiB", "1e", "", "4 4GiB", True, "-1GiB", -3])
def test_refused_forms_name_what_and_the_accepted_ones(text):
    with pytest.raises(ValueError, match=r"size .*512MiB, 44GiB"):
        parse_bytes(text)


@given(st.integers(min_value=0, max_value=2**50))
def test_integers_round_trip(n):
    assert parse_bytes(str(n)) == n == parse_bytes(n)


def test_format():
    assert format_bytes(3 * 2**29) == "1.500 GiB" and format_bytes(12) == "12 B"
