"""Budgets as people write them: ``44GiB``, ``512MiB``, ``1.5GiB``, ``47244640256`` (bytes), or
a relative position on a card, ``50%``.

The byte parsing itself is ``stateaware.units.parse_bytes``, shared with the configs.

NOTE [ Relative budgets ]
    ``P%`` places the budget ``P`` percent of the way from the least peak any policy of
    the card reaches (0%: the ``joint`` planner's least, every option allowed) to the
    predicted peak of running every segment eagerly (100%), rounded down:
    ``least + P/100 * (eager - least)``. The anchors are the card's, not a planner's, so
    every planner is held to the same bytes (below the eager/whole minimum only ``joint``
    fits). Both are the static model's, so a relative budget is as logical as a byte
    budget and needs no measurement; ``0%`` is feasible for ``joint``, ``100%`` admits
    all-eager.

NOTE [ Unitless budgets ]
    A budget typed as text (``--budget``, a config's ``…budget`` key, ``budget="50"`` in
    Python) without a unit is bytes, and ``50`` bytes is never what anyone meant: it is a
    percentage missing its ``%``. So ``parse_budget_text``, the one reader of budgets
    (the command line, the configs, ``stateaware.auto``, ``parse_budget`` and
    ``budget_on_card`` all call it), refuses a unitless number below 1 MiB
    (``UNITLESS_FLOOR``) with one line that names the field and suggests ``P%``; an
    explicit unit (``512KiB``, ``100B``) is always accepted, and so is a Python ``int``
    (bytes, whatever its size: tiny models have sub-MiB budgets). A ``float`` is refused
    (``0.5`` could be half or half a byte). A relative budget above ``100%`` is accepted
    with one warning line on stderr: it is above all-eager, so every policy fits.
"""

from __future__ import annotations

import argparse
import re
import sys
from fractions import Fraction
from typing import TYPE_CHECKING, cast

from stateaware.planner.frontier import min_peak_bytes
from stateaware.planner.planners import evaluate_policy
from stateaware.units import FORMS, format_bytes, parse_bytes
from stateaware.units import UNITS as BUDGET_UNITS

if TYPE_CHECKING:  # at run time the card's module is imported where it is used
    from .profile_card import ProfileCard

__all__ = [
    "BUDGET_UNITS",
    "UNITLESS_FLOOR",
    "MAX_BUDGET",
    "UnitlessBudget",
    "parse_budget",
    "parse_budget_text",
    "budget_argument",
    "format_bytes",
    "relative_position",
    "budget_on_card",
]

_PERCENT = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*%\s*$")
_UNITLESS = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*$")

#: Budget text without a unit below this many bytes is refused (NOTE [ Unitless budgets ]).
UNITLESS_FLOOR = 2**20
#: The largest budget in bytes: the planners count in int64.
MAX_BUDGET = 2**63 - 1


class UnitlessBudget(ValueError):
    """A unitless budget text below ``UNITLESS_FLOOR`` bytes: its message names the field."""


def _spelled(field: str, text: str) -> str:
    # As the user typed it: ``--budget 50`` on a command line, ``cohort.params.budget=50`` in a config.
    return f"{field} {text}" if field.startswith("-") else f"{field}={text}"


