"""Plan and wrap your own model: profile its segments, discover their state, plan, apply.

::

    import stateaware.auto as auto

    # segments: an nn.Sequential's children, else "repeated"
    card = auto.profile(model, (x,))
    plan = auto.plan(card, "50%")  # or bytes, or "8GiB"
    auto.apply(model, plan)  # in place; state_dict() keys unchanged
    # or all three: model, plan = auto.wrap(model, (x,), budget="50%")
    # compiled per segment: auto.wrap(model, (x,), budget="50%", compile=True)

``profile`` measures each segment's planner costs on the current device and finds the
state each segment writes (``state="auto"``); ``plan`` runs the planners of
``stateaware.planner`` on that card; ``apply`` runs every segment under its option —
eager, or our transactional checkpoint with the discovered state preserved ``whole``,
by ``region`` (the rows the forward writes) or ``offload`` (a host copy). Training the
applied model gives the bytes eager training gives: parameters, buffers and RNG state.

``segments=`` takes qualified names, a block class (``segments=BasicBlock``) or a tuple of
classes, a predicate ``fn(name, module) -> bool``, or ``"repeated"`` (the children of a
model's containers of repeated blocks); see ``stateaware.auto.segment.select_segments``.
Under DDP or FSDP2 apply stateaware first, then wrap: a model already wrapped is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from stateaware.auto.errors import ModelStepError
from stateaware.auto.fit import DEFAULT_PLANNER, REPLANS, BudgetNotKept
from stateaware.auto.fit import fit as _fit  # not `fit`: that name is the submodule
from stateaware.auto.progress import Progress, progress_line
from stateaware.planner import plan as _plan
from stateaware.planner.budget import budget_on_card, parse_budget_text
from stateaware.planner.planners import Plan

# NOTE [ Lazy imports ]
# ``import stateaware.auto`` does not import torch (a planning or analysis process may use
# the cards and plans without it): the modules that do — the profiler, the segment
# selection, the wrapper — are imported by the functions that use them, each marked lazy.

if TYPE_CHECKING:  # the segment module imports torch; `import stateaware.auto` does not
    from stateaware.auto.segment import SegmentSpec

__all__ = [
    "profile",
    "plan",
    "apply",
    "wrap",
    "remove",
    "fit_applied",
    "AutoPlan",
    "step_peak_bytes",
    "ModelStepError",
    "BudgetNotKept",
]


@dataclass(frozen=True)
class AutoPlan(Plan):
    """A planner ``Plan`` that carries the card it was made from (``apply`` reads the
    segment names and their state there). ``digest`` and ``to_json`` are ``Plan``'s.

    A plan ``wrap`` made (the budget loop, ``stateaware.auto.fit``) also says what was
    measured: ``measured_peak_bytes`` (one training step's peak, this plan applied; at
    most ``budget_bytes``), ``prior_prediction_bytes`` (the loop's prediction for it before
    measuring it), ``correction`` (the ``stateaware.auto.fit.Correction``: bytes the card
    does not see, fitted to every step measured) and ``replans`` (0: the first choice
    was kept). Its ``predicted_peak_bytes`` is then the closed loop's step model, that
    correction included; ``budget_bytes`` is the budget in bytes it was measured
    against. For ``plan`` these are None, None, None, 0 and eq. 3's prediction.
    """

    card: Any = field(default=None, repr=False, compare=False)
    measured_peak_bytes: int | None = None
    prior_prediction_bytes: int | None = None
    correction: Any = None
    replans: int = 0


def profile(
    model: Any,
    example_inputs: Any,
    *,
    segments: SegmentSpec | str = None,
    state: Any = "auto",
    repeats: int = 3,
    compile: bool | dict[str, Any] = False,
    progress: bool | Progress | None = None,
) -> Any:
    """Measure ``model``'s segments into a ``ProfileCard``; see ``stateaware.auto.profile``.

    ``segments``: see ``select_segments`` (None: an ``nn.Sequential``'s children, else
    ``"repeated"``). ``compile``: True, or a dict of ``torch.compile`` keywords, measures
    every segment compiled regionally and records that on the card, so ``apply`` runs them
    compiled (``stateaware.auto.compiled``). ``ValueError`` for a model already wrapped by
    DDP or FSDP (``stateaware.auto.wrapper.refuse_distributed``): apply stateaware first, then wrap.
    ``progress``: one line on stderr counting the measurements, with an ETA; None (the
    default) shows it only when stderr is a terminal, False never (``stateaware.auto.progress``).
    """
    from stateaware.auto.profiler import profile as _profile  # lazy
    from stateaware.auto.segment import select_segments  # lazy
    from stateaware.auto.wrapper import refuse_distributed  # lazy

    refuse_distributed(model, "profile")
    names = select_segments(model, segments)
    return _profile(
        model, example_inputs, segments=names, state=state, repeats=repeats, compile=compile, progress=progress
    )


def plan(card: Any, budget: int | str, planner: str = DEFAULT_PLANNER) -> AutoPlan:
    """Plan ``card`` under ``budget`` with the named planner (``stateaware.planner.PLANNERS``;
    by default ``joint_selective``: eager, the three preserving replays and ``selective``).

    ``budget``: bytes (an int), a size string (``"8GiB"``), or a relative position
    (``"50%"``: halfway between the least peak any policy of the card achieves and
    all-eager's, whatever the planner; see ``stateaware.planner.budget``), read by its one
    reader (``parse_budget_text``: ``"50"`` is refused asking "did you mean 50%?"). An
    infeasible plan is returned, not raised.
    """

    parse_budget_text(budget, field="budget")  # its errors and its warning above 100%, named as passed
    chosen = _plan(card, budget_on_card(budget, card), planner)
    return AutoPlan(**{f.name: getattr(chosen, f.name) for f in fields(Plan)}, card=card)


def apply(model: Any, plan: AutoPlan) -> Any:
    """Run each segment of ``model`` under ``plan``'s option, in place; returns ``model``."""
    from stateaware.auto.wrapper import apply as _apply  # lazy

    return _apply(model, plan)


def remove(model: Any) -> Any:
    """Undo ``apply``: every segment runs its own ``forward`` again; returns ``model``."""
    from stateaware.auto.wrapper import remove as _remove  # lazy

    return _remove(model)


def wrap(
    model: Any,
    example_inputs: Any,
    *,
    budget: int | str,
    state: Any = "auto",
    planner: str = DEFAULT_PLANNER,
    segments: SegmentSpec | str = None,
    repeats: int = 3,
    compile: bool | dict[str, Any] = False,
    progress: bool | None = None,
) -> tuple[Any, AutoPlan]:
    """``profile``, plan within ``budget`` as measured, and ``apply``; returns ``(model, plan)``.

    The plan is chosen by the budget loop (``stateaware.auto.fit``): the step model picks
    the fastest plan predicted to fit, one training step measures it applied (the model,
    its gradients and the RNG are restored after), and it re-plans with what the
    measurement taught (at most twice) when the peak is over ``budget`` or leaves more
    than 10 % of the headroom above persistent bytes unused. The returned plan's
    ``measured_peak_bytes`` is at most ``plan.budget_bytes`` (a relative budget is placed
    between measured anchors). ``stateaware.auto.fit.BudgetNotKept`` (a ``ValueError``)
    when no plan fits (the message gives the least predicted or measured peak);
    ``ValueError`` for a model already wrapped by DDP or FSDP (apply stateaware first), and
    before any profiling for a budget ``stateaware.planner.budget.parse_budget_text`` refuses
    (``"50"`` is refused asking "did you mean 50%?"). ``repeats``: timed runs per option
    when profiling (the least is kept). ``compile``: True or a dict of ``torch.compile``
    keywords (``{"backend": "aot_eager"}``): each segment is compiled regionally, in place
    and once, profiled and planned compiled, and our replay runs the compiled segment
    (``stateaware.auto.compiled``); ``remove`` undoes it. ``progress``: one line on stderr
    counting profiling's measurements and the budget loop's, with an ETA; None (the
    default) shows it only when stderr is a terminal, False never (``stateaware.auto.progress``).
    """
    from stateaware.auto.wrapper import refuse_distributed  # lazy

    refuse_distributed(model, "wrap")
    parse_budget_text(budget, field="budget", warn=False)  # a misread budget costs no profiling
    line, _ = progress_line(progress, 0, "stateaware.auto")
    try:
        card = profile(
            model, example_inputs, segments=segments, state=state, repeats=repeats, compile=compile, progress=line
        )
        chosen = fit_applied(model, example_inputs, card, budget, planner, progress=line)
    finally:
        line.close()
    return apply(model, chosen), chosen


def fit_applied(
    model: Any,
    example_inputs: Any,
    card: Any,
    budget: int | str,
    planner: str = DEFAULT_PLANNER,
    *,
    progress: Any = None,
) -> AutoPlan:
    """The budget loop of ``wrap`` on a profiled ``card`` of ``model``: each candidate plan is
    applied, one step of ``model(*example_inputs)`` measured, and the plan removed again.
    ``progress`` counts those steps (at most ``stateaware.auto.fit.REPLANS`` + 1), as ``wrap``'s."""
    from stateaware.auto.profiler import measure_step  # lazy
    from stateaware.auto.wrapper import apply_policy, remove  # lazy

    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    line, owned = progress_line(progress, REPLANS + 1, "stateaware.auto: keeping the budget")
    end = line.done + REPLANS + 1  # the loop may stop early: what it did not need counts as done

    def measure(policy: tuple[str, ...]) -> int:
        line.at(f"budget loop: measuring plan {REPLANS + 2 - (end - line.done)} of at most {REPLANS + 1}")
        apply_policy(model, card, policy)
        try:
            return measure_step(model, inputs)
        finally:
            remove(model)
            line.step()

    try:
        chosen: AutoPlan = _fit(card, budget, planner, measure, lambda **doc: AutoPlan(**doc, card=card))
        line.reach(end)
    finally:
        if owned:
            line.close()
    return chosen


def step_peak_bytes(model: Any, example_inputs: Any, step: Any = None) -> int:
    """The measured peak of one forward and backward step; see ``stateaware.auto.profile``."""
    from stateaware.auto.profiler import step_peak_bytes as _step_peak  # lazy

    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    return _step_peak(model, inputs, step)
