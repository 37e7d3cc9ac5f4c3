"""The joint planner: profile cards, an untruncated Pareto dynamic program, the control
planners and exhaustive enumeration (paper §4, §9.1; Table 5).

Pure Python and NumPy — callable from a notebook with no orchestration installed::

    from stateaware.planner import load_card, parse_budget, plan
    card = load_card("card.json")
    p = plan(card, parse_budget("44GiB"), planner="joint")
    p.policy, p.predicted_peak_bytes, p.predicted_ms
"""

from .budget import format_bytes, parse_budget
from .exhaustive import Enumeration, enumerate_policies
from .frontier import Frontier, min_peak_bytes, pareto_frontier, tradeoff_curve
from .planners import PLANNERS, Plan, evaluate_policy, plan
from .profile_card import (
    OPTIONS,
    PAPER_OPTIONS,
    CardError,
    OptionCost,
    ProfileCard,
    card_from_dict,
    load_card,
    save_card,
)

__all__ = [
    "OPTIONS",
    "PAPER_OPTIONS",
    "PLANNERS",
    "CardError",
    "Enumeration",
    "Frontier",
    "OptionCost",
    "Plan",
    "ProfileCard",
    "card_from_dict",
    "enumerate_policies",
    "evaluate_policy",
    "format_bytes",
    "load_card",
    "min_peak_bytes",
    "parse_budget",
    "pareto_frontier",
    "plan",
    "save_card",
    "tradeoff_curve",
]