def parse_budget_text(text: str | int, field: str = "budget", *, warn: bool = True) -> int | Fraction:
    """The budget that ``text`` denotes: bytes as an ``int``, or ``P/100`` as a ``Fraction``
    for ``P%`` (place it with ``budget_on_card``).

    The one reader of budgets (NOTE [ Unitless budgets ]): text from a command line, a
    config or Python, or a Python ``int`` (bytes as given). ``UnitlessBudget`` naming
    ``field`` for a unitless number below 1 MiB, ``ValueError`` (from
    ``stateaware.units.parse_bytes``) for a malformed or negative one, ``ValueError``
    naming ``field`` for a value neither text nor an ``int`` (a ``float``, a ``bool``) or
    above ``MAX_BUDGET`` bytes (the planners count in int64); a
    relative budget above 100% prints one warning line to stderr unless ``warn=False``.
    ``field`` is the flag (``--budget``), the dotted config key (``cohort.params.budget``)
    or the keyword (``budget``).
    """
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ValueError(
            f"{_spelled(field, repr(text))}: a budget is an int (bytes) or text; write {FORMS}, or a percentage ('50%')"
        )
    if isinstance(text, int):
        return _counted(parse_bytes(text, what="budget"), field, str(text))
    position = relative_position(text)
    if position is not None:
        if position > 1 and warn:
            print(
                f"warning: {_spelled(field, text.strip())} is above all-eager (100%), so every policy fits",
                file=sys.stderr,
            )
        return position
    unitless = _UNITLESS.match(text)
    if unitless is not None and Fraction(unitless["number"]) < UNITLESS_FLOOR:
        number = unitless["number"]
        raise UnitlessBudget(
            f"{_spelled(field, number)}: a budget without a unit is bytes, and {number} bytes is below 1 MiB; "
            f"did you mean {number}%? (units: B, KiB, MiB, GiB, ...; or P%)"
        )
    return _counted(parse_bytes(text, what="budget"), field, text.strip())


def _counted(n: int, field: str, text: str) -> int:
    # The planners count bytes in int64: a larger budget would overflow them, and every
    # policy fits long before it.
    if n > MAX_BUDGET:
        raise ValueError(
            f"{_spelled(field, text)}: {n} bytes is above the largest budget the planners count, "
            f"{MAX_BUDGET} bytes (2**63 - 1); every policy fits far below it (write 100%)"
        )
    return n


def parse_budget(text: str | int) -> int:
    """The budget in bytes that ``text`` denotes (exact, rounded down, never negative), read
    by ``parse_budget_text``: ``UnitlessBudget`` for ``"50"``, ``ValueError`` for a
    relative ``"50%"`` (it needs a card: ``budget_on_card``) or a malformed one."""
    if relative_position(text) is not None:
        raise ValueError(
            f"budget {text!r} is relative: it needs a card. Tip: budget_on_card({text!r}, card), or "
            "stateaware.auto.plan(card, ...)"
        )
    return int(parse_budget_text(text))


def relative_position(text: object) -> Fraction | None:
    """``P/100`` for a budget written ``P%`` (exact), None for any other form."""
    match = _PERCENT.match(text) if isinstance(text, str) else None
    return None if match is None else Fraction(match["number"]) / 100


def budget_on_card(text: str | int, card: ProfileCard) -> int:
    """Budget bytes for ``text`` on ``card``: a byte size as ``parse_budget_text`` reads
    it, or ``P%`` placed between the card's anchors (NOTE [ Relative budgets ]).

    ``ValueError`` for a malformed budget (``UnitlessBudget`` for ``"50"``), or a relative
    one on a card where some segment has no ``eager`` option. Silent above 100%: the
    caller that read the budget warned.
    """
    position = parse_budget_text(text, warn=False)
    if not isinstance(position, Fraction):
        return position
    least, eager = anchors(card)
    # int() of a non-negative Fraction floors; far above 100% the planners' int64 caps it
    return min(least + int(position * (eager - least)), MAX_BUDGET)


def anchors(card: ProfileCard) -> tuple[int, int]:
    """``(least, eager)``: the least peak any policy reaches on ``card`` and the predicted
    all-eager peak — the 0% and 100% of a relative budget."""
    if any("eager" not in s for s in card.segments):
        raise ValueError(
            "a relative budget needs a card whose every segment has an 'eager' option. "
            "Tip: give the budget in bytes (44GiB)."
        )
    least = min_peak_bytes(card.persistent_bytes, [dict(s) for s in card.segments])
    eager, _ = evaluate_policy(card, ("eager",) * card.n_segments)
    # Not None: every segment has at least its eager option (checked above).
    return int(cast(int, least)), int(eager)


def budget_argument(text: str) -> str:
    """An ``argparse`` type for a ``--budget`` flag: ``text`` unchanged when
    ``parse_budget_text`` reads it, else ``argparse.ArgumentTypeError`` with its message
    (a unitless number below 1 MiB: "did you mean 50%?")."""
    try:
        parse_budget_text(text, field="--budget")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--budget ")) from None
    return text
