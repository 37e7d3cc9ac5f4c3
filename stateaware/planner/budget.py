"""Budgets as people write them: ``44GiB``, ``512MiB``, ``1.5GiB``, ``123456`` (bytes)."""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["BUDGET_UNITS", "parse_budget", "format_bytes"]

#: Binary units only: the paper's budgets are GiB, and 44 GB is not 44 GiB, so a decimal
#: unit is refused rather than guessed.
BUDGET_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

_FORMS = "bytes as an integer (123456) or a number with a unit B, KiB, MiB, GiB or TiB (512MiB, 44GiB, 1.5GiB)"
_BUDGET = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")


def parse_budget(text: str | int) -> int:
    """The budget in bytes that ``text`` denotes; ``ValueError`` listing the accepted forms.

    Decimals are exact (``1.5GiB`` is 1,610,612,736 bytes, computed with fractions, not
    floats); a fractional byte count rounds *down*, so a parsed budget never admits a peak
    above the written one. Negative and malformed budgets are errors.
    """
    if isinstance(text, bool):
        raise ValueError(f"budget {text!r} is not a size; write {_FORMS}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"budget {text} is negative; write {_FORMS}")
        return text
    match = _BUDGET.match(str(text))
    if match is None or (match["unit"] and match["unit"] not in BUDGET_UNITS):
        hint = "budgets are non-negative; " if str(text).strip().startswith("-") else ""
        raise ValueError(f"cannot read budget {text!r}: {hint}write {_FORMS}")
    scale = BUDGET_UNITS[match["unit"]] if match["unit"] else 1
    return int(Fraction(match["number"]) * scale)  # int() of a non-negative Fraction floors


def format_bytes(n: int | float) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1, three decimals (42.352 GiB)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if abs(n) >= BUDGET_UNITS[unit]:
            return f"{n / BUDGET_UNITS[unit]:.3f} {unit}"
    return f"{int(n)} B"
