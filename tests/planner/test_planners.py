"""The named planners: one interface, infeasible as an outcome, the paper's structure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stateaware.planner import PLANNERS, card_from_dict, enumerate_policies, evaluate_policy, load_card, plan
from stateaware.planner.synthetic import random_card

GiB = 1 << 30
HANDWRITTEN = Path(__file__).resolve().parents[1] / "data" / "cards" / "handwritten_large_sparse.json"


@pytest.fixture(scope="module")
def card():
    return load_card(HANDWRITTEN)


def test_as_the_budget_grows_joint_moves_from_regions_to_eager(card):
    budgets = [10 * GiB + k * GiB // 2 for k in range(0, 73)]  # 10 .. 46 GiB
    plans = [plan(card, b, "joint") for b in budgets]
    assert all(p.feasible and not p.truncated for p in plans)
    eager = [p.policy.count("eager") for p in plans]
    region = [p.policy.count("region") for p in plans]
    assert eager == sorted(eager)  # never retains fewer segments with more memory
    assert [p.predicted_ms for p in plans] == sorted((p.predicted_ms for p in plans), reverse=True)
    assert region[0] >= 13 and eager[0] <= 3  # tight: replay most segments with regions
    high = plan(card, 44 * GiB, "joint")
    assert high.policy.count("eager") >= 13  # loose: retain most eagerly
    assert "region" in high.policy  # ... but not all: all-eager does not fit 44 GiB
    assert plan(card, 44 * GiB, "eager").feasible is False


def test_below_the_eager_whole_minimum_only_joint_fits(card):
    eager_whole_floor = plan(card, 0, "eager_whole").min_peak_bytes
    assert eager_whole_floor == min(
        enumerate_policies(
            card.persistent_bytes, [{o: s[o] for o in ("eager", "whole")} for s in card.segments]
        ).peak_bytes
    )
    budget = eager_whole_floor - 1
    control = plan(card, budget, "eager_whole")
    assert not control.feasible and control.policy == () and control.predicted_ms is None
    assert control.min_peak_bytes == eager_whole_floor and control.frontier_size == 0
    joint = plan(card, budget, "joint")
    assert joint.feasible and joint.predicted_peak_bytes <= budget
    # At a budget both meet, joint is at least as fast as the correctly costed control.
    both = plan(card, eager_whole_floor + 8 * GiB, "eager_whole"), plan(card, eager_whole_floor + 8 * GiB, "joint")
    assert both[0].feasible and both[1].predicted_ms <= both[0].predicted_ms


def test_agnostic_policy_recosted_truly_can_exceed_the_budget(card):
    result = plan(card, 32 * GiB, "agnostic")
    assert result.feasible  # in its own view it fits ...
    assert not result.fits_budget  # ... but the snapshots it ignored do not
    assert result.predicted_peak_bytes > 32 * GiB
    assert (result.predicted_peak_bytes, result.predicted_ms) == evaluate_policy(card, result.policy)
    assert set(result.policy) <= {"eager", "whole"}
    # Its min peak is in its own view: below the true eager/whole floor.
    assert result.min_peak_bytes < plan(card, 0, "eager_whole").min_peak_bytes


def _agnostic_view_optimum(card, budget):
    """Reference for the agnostic planner: enumerate in its view, then re-cost truly."""
    table = [{o: s[o].without_state() for o in ("eager", "whole") if o in s} for s in card.segments]
    return enumerate_policies(card.persistent_bytes, table), table


def test_agnostic_is_never_better_than_joint_and_matches_its_own_view():
    rng = np.random.default_rng(44)
    checked = 0
    for trial in range(400):
        card = random_card(rng, int(rng.integers(1, 10)), kind=("tradeoff", "uniform")[trial % 2])
        enum_view, _ = _agnostic_view_optimum(card, None)
        budget = int(rng.choice(enum_view.peak_bytes)) + int(rng.integers(0, 2))
        agnostic, joint = plan(card, budget, "agnostic"), plan(card, budget, "joint")
        reference = enum_view.best(budget)
        assert agnostic.feasible == (reference is not None)
        if not agnostic.feasible:
            continue
        assert enum_view.ms[reference] == pytest.approx(
            sum(s[o].without_state().ms for s, o in zip(card.segments, agnostic.policy, strict=True)), rel=1e-9
        )
        assert agnostic.fits_budget == (agnostic.predicted_peak_bytes <= budget)
        if agnostic.fits_budget:
            checked += 1
            assert joint.feasible
            assert joint.predicted_ms <= agnostic.predicted_ms * (1 + 1e-12)
    assert checked >= 50  # the comparison was made often, not vacuously (89 with this seed)


def test_fixed_planners(card):
    for name in ("eager", "whole", "region"):
        expected = evaluate_policy(card, (name,) * 16)
        fits = plan(card, expected[0], name)
        assert fits.feasible and fits.policy == (name,) * 16
        assert (fits.predicted_peak_bytes, fits.predicted_ms) == expected
        assert fits.frontier_size == 1 and fits.frontier.tolist() == [[float(expected[0]), expected[1]]]
        short = plan(card, expected[0] - 1, name)
        assert not short.feasible and short.min_peak_bytes == expected[0] and short.policy == ()


def test_a_segment_lacking_every_option_of_a_planner_is_infeasible_with_no_min_peak():
    card = card_from_dict(
        {
            "persistent_bytes": 0,
            "segments": [
                {
                    "eager": {"retained_bytes": 1, "temp_bytes": 1, "ms": 1},
                    "region": {"retained_bytes": 0, "temp_bytes": 1, "ms": 2},
                },
                {"region": {"retained_bytes": 0, "temp_bytes": 2, "ms": 2}},
            ],
        }
    )
    for name in ("eager_whole", "agnostic", "eager", "whole"):
        result = plan(card, 10**9, name)
        assert not result.feasible and result.min_peak_bytes is None
    assert plan(card, 10**9, "joint").policy == ("eager", "region")
    assert plan(card, 10**9, "region").policy == ("region", "region")


def test_plan_json_has_exactly_the_cli_keys(card):
    doc = json.loads(plan(card, 30 * GiB, "joint").to_json())
    assert list(doc) == [
        "feasible",
        "policy",
        "predicted_peak_bytes",
        "predicted_ms",
        "frontier_size",
        "truncated",
        "budget_bytes",
        "planner",
        "min_peak_bytes",
        "card_digest",
    ]
    assert doc["feasible"] is True and len(doc["policy"]) == 16
    doc = json.loads(plan(card, GiB, "joint").to_json())
    assert doc == {
        "feasible": False,
        "policy": [],
        "predicted_peak_bytes": None,
        "predicted_ms": None,
        "frontier_size": 0,
        "truncated": False,
        "budget_bytes": GiB,
        "planner": "joint",
        "min_peak_bytes": doc["min_peak_bytes"],
        "card_digest": card.digest,
    }
    assert doc["min_peak_bytes"] > GiB


def test_plan_digest_names_card_planner_budget_and_policy(card):
    a = plan(card, 30 * GiB, "joint")
    assert a.digest == plan(card, 30 * GiB, "joint").digest
    assert a.digest != plan(card, 30 * GiB + 1, "joint").digest
    assert a.digest != plan(card, 30 * GiB, "eager_whole").digest
    assert a.card_digest == card.digest


def test_full_frontier_keeps_every_fitting_tradeoff(card):
    bounded = plan(card, 32 * GiB, "joint")
    full = plan(card, 32 * GiB, "joint", full_frontier=True)
    assert (full.policy, full.predicted_ms) == (bounded.policy, bounded.predicted_ms)
    assert full.frontier_size >= bounded.frontier_size and full.frontier.shape[0] > 5
    peaks, ms = full.frontier[:, 0], full.frontier[:, 1]
    assert (np.diff(peaks) > 0).all() and (np.diff(ms) < 0).all() and peaks.max() <= 32 * GiB


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("nope",), "valid planners are: joint, eager_whole, agnostic, eager, whole, region, joint_selective"),
    ],
)
def test_bad_arguments_name_the_valid_choices(card, args, match):
    with pytest.raises(ValueError, match=match):
        plan(card, GiB, *args)
    with pytest.raises(ValueError, match="non-negative"):
        plan(card, -1)
    with pytest.raises(ValueError, match="frontier_cap"):
        plan(card, 40 * GiB, "joint", frontier_cap=1)


def test_planner_table_lists_all_seven():
    assert list(PLANNERS) == ["joint", "eager_whole", "agnostic", "eager", "whole", "region", "joint_selective"]
