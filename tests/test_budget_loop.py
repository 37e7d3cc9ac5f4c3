"""The budget loop (``stateaware.auto.fit``): a plan is kept only if its measured step fits.

Two levels. On generated cards with a simulated measurement (the step model plus bytes
the card does not see) the loop's contract is checked for any card and budget. On a real
model whose head lies outside the segments (bytes the card's model misses) ``wrap``
keeps a byte budget that eq. 3's plan alone breaks — the negative control.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import stateaware.auto as auto
from stateaware.auto import fit as fit_module
from stateaware.auto.fit import REPLANS, BudgetNotKept, fit, step_model_bytes
from stateaware.planner import card_from_dict
from stateaware.planner.synthetic import random_card

pytestmark = pytest.mark.usefixtures("one_thread")


def _with_eager_peak(card, outside: int):
    doc = card.to_dict()
    eager = card.persistent_bytes + step_model_bytes(card, ("eager",) * card.n_segments) + outside
    doc["provenance"] = {**doc["provenance"], "eager_step_peak_bytes": eager}
    return card_from_dict(doc)


def _plain(**doc):
    return doc


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 8),
    outside=st.integers(0, 1 << 26),
    drift=st.integers(-(1 << 24), 1 << 24),
    position=st.integers(0, 100),
)
def test_the_returned_plan_was_measured_within_the_budget(seed, n, outside, drift, position):
    # The simulated step: the step model, plus bytes outside the segments, plus a drift
    # that the all-eager measurement did not show (so the first prediction can be wrong).
    card = _with_eager_peak(random_card(np.random.default_rng(seed), n, options=("eager", "whole")), outside)
    calls = []

    def measure(policy):
        calls.append(policy)
        extra = drift if any(o != "eager" for o in policy) else 0
        return card.persistent_bytes + step_model_bytes(card, policy) + outside + extra

    budget = f"{position}%" if position % 2 else card.persistent_bytes + outside + (1 << 25) * position
    try:
        plan = fit(card, budget, "joint", measure, _plain)
    except BudgetNotKept as error:
        assert "budget" in str(error) and "Tip" in str(error)
        return
    assert 1 <= len(calls) <= REPLANS + 1 and len(set(calls)) == len(calls)
    assert plan["policy"] in calls
    assert plan["replans"] == len(calls) - 1
    assert plan["measured_peak_bytes"] == measure(plan["policy"])
    assert plan["measured_peak_bytes"] <= plan["budget_bytes"]
    if drift == 0:  # what the loop learned from the eager step is all there is: the first guess is exact
        assert plan["prior_prediction_bytes"] == plan["measured_peak_bytes"]
    # The closed loop's model explains the plan's step within the tolerance (two terms, at
    # most three measured steps, one simulated drift: it can).
    assert abs(plan["predicted_peak_bytes"] - plan["measured_peak_bytes"]) <= 0.05 * plan["measured_peak_bytes"]


def test_an_unknown_planner_and_an_impossible_budget_are_errors_that_name_them():
    card = _with_eager_peak(random_card(np.random.default_rng(0), 4), 0)
    with pytest.raises(ValueError, match="unknown planner 'best'; valid planners are: joint"):
        fit(card, "50%", "best", lambda p: 0, _plain)
    with pytest.raises(BudgetNotKept, match=r"no plan fits budget 10 \(10 bytes\): the least predicted"):
        fit(card, 10, "joint", lambda p: 0, _plain)


class HeadOutside(nn.Module):
    """Segments ``body.*``; the head's wide temporaries lie outside every segment."""

    def __init__(self, width: int = 64, blocks: int = 6) -> None:
        super().__init__()
        self.body = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh()) for _ in range(blocks)
        )
        self.head = nn.Sequential(nn.Linear(width, 2 * width), nn.Tanh(), nn.Linear(2 * width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.body:
            x = block(x)
        return self.head(x)


def test_wrap_keeps_a_byte_budget_that_the_card_model_alone_breaks():
    torch.manual_seed(0)
    model, x = HeadOutside(), torch.randn(2048, 64)
    segments = [f"body.{i}" for i in range(6)]
    card = auto.profile(copy.deepcopy(model), (x,), segments=segments, repeats=1)
    budget = auto.plan(card, "90%").budget_bytes  # bytes: 90 % of the way by the card model
    # Negative control: eq. 3's plan at that budget, applied, measures above it.
    static = auto.plan(card, budget)
    applied = auto.apply(copy.deepcopy(model), static)
    assert auto.step_peak_bytes(applied, (x,)) > budget >= static.predicted_peak_bytes
    wrapped, plan = auto.wrap(copy.deepcopy(model), (x,), budget=budget, segments=segments, repeats=1)
    measured = auto.step_peak_bytes(wrapped, (x,))
    assert plan.measured_peak_bytes == measured <= budget == plan.budget_bytes
    assert plan.correction.throughout > 0  # the head's bytes, learned from the measured eager step


def test_a_budget_nothing_keeps_is_refused_naming_the_budget(monkeypatch):
    torch.manual_seed(0)
    model, x = HeadOutside(), torch.randn(256, 64)
    segments = [f"body.{i}" for i in range(6)]
    card = auto.profile(copy.deepcopy(model), (x,), segments=segments, repeats=1)
    with pytest.raises(BudgetNotKept, match="no plan fits budget 1000 "):
        auto.wrap(model, (x,), budget=1000, segments=segments, repeats=1)
    # A measurement always above the prediction: every measured plan is over; the loop
    # stops after REPLANS re-plans and says what it measured.
    least = auto.plan(card, "0%").budget_bytes
    monkeypatch.setattr(fit_module, "TOLERANCE", 0.0)
    with pytest.raises(BudgetNotKept, match="when measured: the least measured step peak was"):
        fit(card, least + card.provenance["eager_step_peak_bytes"] - card.persistent_bytes, "joint",
            lambda p: 10**12, _plain)  # fmt: skip


def test_a_fixed_planner_without_its_option_names_the_segments_that_lack_it():
    torch.manual_seed(0)
    model, x = HeadOutside(blocks=2), torch.randn(32, 64)
    segments = ["body.0", "body.1"]  # stateless: eager and whole, no rows to journal
    message = (
        "planner 'region' runs segments only as region, and 2 segment(s) have no such option: "
        "'body.0' offers eager, whole; 'body.1' offers eager, whole. Tip: use the joint planner"
    )
    with pytest.raises(BudgetNotKept, match=f"^{re.escape(message)}"):
        auto.wrap(copy.deepcopy(model), (x,), budget="50%", segments=segments, planner="region", repeats=1)
    card = auto.profile(model, (x,), segments=segments, repeats=1)
    with pytest.raises(ValueError, match=f"^nothing to apply: {re.escape(message)}"):
        auto.apply(model, auto.plan(card, "50%", "region"))
