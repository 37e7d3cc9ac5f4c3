"""Budgets as people write them: ``44GiB``, ``512MiB``, ``1.5GiB``, ``123456`` (bytes), or a
relative position on a card, ``50%``.

The byte parsing itself is :func:`stateaware.units.parse_bytes`, shared with the configs.

NOTE [ Relative budgets ]
    ``P%`` places the budget ``P`` percent of the way from the least peak any policy of
    the card reaches (0%: the ``joint`` planner's least, every option allowed) to the
    predicted peak of running every segment eagerly (100%), rounded down:
    ``least + P/100 * (eager - least)``. The anchors are the card's, not a planner's, so
    every planner is held to the same bytes (below the eager/whole minimum only ``joint``
    fits). Both are the static model's, so a relative budget is as logical as a byte
    budget and needs no measurement; ``0%`` is feasible for ``joint``, ``100%`` admits
    all-eager.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import TYPE_CHECKING, cast

from stateaware.units import UNITS as BUDGET_UNITS
from stateaware.units import format_bytes, parse_bytes

if TYPE_CHECKING:  # at run time the card's module is imported where it is used
    from .profile_card import ProfileCard

__all__ = ["BUDGET_UNITS", "parse_budget", "format_bytes", "relative_position", "budget_on_card"]

_PERCENT = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*%\s*$")


def parse_budget(text: str | int) -> int:
    """The budget in bytes that ``text`` denotes (exact, rounded down, never negative)."""
    return parse_bytes(text, what="budget")


def relative_position(text: object) -> Fraction | None:
    """``P/100`` for a budget written ``P%`` (exact), None for any other form."""
    match = _PERCENT.match(text) if isinstance(text, str) else None
    return None if match is None else Fraction(match["number"]) / 100


def budget_on_card(text: str | int, card: ProfileCard) -> int:
    """Budget bytes for ``text`` on ``card``: a byte size as ``parse_budget`` reads it, or
    ``P%`` placed between the card's anchors (NOTE [ Relative budgets ]).

    ``ValueError`` for a malformed budget, or a relative one on a card where some segment
    has no ``eager`` option.
    """
    position = relative_position(text)
    if position is None:
        return parse_budget(text)
    least, eager = anchors(card)
    return least + int(position * (eager - least))  # int() of a non-negative Fraction floors


def anchors(card: ProfileCard) -> tuple[int, int]:
    """``(least, eager)``: the least peak any policy reaches on ``card`` and the predicted
    all-eager peak — the 0% and 100% of a relative budget."""
    from .frontier import min_peak_bytes
    from .planners import evaluate_policy

    if any("eager" not in s for s in card.segments):
        raise ValueError(
            "a relative budget needs a card whose every segment has an 'eager' option. "
            "Tip: give the budget in bytes (44GiB)."
        )
    least = min_peak_bytes(card.persistent_bytes, [dict(s) for s in card.segments])
    eager, _ = evaluate_policy(card, ("eager",) * card.n_segments)
    # Not None: every segment has at least its eager option (checked above).
    return int(cast(int, least)), int(eager)
