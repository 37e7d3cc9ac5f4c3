"""Keep the budget: choose a plan by a step model, measure it applied, correct, re-plan.

The planner's card model (paper eq. 3) charges a policy ``P + Σ r + max q``. A training
step differs from it in two ways that matter when the budget is tight:

* **backward frees early.** Segment ``i``'s recompute and backward run after every later
  segment's retained bytes were freed, and its forward before any of them existed, so
  the step peaks at ``P + max_i (Σ_{j≤i} r_j + q_i)`` — at most eq. 3's, often far less
  when a segment with a large ``q`` comes early (``step_model_bytes``);
* **bytes outside the segments.** The stem, head and loss, a parameter shared by several
  segments (its gradient is accumulated once, not per segment), allocator rounding: a
  roughly constant excess over the model, the *correction*.

``fit`` closes the loop (``stateaware.auto.wrap`` and, with a budget,
``stateaware.integrations.transformers.enable`` call it). The first correction is the
card's own measured all-eager step peak minus the step model's all-eager bytes. Among
the planner's Pareto policies (its option set and cost view; ``joint`` by default) it
takes the fastest whose predicted step peak (step model + correction) fits the budget,
applies it, and measures one step (``measure``, which restores everything it changes:
bit-identity holds). When the measured peak is over the budget, or leaves more than
``UNUSED`` of the activation headroom (``budget - P``) unused, or lands further than
``TOLERANCE`` from its prediction, it learns the correction from that measurement and
chooses again — at most ``REPLANS`` times — and returns the
fastest measured plan within budget; ``BudgetNotKept`` when no measured plan is.

A relative budget (``"50%"``) is placed between the measured anchors: 100% is the
measured all-eager step, 0% the least predicted step peak of any candidate under the
current correction (so ``"0%"`` asks for the least memory the model reaches, measured).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from stateaware.planner import PLANNERS, evaluate_policy
from stateaware.planner import plan as card_plan
from stateaware.planner.budget import parse_budget, relative_position
from stateaware.planner.frontier import pareto_frontier
from stateaware.planner.planners import Plan

__all__ = [
    "fit",
    "step_model_bytes",
    "no_option_message",
    "BudgetNotKept",
    "UNUSED",
    "TOLERANCE",
    "REPLANS",
    "CANDIDATE_CAP",
]

#: Re-plan when the measured peak leaves more than this share of ``budget - P`` unused.
UNUSED = 0.10
#: Re-plan when the measured peak is further than this share of it from the prediction.
TOLERANCE = 0.05
#: At most this many re-plans after the first plan (so at most ``REPLANS + 1`` measurements).
REPLANS = 2
#: The Pareto candidates kept per segment step: plenty for the cards ``auto`` makes (tens of
#: segments); a truncated set still holds valid policies, only fewer to choose among.
CANDIDATE_CAP = 4096


class BudgetNotKept(ValueError):
    """No plan whose measured step peak fits the budget (the message names both)."""


def step_model_bytes(card: Any, policy: Sequence[str]) -> int:
    """Bytes above persistent of one step under ``policy``: ``max_i (Σ_{j≤i} r_j + q_i)``."""
    retained, peak = 0, 0
    for segment, option in zip(card.segments, policy, strict=True):
        cost = segment[option]
        retained += cost.retained_bytes
        peak = max(peak, retained + cost.temp_bytes)
    return peak


def no_option_message(card: Any, planner: str) -> str | None:
    """Why ``planner`` has no policy on ``card`` (segments offering none of its options,
    named as the card names them), or None when it has one."""
    options = PLANNERS[planner][0]
    if PLANNERS[planner][2] == "fixed":
        options = options[:1]
    names = (card.provenance.get("auto") or {}).get("segments") or [str(i) for i in range(card.n_segments)]
    lacking = [(name, sorted(s)) for name, s in zip(names, card.segments, strict=True) if not set(options) & set(s)]
    if not lacking:
        return None
    shown = "; ".join(f"{name!r} offers {', '.join(offered)}" for name, offered in lacking[:5])
    more = f" and {len(lacking) - 5} more" if len(lacking) > 5 else ""
    return (
        f"planner {planner!r} runs segments only as {' or '.join(options)}, and {len(lacking)} segment(s) have "
        f"no such option: {shown}{more}. Tip: use the joint planner (every option), or profile with the state those "
        "segments need."
    )


def _candidates(card: Any, planner: str) -> list[tuple[str, ...]]:
    """The planner's Pareto policies (its options and cost view), or its one fixed policy."""
    options, view, search = PLANNERS[planner]
    if search == "fixed":
        if any(options[0] not in s for s in card.segments):
            return []
        return [(options[0],) * card.n_segments]
    table = [{o: s[o] for o in options if o in s} for s in card.segments]
    if view == "agnostic":
        table = [{o: c.without_state() for o, c in s.items()} for s in table]
    if any(not s for s in table):
        return []
    frontier = pareto_frontier(card.persistent_bytes, table, CANDIDATE_CAP)
    return [frontier.policy(i) for i in range(frontier.size)]


