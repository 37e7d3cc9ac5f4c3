"""Exhaustive enumeration: exact costs of every policy, and its size limit."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from stateaware.planner import card_from_dict, enumerate_policies, evaluate_policy
from stateaware.planner.exhaustive import MAX_POLICIES
from stateaware.planner.synthetic import random_card


def test_every_policy_is_enumerated_once_with_its_exact_cost():
    rng = np.random.default_rng(5)
    card = random_card(rng, 5, kind="uniform", missing=0.3)
    enum = enumerate_policies(card.persistent_bytes, card.segments)
    expected = {pol: evaluate_policy(card, pol) for pol in itertools.product(*(list(s) for s in card.segments))}
    assert enum.count == len(expected)
    got = {enum.policy(i): (int(enum.peak_bytes[i]), float(enum.ms[i])) for i in range(enum.count)}
    assert got.keys() == expected.keys()
    for pol, (peak, ms) in expected.items():
        assert got[pol][0] == peak and got[pol][1] == pytest.approx(ms, rel=1e-12)


def test_sizes_the_paper_uses_and_the_limit():
    rng = np.random.default_rng(6)
    assert enumerate_policies(0, random_card(rng, 16, options=("eager", "whole")).segments).count == 2**16
    assert enumerate_policies(0, random_card(rng, 10).segments).count == 3**10
    seg = {o: {"retained_bytes": 1, "temp_bytes": 1, "ms": 1} for o in ("eager", "whole", "region")}
    too_many = card_from_dict({"persistent_bytes": 0, "segments": [seg] * 15})
    with pytest.raises(ValueError, match="MAX_POLICIES"):
        enumerate_policies(0, too_many.segments)
    assert 3**15 > MAX_POLICIES


def test_best_breaks_time_ties_by_lower_peak():
    card = card_from_dict(
        {
            "persistent_bytes": 0,
            "segments": [
                {
                    "eager": {"retained_bytes": 5, "temp_bytes": 0, "ms": 1},
                    "whole": {"retained_bytes": 3, "temp_bytes": 0, "ms": 1},
                }
            ],
        }
    )
    enum = enumerate_policies(0, card.segments)
    assert enum.policy(enum.best(10)) == ("whole",)
    assert enum.best(2) is None
    peaks, ms = enum.optimum_curve()
    assert peaks.tolist() == [3, 5] and ms.tolist() == [1.0, 1.0]
