"""Keep the budget: choose a plan by a step model, measure it applied, correct, re-plan.

The planner's card model (paper eq. 3) charges a policy ``P + Σ r + max q``. A training
step differs from it in ways that matter when the budget is tight:

* **backward frees early.** Segment ``i``'s recompute and backward run after every later
  segment's retained bytes were freed, and its forward before any of them existed, so
  the segments peak at ``max_i (Σ_{j≤i} r_j + q_i)`` above ``P`` — at most eq. 3's,
  often far less when a segment with a large ``q`` comes early (``step_model_bytes``);
* **bytes outside the segments.** What the stem leaves alive through the whole step (its
  output, masks, position tables), and what the head and loss add on top of every
  segment's retention at the end of the forward. The card sees neither. They are the
  two terms of the *correction*: ``throughout`` (added to every moment) and ``at_end``
  (the bytes beyond ``Σ r`` at the forward's end), so the predicted step peak is

      ``P + max(step_model + throughout, Σ r + at_end)``.

``fit`` closes the loop (``stateaware.auto.wrap`` and, with a budget,
``stateaware.integrations.transformers.enable`` call it). The card's own measured
all-eager step gives the first correction (conservatively: all of the excess counted
as ``throughout``); a card ``stateaware.auto.profile`` made also holds a measured step
of its floor policy (every segment recomputed that can be,
``stateaware.auto.profiler.floor_policy``), and the two anchors separate the terms:
with the eager step alone, bytes alive only at the forward's end would be charged to
every moment, and a plan keeping the last segment eager would look cheapest.

Among the planner's policies that are Pareto in the step model (its option set and cost
view; ``DEFAULT_PLANNER`` by default) it takes the fastest whose predicted step peak
fits the budget — or, when none is predicted to fit, the one whose least plausible peak
is least if that fits (``least_plausible_peak``: measure before refusing) —
applies it, and measures one step (``measure``, which restores everything it changes:
bit-identity holds). When the measured peak is over the budget, leaves more than
``UNUSED`` of the headroom above ``P`` unused, or lands further than ``TOLERANCE`` from
its prediction, it refits the correction to every step measured so far (``_refit``)
and chooses again — at most ``REPLANS`` times; a plan measured once (the card's anchors
included) is charged its measured peak from then on, never a prediction — and returns the
fastest measured plan within budget; ``BudgetNotKept`` when no measured plan is, or when no plan's least
plausible peak fits.

A relative budget (``"50%"``) is placed between the measured anchors: 100% is the
measured all-eager step, 0% the least predicted step peak of any candidate under the
current correction (so ``"0%"`` asks for the least memory the model reaches, measured).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from stateaware.planner import PLANNERS, evaluate_policy
from stateaware.planner import plan as card_plan
from stateaware.planner.budget import MAX_BUDGET, parse_budget_text
from stateaware.planner.frontier import step_pareto_policies
from stateaware.planner.planners import Plan

__all__ = [
    "fit",
    "step_model_bytes",
    "no_option_message",
    "BudgetNotKept",
    "Correction",
    "UNUSED",
    "TOLERANCE",
    "REPLANS",
    "CANDIDATE_CAP",
    "DEFAULT_PLANNER",
    "least_plausible_peak",
]

#: The planner ``stateaware.auto`` plans with unless told otherwise: the joint planner's
#: options and ``selective`` (``stateaware.planner.planners``, NOTE [ The paper's option sets ]).
DEFAULT_PLANNER = "joint_selective"

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
        f"no such option: {shown}{more}. Tip: use the {DEFAULT_PLANNER} planner (every option), or profile with "
        "the state those segments need."
    )


def _candidates(card: Any, planner: str) -> list[tuple[str, ...]]:
    """The planner's policies that are Pareto in the step model (its options and cost view;
    ``step_pareto_policies``: eq. 3's own Pareto set may lack the policy of least step
    peak, which keeps a segment eager where its order makes it cheap), or its one fixed policy."""
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
    return step_pareto_policies(table, CANDIDATE_CAP)


@dataclass(frozen=True)
class Correction:
    """What the card does not see, in bytes (module docstring): alive ``throughout`` the
    step, and beyond the segments' retention ``at_end`` of the forward."""

    throughout: int = 0
    at_end: int = 0

    def predict(self, persistent: int, model: int, retained: int) -> int:
        """The predicted step peak of a policy with step model ``model`` and ``Σ r = retained``."""
        return persistent + max(model + self.throughout, retained + self.at_end)


