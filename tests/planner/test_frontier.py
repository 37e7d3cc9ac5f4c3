"""The Pareto dynamic program against exhaustive enumeration, on thousands of random cards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.planner import (
    OPTIONS,
    PAPER_OPTIONS,
    OptionCost,
    card_from_dict,
    enumerate_policies,
    evaluate_policy,
    min_peak_bytes,
    pareto_frontier,
    plan,
)
from stateaware.planner.synthetic import random_card

TOL = 1e-9  # relative: times are float64 sums taken in different orders


def _check_planner_against_enumeration(card, planner, rng):
    """The DP's optimum equals enumeration's at every distinct budget; plan() at a few."""
    options = {"joint": PAPER_OPTIONS, "joint_selective": OPTIONS, "eager_whole": ("eager", "whole")}[planner]
    table = [{o: s[o] for o in options if o in s} for s in card.segments]
    enum = enumerate_policies(card.persistent_bytes, table)
    least = int(enum.peak_bytes.min())
    assert min_peak_bytes(card.persistent_bytes, table) == least
    # Whole frontier, at every budget where the optimum can change (and one below all).
    front = pareto_frontier(card.persistent_bytes, table)
    peaks, best_ms = enum.optimum_curve()
    assert front.best(least - 1) is None
    order = np.lexsort((front.ms, front.peak_bytes))
    front_peaks, front_ms = front.peak_bytes[order], np.minimum.accumulate(front.ms[order])
    at = np.searchsorted(front_peaks, peaks, side="right") - 1
    np.testing.assert_allclose(front_ms[at], best_ms, rtol=TOL, atol=TOL)
    # plan() with its budget bounds, at budgets below, inside and above the peaks.
    for budget in (least - 1, int(rng.choice(peaks)), int(rng.choice(peaks)) - 1):
        if budget < 0:
            continue
        reference = enum.best(budget)
        result = plan(card, budget, planner)
        assert result.feasible == (reference is not None), budget
        assert result.min_peak_bytes == least
        assert not result.truncated
        if reference is None:
            assert result.policy == () and result.predicted_ms is None
            continue
        assert result.predicted_ms == pytest.approx(enum.ms[reference], rel=TOL, abs=TOL)
        assert result.predicted_peak_bytes <= budget
        assert evaluate_policy(card, result.policy) == (result.predicted_peak_bytes, result.predicted_ms)
        assert set(result.policy) <= set(options)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tradeoff", "uniform"])
def test_joint_equals_enumeration_three_options_up_to_ten_segments(kind):
    rng = np.random.default_rng(20261129 + len(kind))
    for trial in range(1000):
        n = int(rng.integers(1, 10)) if trial % 10 else 10
        # Small byte ranges force ties in every coordinate; missing options force gaps.
        card = random_card(rng, n, kind=kind, missing=0.2, max_bytes=int(rng.choice([8, 64, 1 << 30])))
        _check_planner_against_enumeration(card, "joint", rng)


def test_eager_whole_equals_enumeration_at_sixteen_segments():
    rng = np.random.default_rng(16)
    for trial in range(100):
        kind = ("tradeoff", "uniform")[trial % 2]
        card = random_card(rng, 16, kind=kind, options=("eager", "whole"), max_bytes=int(rng.choice([16, 1 << 30])))
        _check_planner_against_enumeration(card, "eager_whole", rng)


def test_untruncated_frontier_holds_an_optimum_for_every_budget():
    rng = np.random.default_rng(7)
    for _ in range(200):
        card = random_card(rng, int(rng.integers(1, 8)), kind="uniform", missing=0.2, max_bytes=32)
        front = pareto_frontier(card.persistent_bytes, card.segments)
        enum = enumerate_policies(card.persistent_bytes, card.segments)
        assert not front.truncated
        for budget in np.unique(enum.peak_bytes):
            k = front.best(int(budget))
            assert front.ms[k] == pytest.approx(enum.ms[enum.best(int(budget))], rel=TOL, abs=TOL)
            assert evaluate_policy(card, front.policy(k)) == pytest.approx((front.peak_bytes[k], front.ms[k]))
        # No kept triple dominates another.
        r, q, c = front.retained, front.max_temp, front.ms
        le = (r[:, None] <= r) & (q[:, None] <= q) & (c[:, None] <= c)
        np.fill_diagonal(le, False)
        assert not le.any()


def test_dominance_on_summed_memory_would_be_wrong_and_is_not_used():
    # Prefix A: r=10, q=0; prefix B: r=1, q=12. A is better on r+q (10 < 13) and time,
    # yet the last segment's q=20 raises both maxima, and then only B fits 21+20.
    card = card_from_dict(
        {
            "persistent_bytes": 0,
            "segments": [
                {
                    "eager": {"retained_bytes": 10, "temp_bytes": 0, "ms": 1},
                    "whole": {"retained_bytes": 1, "temp_bytes": 12, "ms": 2},
                },
                {"eager": {"retained_bytes": 0, "temp_bytes": 20, "ms": 1}},
            ],
        }
    )
    result = plan(card, 21, "eager_whole")
    assert result.feasible and result.policy == ("whole", "eager")
    assert (result.predicted_peak_bytes, result.predicted_ms) == (21, 3.0)


def test_a_biting_cap_is_flagged_and_a_loose_one_is_not():
    rng = np.random.default_rng(3)
    card = random_card(rng, 10, kind="uniform")
    full = pareto_frontier(card.persistent_bytes, card.segments)
    assert full.largest > 4 and not full.truncated
    capped = pareto_frontier(card.persistent_bytes, card.segments, cap=4)
    assert capped.truncated and capped.size <= 4
    loose = pareto_frontier(card.persistent_bytes, card.segments, cap=full.largest)
    assert not loose.truncated and loose.size == full.size
    budget = int(np.median(full.peak_bytes))
    truncated_plan = plan(card, budget, "joint", frontier_cap=2)
    assert truncated_plan.truncated
    if truncated_plan.feasible:  # a truncated plan's policy is still valid and costed truly
        assert evaluate_policy(card, truncated_plan.policy)[0] <= budget


def test_budget_bounds_only_drop_policies_that_cannot_fit():
    rng = np.random.default_rng(11)
    for _ in range(100):
        card = random_card(rng, int(rng.integers(1, 7)), kind="uniform", max_bytes=16)
        enum = enumerate_policies(card.persistent_bytes, card.segments)
        budget = int(rng.choice(enum.peak_bytes))
        fitting = pareto_frontier(card.persistent_bytes, card.segments, budget_bytes=budget)
        full = pareto_frontier(card.persistent_bytes, card.segments)
        assert (fitting.peak_bytes <= budget).all()
        # Exactly the full frontier's points that fit (as multisets of triples).
        keep = full.peak_bytes <= budget
        got = sorted(zip(fitting.retained, fitting.max_temp, fitting.ms, strict=True))
        want = sorted(zip(full.retained[keep], full.max_temp[keep], full.ms[keep], strict=True))
        assert got == want


def _cards(options: list[str], max_segments: int) -> st.SearchStrategy:
    """(persistent bytes, segments as {option: (retained, temp, ms)}, budget), small integers."""
    segment = st.dictionaries(
        st.sampled_from(options), st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40)), min_size=1
    )
    return st.tuples(st.integers(0, 50), st.lists(segment, min_size=1, max_size=max_segments), st.integers(0, 200))


def _assert_planner_matches_enumeration(persistent, segments, budget, planner: str) -> None:
    card = card_from_dict(
        {
            "persistent_bytes": persistent,
            "segments": [
                {o: {"retained_bytes": r, "temp_bytes": q, "ms": c} for o, (r, q, c) in s.items()} for s in segments
            ],
        }
    )
    enum = enumerate_policies(card.persistent_bytes, card.segments)
    reference = enum.best(budget)
    result = plan(card, budget, planner)
    assert result.feasible == (reference is not None)
    if reference is not None:
        assert result.predicted_ms == enum.ms[reference]  # integer-valued ms: exact
        assert result.predicted_peak_bytes <= budget


@settings(max_examples=150, deadline=None)
@given(_cards(["eager", "whole", "region"], max_segments=6))
def test_hypothesis_joint_matches_enumeration(drawn):
    _assert_planner_matches_enumeration(*drawn, "joint")


def test_min_peak_is_exact_on_a_card_where_the_least_peak_mixes_options():
    seg = {
        "eager": OptionCost(5, 1, 1.0).to_dict(),
        "region": OptionCost(1, 9, 2.0).to_dict(),
    }
    card = card_from_dict({"persistent_bytes": 3, "segments": [seg, seg, seg]})
    # all eager 3+15+1=19; all region 3+3+9=15; mixes cost more, e.g. 2 region 3+11+9=23.
    assert min_peak_bytes(card.persistent_bytes, card.segments) == 15


def test_int64_overflow_is_refused_with_the_fix():
    big = {"eager": {"retained_bytes": 2**62, "temp_bytes": 0, "ms": 1}}
    card = card_from_dict({"persistent_bytes": 0, "segments": [big, big]})
    with pytest.raises(ValueError, match="int64"):
        pareto_frontier(card.persistent_bytes, card.segments)


def test_joint_with_offload_equals_enumeration_four_options_up_to_seven_segments():
    rng = np.random.default_rng(20261201)
    for trial in range(300):
        n = int(rng.integers(1, 7)) if trial % 10 else 7
        kind = ("tradeoff", "uniform")[trial % 2]
        card = random_card(
            rng, n, kind=kind, options=PAPER_OPTIONS, missing=0.2, max_bytes=int(rng.choice([8, 64, 1 << 30]))
        )
        _check_planner_against_enumeration(card, "joint", rng)


def test_the_controls_never_choose_offload():
    rng = np.random.default_rng(41)
    for _ in range(50):
        card = random_card(rng, 6, kind="uniform", options=PAPER_OPTIONS, max_bytes=1 << 20)
        for planner in ("eager_whole", "agnostic"):
            for budget in (1 << 20, 4 << 20, 1 << 40):
                assert "offload" not in plan(card, budget, planner).policy


# --------------------------------------------------------------------------- the selective option


def test_joint_selective_equals_enumeration_five_options_up_to_six_segments():
    rng = np.random.default_rng(20261205)
    for trial in range(150):
        n = int(rng.integers(1, 6)) if trial % 10 else 6
        kind = ("tradeoff", "uniform")[trial % 2]
        card = random_card(rng, n, kind=kind, options=OPTIONS, missing=0.2, max_bytes=int(rng.choice([8, 64, 1 << 30])))
        _check_planner_against_enumeration(card, "joint_selective", rng)


def test_the_paper_planners_plan_a_card_with_selective_as_the_card_without_it():
    # The paper's planners keep their option sets: a selective option changes none of their plans.
    rng = np.random.default_rng(5)
    for _ in range(20):
        card = random_card(rng, 6, kind="uniform", options=OPTIONS, max_bytes=1 << 20)
        doc = card.to_dict()
        for segment in doc["segments"]:
            if len(segment) > 1:
                segment.pop("selective", None)
        without = card_from_dict(doc)
        for planner in ("joint", "eager_whole", "agnostic"):
            for budget in (1 << 20, 3 << 20, 1 << 40):
                a, b = plan(card, budget, planner), plan(without, budget, planner)
                assert (a.feasible, a.policy, a.predicted_ms, a.min_peak_bytes) == (
                    b.feasible,
                    b.policy,
                    b.predicted_ms,
                    b.min_peak_bytes,
                )
                assert "selective" not in a.policy


@settings(max_examples=200, deadline=None)
@given(_cards(list(OPTIONS), max_segments=5))
def test_hypothesis_joint_selective_matches_enumeration(drawn):
    _assert_planner_matches_enumeration(*drawn, "joint_selective")