def fit(
    card: Any,
    budget: int | str,
    planner: str,
    measure: Callable[[tuple[str, ...]], int],
    make_plan: Callable[..., Any],
) -> Any:
    """The fastest plan of ``card`` whose measured step peak fits ``budget`` (module docstring).

    ``measure(policy)`` applies ``policy``, returns one step's measured peak in bytes and
    leaves the model as it found it. ``make_plan(**fields)`` builds the returned plan
    (``AutoPlan``) from ``Plan``'s fields plus ``measured_peak_bytes``, ``correction_bytes``
    (the correction it was chosen with) and ``replans``; its ``predicted_peak_bytes`` is
    the step model's prediction made *before* the plan was measured — an honest test of
    the model, not a copy of the measurement. ``BudgetNotKept`` when
    nothing measured fits, or no candidate is predicted to fit (the message gives the
    least predicted or measured peak and the budget).
    """
    if planner not in PLANNERS:
        raise ValueError(f"unknown planner {planner!r}; valid planners are: {', '.join(PLANNERS)}")
    persistent = card.persistent_bytes
    why = no_option_message(card, planner)
    if why is not None:
        raise BudgetNotKept(why)
    candidates = _candidates(card, planner)
    model = {p: step_model_bytes(card, p) for p in candidates}
    times = {p: evaluate_policy(card, p)[1] for p in candidates}
    eager = ("eager",) * card.n_segments
    measured_eager = card.provenance.get("eager_step_peak_bytes")
    correction = 0
    if measured_eager is not None and all("eager" in s for s in card.segments):
        correction = int(measured_eager) - persistent - step_model_bytes(card, eager)
    position = relative_position(budget)
    tried: dict[tuple[str, ...], int] = {}  # policy -> its measured step peak
    predicted: dict[tuple[str, ...], tuple[int, int]] = {}  # policy -> (prediction, correction) before measuring
    budget_bytes = 0
    for _ in range(REPLANS + 1):
        least = persistent + min(model.values()) + correction
        if position is None:
            budget_bytes = parse_budget(budget)
        else:
            top = int(measured_eager) if measured_eager is not None else least
            budget_bytes = least + int(position * max(top - least, 0))
        fitting = [p for p in candidates if persistent + model[p] + correction <= budget_bytes]
        if not fitting:
            if tried:
                break
            raise BudgetNotKept(
                f"no plan fits budget {budget!r} ({budget_bytes} bytes): the least predicted step peak is "
                f"{least} bytes (persistent {persistent}). Tip: raise the budget."
            )
        choice = min(fitting, key=lambda p: (times[p], model[p]))
        if choice in tried:
            break  # the correction chose a plan already measured: nothing new to learn
        predicted[choice] = (persistent + model[choice] + correction, correction)
        tried[choice] = measured = measure(choice)
        unused = budget_bytes - measured
        close = abs(measured - predicted[choice][0]) <= TOLERANCE * measured
        if measured <= budget_bytes and unused <= UNUSED * max(budget_bytes - persistent, 0) and close:
            break
        correction = measured - persistent - model[choice]
    kept = [p for p, measured in tried.items() if measured <= budget_bytes]
    if not kept:
        least_measured = min(tried, key=tried.__getitem__)
        raise BudgetNotKept(
            f"no plan kept budget {budget!r} ({budget_bytes} bytes) when measured: the least measured step "
            f"peak was {tried[least_measured]} bytes ({'/'.join(least_measured)}). Tip: raise the budget."
        )
    best = min(kept, key=lambda p: (times[p], tried[p]))
    base = card_plan(card, max(budget_bytes - correction, 0), planner)
    doc = {f.name: getattr(base, f.name) for f in fields(Plan)}
    doc.update(
        feasible=True,
        policy=best,
        predicted_peak_bytes=predicted[best][0],
        predicted_ms=times[best],
        budget_bytes=budget_bytes,
        fits_budget=True,
    )
    return make_plan(
        **doc, measured_peak_bytes=tried[best], correction_bytes=predicted[best][1], replans=len(tried) - 1
    )