def _refit(persistent: int, steps: list[tuple[int, int, int]], first: int | None = None) -> Correction:
    """The correction that predicts ``steps`` ((step model, Σ r, measured) each) best.

    Each measurement is explained by one of the two terms of the prediction, so the
    candidates are the values that explain one measurement exactly; the pair with the
    least worst error wins (ties: the larger ``throughout``, then the larger ``at_end``:
    over-predicting rather than under-predicting the policies not measured yet). With ``first`` (an index into
    ``steps``), that step's error counts first: the closed loop's model of the plan it
    returns explains that plan's own step before the others.
    """
    throughouts = {m - persistent - model for model, _, m in steps}
    at_ends = {m - persistent - retained for _, retained, m in steps}

    def error(c: Correction, step: tuple[int, int, int]) -> int:
        model, retained, measured = step
        return abs(c.predict(persistent, model, retained) - measured)

    def rank(c: Correction) -> tuple[int, int, int, int]:
        own = 0 if first is None else error(c, steps[first])
        return own, max(error(c, step) for step in steps), -c.throughout, -c.at_end

    return min((Correction(t, e) for t in throughouts for e in at_ends), key=rank)


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
    (``AutoPlan``) from ``Plan``'s fields plus ``measured_peak_bytes``,
    ``prior_prediction_bytes`` (what the loop predicted for the plan *before* measuring
    it: the honest test of the step model), ``correction`` (the ``Correction`` fitted to
    every step measured, the loop's model once closed) and ``replans``. Its
    ``predicted_peak_bytes`` is that closed model's prediction — fitted to the measured
    steps, the plan's own among them, so it agrees with the measurement as far as two
    terms can explain every step measured (exactly when two steps were). ``BudgetNotKept`` when
    nothing measured fits, or no candidate is predicted to fit (the message gives the
    least predicted or measured peak and the budget).
    """
    if planner not in PLANNERS:
        raise ValueError(f"unknown planner {planner!r}; valid planners are: {', '.join(PLANNERS)}")
    read = parse_budget_text(budget, field="budget")  # the one reader: "50" asks "did you mean 50%?"
    position = read if isinstance(read, Fraction) else None
    persistent = card.persistent_bytes
    why = no_option_message(card, planner)
    if why is not None:
        raise BudgetNotKept(why)
    candidates = _candidates(card, planner)
    model = {p: step_model_bytes(card, p) for p in candidates}
    retained = {p: _retained(card, p) for p in candidates}
    times = {p: evaluate_policy(card, p)[1] for p in candidates}
    measured_eager = card.provenance.get("eager_step_peak_bytes")
    anchors: list[tuple[tuple[str, ...], int]] = []  # the card's measured steps: all-eager, then its floor
    if measured_eager is not None and all("eager" in s for s in card.segments):
        anchors.append((("eager",) * card.n_segments, int(measured_eager)))
        floor = (card.provenance.get("auto") or {}).get("floor_policy")
        if floor is not None and "floor_step_peak_bytes" in card.provenance["auto"]:
            anchors.append((tuple(floor), int(card.provenance["auto"]["floor_step_peak_bytes"])))
    # (step model, Σ r, measured) of every step measured
    steps = [(step_model_bytes(card, p), _retained(card, p), peak) for p, peak in anchors]
    # policy -> a measured step peak: the anchors, then every plan the loop measures
    known = dict(anchors)
    correction = _refit(persistent, steps) if steps else Correction()
    tried: dict[tuple[str, ...], int] = {}  # policy -> its measured step peak, in this loop
    step_of: dict[tuple[str, ...], int] = {}  # policy -> its index in steps
    predicted: dict[tuple[str, ...], tuple[int, Correction]] = {}  # before measuring it

    def predict(p: tuple[str, ...]) -> int:
        # A plan measured already is known, not predicted: two terms cannot explain every
        # step exactly, and a refit that under-predicts a measured plan would choose it again.
        if p in known:
            return known[p]
        return correction.predict(persistent, model[p], retained[p])

    budget_bytes = 0
    for _ in range(REPLANS + 1):
        least = min(predict(p) for p in candidates)
        if position is None:
            budget_bytes = int(read)
        else:
            top = int(measured_eager) if measured_eager is not None else least
            budget_bytes = min(least + int(position * max(top - least, 0)), MAX_BUDGET)  # int64 planners
        fitting = [p for p in candidates if predict(p) <= budget_bytes]
        if fitting:
            choice = min(fitting, key=lambda p: (times[p], predict(p)))
        else:
            # Measure before refusing: the plan the model's stated error lets fit best
            # (NOTE [ Measure before refusing ]).
            plausible = {
                p: least_plausible_peak(correction, len(steps), persistent, model[p], retained[p])
                for p in candidates
                if p not in tried
            }
            if not plausible or min(plausible.values()) > budget_bytes:
                if tried:
                    break
                raise BudgetNotKept(
                    f"no plan fits budget {budget!r} ({budget_bytes} bytes): the least predicted step peak is "
                    f"{least} bytes (persistent {persistent}), and no plan's peak can fit within the step "
                    "model's stated error. Tip: raise the budget."
                )
            choice = min(plausible, key=lambda p: (plausible[p], predict(p), times[p]))
        if choice in tried:
            break  # the correction chose a plan already measured: nothing new to learn
        predicted[choice] = (predict(choice), correction)
        tried[choice] = known[choice] = measured = measure(choice)
        step_of[choice] = len(steps)
        steps.append((model[choice], retained[choice], measured))
        unused = budget_bytes - measured
        close = abs(measured - predicted[choice][0]) <= TOLERANCE * measured
        if measured <= budget_bytes and unused <= UNUSED * max(budget_bytes - persistent, 0) and close:
            break
        correction = _refit(persistent, steps)
    kept = [p for p, measured in tried.items() if measured <= budget_bytes]
    if not kept:
        least_measured = min(tried, key=tried.__getitem__)
        raise BudgetNotKept(
            f"no plan kept budget {budget!r} ({budget_bytes} bytes) when measured: the least measured step "
            f"peak was {tried[least_measured]} bytes ({'/'.join(least_measured)}). Tip: raise the budget."
        )
    best = min(kept, key=lambda p: (times[p], tried[p]))
    # The loop's model once closed: fitted to every measured step, the returned plan's first.
    final = _refit(persistent, steps, first=step_of[best])
    base = card_plan(card, max(budget_bytes - final.throughout, 0), planner)
    doc = {f.name: getattr(base, f.name) for f in fields(Plan)}
    doc.update(
        feasible=True,
        policy=best,
        predicted_peak_bytes=final.predict(persistent, model[best], retained[best]),
        predicted_ms=times[best],
        budget_bytes=budget_bytes,
        fits_budget=True,
    )
    return make_plan(
        **doc,
        measured_peak_bytes=tried[best],
        prior_prediction_bytes=predicted[best][0],
        correction=final,
        replans=len(tried) - 1,
    )


def least_plausible_peak(
    correction: Correction, measured_steps: int, persistent: int, model: int, retained: int
) -> int:
    """The least step peak the loop's model allows a policy (step model ``model``, ``Σ r =
    retained``): its prediction less the model's stated error.

    NOTE [ Measure before refusing ]
        With one step measured (the card's all-eager step) the correction counts all of
        that step's excess over the card as ``throughout``; the bytes really alive
        throughout the step may be anything down to none (a head whose logits peak at the
        end of the forward is then counted at every moment), so a policy's peak may be as
        low as its prediction with ``throughout = 0``. With two or more steps measured the
        terms are fitted, and the stated error is ``TOLERANCE`` of the prediction, the
        share beyond which the loop re-plans. When no plan is predicted to fit, ``fit``
        measures the plan whose least plausible peak is least, if that fits the budget,
        before refusing: the measurement either fits or gives the correction a second anchor.
    """
    predicted = correction.predict(persistent, model, retained)
    least = predicted - int(TOLERANCE * predicted)
    if measured_steps <= 1:
        least = min(least, Correction(0, correction.at_end).predict(persistent, model, retained))
    return least


def _retained(card: Any, policy: Sequence[str]) -> int:
    return sum(segment[option].retained_bytes for segment, option in zip(card.segments, policy, strict=True))
