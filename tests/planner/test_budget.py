"""Budget parsing: exact binary units, bytes, and errors that list the accepted forms."""

from __future__ import annotations

import pytest

from stateaware.planner import format_bytes, parse_budget
from stateaware.planner.budget import UnitlessBudget


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("44GiB", 44 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", 3 * 2**29),
        ("1048576", 1048576),  # unitless from 1 MiB up; below it see the next test
        (" 2 KiB ", 2048),
        ("0B", 0),
        ("1TiB", 2**40),
        ("10B", 10),
        (7, 7),
        ("0.1KiB", 102),  # 102.4 bytes rounds down: never admits more than was written
    ],
)
def test_accepted_forms(text, expected):
    assert parse_budget(text) == expected


@pytest.mark.parametrize("text", ["123456", "0", " 50 "])
def test_a_unitless_number_below_one_mib_asks_for_a_percentage(text):
    # parse_budget reads with the one reader of budgets (NOTE [ Unitless budgets ])
    with pytest.raises(UnitlessBudget, match=rf"^budget={text.strip()}: .* did you mean {text.strip()}%\?"):
        parse_budget(text)


@pytest.mark.parametrize("text", ["-1", "-3GiB", "44GB", "44 gigs", "1e9", "", "GiB", "1.5.2MiB", -5, True])
def test_rejected_forms_list_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"47244640256.*512MiB, 44GiB, 1\.5GiB"):
        parse_budget(text)


def test_format_bytes():
    assert format_bytes(3 * 2**29) == "1.500 GiB"
    assert format_bytes(512) == "512 B"
