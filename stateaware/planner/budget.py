"""Budgets as people write them: ``44GiB``, ``512MiB``, ``1.5GiB``, ``123456`` (bytes).

The parsing itself is :func:`stateaware.units.parse_bytes`, shared with the configs.
"""

from __future__ import annotations

from stateaware.units import UNITS as BUDGET_UNITS
from stateaware.units import format_bytes, parse_bytes

__all__ = ["BUDGET_UNITS", "parse_budget", "format_bytes"]


def parse_budget(text: str | int) -> int:
    """The budget in bytes that ``text`` denotes (exact, rounded down, never negative)."""
    return parse_bytes(text, what="budget")
