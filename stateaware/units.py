"""Byte sizes as people write them: ``44GiB``, ``512MiB``, ``1.5GiB``, ``123456``."""

from __future__ import annotations

import re

__all__ = ["UNITS", "parse_bytes", "format_bytes"]

#: Binary units only: budgets in the paper are GiB, and 44 GB != 44 GiB.
UNITS = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

_SIZE = re.compile(r"^\s*(?P<num>[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")


def parse_bytes(text: str | int | float) -> int:
    """The number of bytes ``text`` denotes; ``ValueError`` naming the accepted forms.

    Accepts an integer or float (bytes), or a string ``<number><unit>`` with unit one of
    ``B, KiB, MiB, GiB, TiB`` (binary; decimal ``GB`` is refused rather than guessed).
    Fractional bytes round to the nearest integer. Negative sizes parse (the caller
    decides whether they are allowed).
    """
    if isinstance(text, bool):
        raise ValueError(f"size {text!r} is not a number of bytes")
    if isinstance(text, (int, float)):
        return int(round(text))
    match = _SIZE.match(text)
    if not match or match["unit"] not in UNITS:
        raise ValueError(
            f"cannot parse size {text!r}: write bytes (e.g. 123456) or a number with one of "
            f"the units {', '.join(u for u in UNITS if u)} (e.g. 44GiB, 512MiB)"
        )
    return int(round(float(match["num"]) * UNITS[match["unit"]]))


def format_bytes(n: int | float) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1, three decimals (e.g. 42.352 GiB)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if abs(n) >= UNITS[unit]:
            return f"{n / UNITS[unit]:.3f} {unit}"
    return f"{int(n)} B"
