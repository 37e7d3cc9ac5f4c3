"""Policies for the seven methods from one profile card, and budgets placed by rule.

Plans are computed from a card alone (deterministic, milliseconds), never by measuring:
``plan_methods`` gives, per method, the row the ``policies`` table records — the
per-segment policy, whether it is feasible under the budget, and the static model's
prediction ``P + sum r + max q`` bytes and ``sum c`` milliseconds (paper eq. 3).

The three planners are ``stateaware.planner.plan``'s (paper §4, §9.1): ``joint`` (every
option, true costs), ``eager_whole`` (eager and whole, true costs: the correctly costed
control) and ``agnostic`` (eager and whole with the state parts removed; its chosen
policy is re-costed truly, so its predicted peak may exceed the budget it "fits").

NOTE [ Budget positions ]
    A CPU-scale workload has different absolute sizes from the paper's, so a budget is
    placed at the same *relative position* between two anchors of the card: the least
    predicted peak any eager/whole policy reaches (``min_ew``, as the paper's Table 5) and
    the *measured* all-eager step peak (``eager``, as the paper's Table 6; the card's
    provenance ``eager_step_peak_bytes``, else the model's all-eager prediction):
    ``budget = min_ew + position * (eager - min_ew)``, with ``position`` computed from the
    paper profile's budget and anchors (``position_of``). A position in (0, 1) lies
    between them (eager exceeds it, some eager/whole policy fits); a negative one lies
    below every eager/whole policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateaware.planner import evaluate_policy, min_peak_bytes
from stateaware.planner import plan as planner_plan
from stateaware.planner.records import PLAN_COLUMNS, plan_columns

__all__ = ["PLANNERS", "predict", "plan", "fixed_plan", "plan_methods", "anchors", "position_of", "budget_at"]

#: Planner names, as ``policies.planner`` records them.
PLANNERS = ("joint", "eager_whole", "agnostic")


def predict(card: Any, policy: Sequence[str]) -> tuple[int, float]:
    """``(P + sum r + max q, sum c)`` of ``policy`` (one option per segment) on ``card``."""
    if len(policy) != card.n_segments:
        raise ValueError(f"policy has {len(policy)} entries; the card has {card.n_segments} segments")
    peak, ms = evaluate_policy(card, tuple(policy))
    return int(peak), float(ms)


def plan(card: Any, budget_bytes: int, planner: str) -> dict[str, Any]:
    """The planner's choice under ``budget_bytes``: its ``policies`` plan columns
    (``stateaware.planner.records.plan_columns``; ``policy_row`` makes the row).

    Keys: ``planner, feasible, policy`` (a list, or None when infeasible),
    ``predicted_peak_bytes, predicted_ms`` (true costs; None when infeasible),
    ``min_peak_bytes`` (least peak in the planner's own view), ``frontier_size``,
    ``truncated``, ``card_digest``, ``plan_digest``. The search is
    ``stateaware.planner.plan`` (untruncated).
    """
    if planner not in PLANNERS:
        raise ValueError(f"planner={planner!r}; valid planners are: {', '.join(PLANNERS)}")
    return plan_columns(planner_plan(card, int(budget_bytes), planner=planner))


def fixed_plan(card: Any, policy: Sequence[str] | None, planner: str | None = None) -> dict[str, Any]:
    """The plan columns of a policy no planner chose: always ``feasible`` (the budget
    evaluates a fixed policy, it does not gate it), with the static model's prediction on
    ``card``. ``policy`` None is ``functional``'s: its out-of-place state is no card option,
    so it has no policy or prediction. The search columns (frontier, digest) are None."""
    peak, ms = (None, None) if policy is None else predict(card, policy)
    return {
        **dict.fromkeys(PLAN_COLUMNS),
        "planner": planner,
        "feasible": True,
        "policy": None if policy is None else list(policy),
        "predicted_peak_bytes": peak,
        "predicted_ms": ms,
        "card_digest": card.digest,
    }


def anchors(card: Any) -> tuple[int, int]:
    """``(min_ew, eager)``: least predicted eager/whole peak and the measured all-eager
    step peak (predicted when the card's provenance lacks it); NOTE [ Budget positions ]."""
    table = [{o: seg[o] for o in ("eager", "whole") if o in seg} for seg in card.segments]
    min_ew = min_peak_bytes(card.persistent_bytes, table)
    eager = card.provenance.get("eager_step_peak_bytes")
    if eager is None:
        eager, _ = predict(card, ["eager"] * card.n_segments)
    return int(min_ew), int(eager)


def position_of(budget: float, min_ew: float, eager: float) -> float:
    """Where ``budget`` sits between the anchors: 0 at ``min_ew``, 1 at ``eager``."""
    if eager <= min_ew:
        raise ValueError(f"anchors must satisfy eager ({eager}) > min_ew ({min_ew}) to place a budget")
    return (float(budget) - float(min_ew)) / (float(eager) - float(min_ew))


def budget_at(card: Any, position: float) -> int:
    """The budget in bytes at ``position`` between ``card``'s anchors (rounded down)."""
    min_ew, eager = anchors(card)
    if eager <= min_ew:
        raise ValueError(
            f"card {card.digest[:12]}: the all-eager peak ({eager} B) does not exceed the least "
            f"eager/whole peak ({min_ew} B), so relative budget positions are undefined"
        )
    return int(min_ew + position * (eager - min_ew))


def plan_methods(card: Any, budget_bytes: int, methods: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per method, its plan columns under ``budget_bytes`` (uniform methods included);
    ``stateaware.planner.records.policy_row(columns, method, ...)`` makes the row.

    ``eager``/``whole``/``regions`` are recorded as the fixed planners ``eager``/``whole``/
    ``region`` with their model prediction; ``functional`` has no card option (its state
    versions are not a per-segment option), so its prediction is None. Uniform methods are
    always executed (``feasible`` is true): the budget evaluates them, it does not gate them.
    """
    # lazy: torch: planning cells (stateaware.cost_runtime.cells) imports this module and must not load torch
    from stateaware.cost_runtime.methods import PLANNED, UNIFORM

    rows: dict[str, dict[str, Any]] = {}
    for method in methods:
        if method in PLANNED:
            rows[method] = plan(card, budget_bytes, PLANNED[method])
        elif method in UNIFORM:
            rows[method] = fixed_plan(card, [UNIFORM[method]] * card.n_segments, planner=UNIFORM[method])
        elif method == "functional":
            rows[method] = fixed_plan(card, None)
        else:
            raise ValueError(f"method={method!r}; valid methods are: {', '.join((*UNIFORM, 'functional', *PLANNED))}")
    return rows
