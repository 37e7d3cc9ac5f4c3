"""Byte sizes as people write them: ``44GiB``, ``512MiB``, ``1.5GiB``, ``123456``.

One parser for every size the project reads — budgets on the planner's command line,
sizes in configs — so ``44GiB`` means the same bytes everywhere.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["UNITS", "FORMS", "parse_bytes", "format_bytes"]

#: Binary units only: the paper's budgets are GiB, and 44 GB is not 44 GiB, so a decimal
#: unit is refused rather than guessed.
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

#: The accepted forms, as error messages state them. The integer example is 44 GiB, at
#: least 1 MiB: a unitless budget below that is refused (stateaware.planner.budget NOTE
#: [ Unitless budgets ]), so an error message never suggests a form that would be.
FORMS = "bytes as an integer (47244640256) or a number with a unit B, KiB, MiB, GiB or TiB (512MiB, 44GiB, 1.5GiB)"

_SIZE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")


def parse_bytes(text: str | int, what: str = "size") -> int:
    """The number of bytes ``text`` denotes; ``ValueError`` naming ``what`` and the accepted forms.

    Decimals are exact (``1.5GiB`` is 1,610,612,736 bytes, computed with fractions, not
    floats); a fractional byte count rounds *down*, so a parsed budget never admits a peak
    above the written one. Negative and malformed sizes are errors.
    """
    if isinstance(text, bool):
        raise ValueError(f"{what} {text!r} is not a size; write {FORMS}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{what} {text} is negative; write {FORMS}")
        return text
    match = _SIZE.match(str(text))
    if match is None or (match["unit"] and match["unit"] not in UNITS):
        hint = f"{what}s are non-negative; " if str(text).strip().startswith("-") else ""
        raise ValueError(f"cannot read {what} {text!r}: {hint}write {FORMS}")
    scale = UNITS[match["unit"]] if match["unit"] else 1
    return int(Fraction(match["number"]) * scale)  # int() of a non-negative Fraction floors


def format_bytes(n: int | float) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1, three decimals (1.500 GiB)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if abs(n) >= UNITS[unit]:
            return f"{n / UNITS[unit]:.3f} {unit}"
    return f"{int(n)} B"
