"""The named planners, one interface: ``plan(card, budget_bytes, planner) -> Plan``.

================  ================================================================  =========
planner           option set and costs                                               search
================  ================================================================  =========
joint             eager, whole, region, offload — the card's true costs (eq. 3)      DP
eager_whole       eager, whole — the same true costs, regions excluded (§9.1, §10)   DP
agnostic          eager, whole — preservation omitted (see ``agnostic`` below)       DP
eager             every segment eager                                                fixed
whole             every segment replayed with a whole-state snapshot                 fixed
region            every segment replayed with region preservation                    fixed
joint_selective   joint's options and ``selective`` — the same true costs            DP
================  ================================================================  =========

NOTE [ The paper's option sets ]
    ``joint`` and the controls plan over the paper's options (``PAPER_OPTIONS``) and
    nothing else, so the cohorts' records and the frozen cards' plans do not depend on
    which options a card may hold. ``joint_selective`` is the same dynamic program over
    every option of ``OPTIONS``, ``selective`` (a replay keeping the outputs of the
    expensive ops, ``stateaware.auto.segment``) included: the planner ``stateaware.auto``
    uses by default. On a card without ``selective`` options the two plan identically.

NOTE [ What the state-agnostic control omits ]
    The ``agnostic`` planner sees each option as ``OptionCost.without_state()``: retained
    bytes minus ``state_retained_bytes``, temporary bytes minus ``state_temp_bytes``, time
    minus ``state_ms`` (card.py, NOTE [ The state_* fields ]). It chooses, and decides
    feasibility and ``min_peak_bytes``, entirely in that view — a generic checkpoint
    planner that does not know replay must preserve state. Runtime still preserves state
    correctly, so its chosen policy is then *re-costed with the true costs*:
    ``predicted_peak_bytes`` and ``predicted_ms`` are what that policy really costs in the
    model, and ``fits_budget`` says whether the true peak fits. For every other planner
    ``fits_budget == feasible``; for ``agnostic`` a feasible plan may not fit (§9, §10).

NOTE [ Infeasible is an outcome ]
    No policy within budget gives ``feasible=False``, an empty ``policy``, no predicted
    peak or time (an infeasible policy is never executed or given a time), and
    ``min_peak_bytes`` = the least peak the planner's option set reaches in its own cost
    view (``None`` only when some segment has none of its options at all).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from .frontier import Frontier, min_peak_bytes, pareto_frontier, tradeoff_curve
from .profile_card import OPTIONS, PAPER_OPTIONS, OptionCost, ProfileCard

__all__ = ["PLANNERS", "Plan", "plan", "evaluate_policy"]

#: Planner name -> (option set, cost view, search).
PLANNERS: Mapping[str, tuple[tuple[str, ...], str, str]] = MappingProxyType(
    {
        "joint": (PAPER_OPTIONS, "true", "dp"),
        "eager_whole": (("eager", "whole"), "true", "dp"),
        "agnostic": (("eager", "whole"), "agnostic", "dp"),
        "eager": (("eager",), "true", "fixed"),
        "whole": (("whole",), "true", "fixed"),
        "region": (("region",), "true", "fixed"),
        "joint_selective": (OPTIONS, "true", "dp"),
    }
)

#: Frontier cap of the quick first pass that finds an incumbent for the exact cost bound:
#: big enough to land within a few percent of the optimum on the cards we have measured,
#: small enough to cost a few milliseconds per hundred segments. It never truncates the
#: exact pass.
_INCUMBENT_CAP = 64


@dataclass(frozen=True)
class Plan:
    """One planner's answer for one card at one budget (see the module NOTEs).

    ``frontier_size`` counts the (retained, max temporary, time) triples the dynamic
    program held after the last segment (1 for a fixed policy that exists, 0 when nothing
    fits). ``frontier`` holds the (peak bytes, ms) points of those policies that no other
    beats on both, sorted by peak, in the planner's own cost view — for plotting. By
    default the program also drops prefixes that provably cannot be optimal at this
    budget (bounds.py), so the frontier is the near-optimal part; ``plan(...,
    full_frontier=True)`` keeps every policy that fits. ``truncated`` is true only when a
    ``frontier_cap`` removed a point, and then optimality is not claimed.
    """

    planner: str
    feasible: bool
    policy: tuple[str, ...]
    predicted_peak_bytes: int | None
    predicted_ms: float | None
    min_peak_bytes: int | None
    frontier_size: int
    truncated: bool
    card_digest: str
    budget_bytes: int
    fits_budget: bool
    frontier: np.ndarray = field(repr=False, compare=False)

    @property
    def digest(self) -> str:
        """SHA-256 naming this plan: card digest, planner, budget and the chosen policy."""
        doc = {
            "card_digest": self.card_digest,
            "planner": self.planner,
            "budget_bytes": self.budget_bytes,
            "feasible": self.feasible,
            "policy": list(self.policy),
            "truncated": self.truncated,
        }
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def to_json(self) -> str:
        """Exactly the keys ``python -m stateaware.plan --json`` prints, in that order."""
        doc = {
            "feasible": self.feasible,
            "policy": list(self.policy),
            "predicted_peak_bytes": self.predicted_peak_bytes,
            "predicted_ms": self.predicted_ms,
            "frontier_size": self.frontier_size,
            "truncated": self.truncated,
            "budget_bytes": self.budget_bytes,
            "planner": self.planner,
            "min_peak_bytes": self.min_peak_bytes,
            "card_digest": self.card_digest,
        }
        return json.dumps(doc)


def evaluate_policy(card: ProfileCard, policy: Sequence[str]) -> tuple[int, float]:
    """True (peak bytes, ms) of ``policy`` on ``card``: ``P + Σ r + max q`` and ``Σ c``.

    ``ValueError`` if the policy's length differs from the card's or it names an option a
    segment lacks.
    """
    if len(policy) != card.n_segments:
        raise ValueError(f"policy has {len(policy)} entries but the card has {card.n_segments} segments")
    retained, temp, ms = 0, 0, 0.0
    for index, (segment, option) in enumerate(zip(card.segments, policy, strict=True)):
        if option not in segment:
            raise ValueError(f"segment {index} has no option {option!r}; it has: {', '.join(segment) or 'none'}")
        cost = segment[option]
        retained += cost.retained_bytes
        temp = max(temp, cost.temp_bytes)
        ms += cost.ms
    return card.persistent_bytes + retained + temp, ms


def _table(card: ProfileCard, options: tuple[str, ...], view: str) -> list[dict[str, OptionCost]]:
    if view == "agnostic":
        return [{o: s[o].without_state() for o in options if o in s} for s in card.segments]
    return [{o: s[o] for o in options if o in s} for s in card.segments]


def _empty_curve() -> np.ndarray:
    return np.empty((0, 2), dtype=np.float64)


def _infeasible(name: str, card: ProfileCard, budget: int, min_peak: int | None) -> Plan:
    return Plan(
        planner=name,
        feasible=False,
        policy=(),
        predicted_peak_bytes=None,
        predicted_ms=None,
        min_peak_bytes=min_peak,
        frontier_size=0,
        truncated=False,
        card_digest=card.digest,
        budget_bytes=budget,
        fits_budget=False,
        frontier=_empty_curve(),
    )


def _search(persistent: int, table: list[dict[str, OptionCost]], budget: int, cap: int | None, full: bool) -> Frontier:
    upper = None
    if not full:
        # A quick capped pass finds a policy that fits; its time bounds the exact pass.
        quick = pareto_frontier(persistent, table, _INCUMBENT_CAP, budget_bytes=budget)
        best = quick.best(budget)
        upper = None if best is None else float(quick.ms[best])
    return pareto_frontier(persistent, table, cap, budget_bytes=budget, upper_ms=upper)


def plan(
    card: ProfileCard,
    budget_bytes: int,
    planner: str = "joint",
    frontier_cap: int | None = None,
    *,
    full_frontier: bool = False,
) -> Plan:
    """Choose a policy for ``card`` under ``budget_bytes`` with the named planner.

    ``planner`` is one of ``PLANNERS``. ``frontier_cap`` (default None: untruncated, so the
    policy is optimal within the static model) bounds the dynamic program's frontier per
    segment; when it bites the plan says ``truncated``. ``full_frontier`` keeps every
    policy that fits instead of only those that may be optimal (slower; for plots).
    ``ValueError`` for an unknown planner or a negative budget.
    """
    if planner not in PLANNERS:
        raise ValueError(f"unknown planner {planner!r}; valid planners are: {', '.join(PLANNERS)}")
    if isinstance(budget_bytes, bool) or int(budget_bytes) != budget_bytes or budget_bytes < 0:
        raise ValueError(f"budget_bytes must be a non-negative integer, got {budget_bytes!r}")
    budget = int(budget_bytes)
    options, view, search = PLANNERS[planner]
    table = _table(card, options, view)
    if any(not segment for segment in table):
        return _infeasible(planner, card, budget, None)

    if search == "fixed":
        policy = (options[0],) * card.n_segments
        peak, ms = evaluate_policy(card, policy)
        if peak > budget:
            return _infeasible(planner, card, budget, peak)
        return Plan(
            planner=planner,
            feasible=True,
            policy=policy,
            predicted_peak_bytes=peak,
            predicted_ms=ms,
            min_peak_bytes=peak,
            frontier_size=1,
            truncated=False,
            card_digest=card.digest,
            budget_bytes=budget,
            fits_budget=True,
            frontier=np.array([[float(peak), ms]]),
        )

    least = min_peak_bytes(card.persistent_bytes, table)
    if least is None or least > budget:
        return _infeasible(planner, card, budget, least)
    frontier = _search(card.persistent_bytes, table, budget, frontier_cap, full_frontier)
    best = frontier.best(budget)
    if best is None:
        # Only a cap can lose every fitting policy (least <= budget says one exists).
        return replace(
            _infeasible(planner, card, budget, least),
            truncated=frontier.truncated,
            frontier_size=frontier.size,
        )
    policy = frontier.policy(best)
    peak, ms = evaluate_policy(card, policy)  # true costs, also for the agnostic view
    return Plan(
        planner=planner,
        feasible=True,
        policy=policy,
        predicted_peak_bytes=peak,
        predicted_ms=ms,
        min_peak_bytes=least,
        frontier_size=frontier.size,
        truncated=frontier.truncated,
        card_digest=card.digest,
        budget_bytes=budget,
        fits_budget=peak <= budget,
        frontier=tradeoff_curve(frontier),
    )
