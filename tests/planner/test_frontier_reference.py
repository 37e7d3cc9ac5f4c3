"""The dynamic program against its previous implementation, kept here as the reference.

``_reference_pareto_frontier`` is ``pareto_frontier`` and ``Bounds`` as they were before
the speed-up of commit e49bfd1: every multiplier evaluated for every candidate,
one ``np.unique`` and a Python loop per ``q`` level in the dominance sweep, a search of
the threshold grid per candidate. The current program must return the *same* frontier,
bit for bit — triples, back-pointers, ``largest`` and ``truncated`` — so every plan,
frontier size and digest stays what it was. (Agreement with exhaustive enumeration is
test_planner_frontier.py's job; this file pins down the identity of the two programs.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.planner import OPTIONS, OptionCost, card_from_dict, min_peak_bytes, pareto_frontier, plan
from stateaware.planner import planners as planners_module
from stateaware.planner.frontier import Frontier
from stateaware.planner.synthetic import random_card

# --- the reference: bounds.py and frontier.py's program at e49bfd1, comments trimmed ---

_REF_COST_SLACK = 1e-9
_REF_MULTIPLIERS = 16
_REF_ROOT_PROBES = 256
_REF_FINE_MULTIPLIERS = 48
_REF_NONE = np.iinfo(np.int64).max


class _ReferenceBounds:
    def __init__(self, persistent_bytes, table, budget_bytes, upper_ms):
        self.room = int(budget_bytes) - int(persistent_bytes)
        self.upper_ms = upper_ms
        options = [list(segment.values()) for segment in table]
        self._q = np.array([[o.temp_bytes for o in s] + [_REF_NONE] * (3 - len(s)) for s in options], dtype=np.int64)
        self._r = np.array([[o.retained_bytes for o in s] + [0] * (3 - len(s)) for s in options], dtype=np.int64)
        ms = np.array([[o.ms for o in s] + [np.inf] * (3 - len(s)) for s in options], dtype=np.float64)
        self.grid = np.unique(np.concatenate([[0], self._q[self._q != _REF_NONE]]))
        at = np.searchsorted(self.grid, self._q)
        order = np.argsort(self._q, axis=1, kind="stable")
        ordered_at = np.take_along_axis(at, order, axis=1)
        ordered_r = np.take_along_axis(self._r, order, axis=1)
        running = np.minimum.accumulate(np.where(ordered_at < self.grid.shape[0], ordered_r, _REF_NONE), axis=1)
        steps = np.diff(np.concatenate([np.zeros((len(options), 1), np.int64), running], axis=1), axis=1)
        valid = ordered_at < self.grid.shape[0]
        self._rs = _reference_event_sum(ordered_at[valid], steps[valid], self.grid.shape[0])
        self._missing = len(options) - np.cumsum(np.bincount(ordered_at[:, 0], minlength=self.grid.shape[0] + 1))[:-1]
        self._step = 0
        self.multipliers = _reference_multipliers(options, self.room)
        per_segment = (ms[:, :, None] + self._r[:, :, None].astype(np.float64) * self.multipliers[None, None, :]).min(
            axis=1
        )
        self._lagrangian = np.vstack([np.cumsum(per_segment[::-1], axis=0)[::-1], np.zeros(len(self.multipliers))])

    def advance(self):
        q, r = self._q[self._step], self._r[self._step]
        least = np.where(self.grid[None, :] >= q[:, None], r[:, None], _REF_NONE).min(axis=0)
        undefined = least == _REF_NONE
        self._rs = self._rs - np.where(undefined, 0, least)
        self._missing = self._missing - undefined
        self._step += 1

    def lower_ms(self, r, q, c):
        slack = (self.room - r - q).astype(np.float64)
        bound = (self._lagrangian[self._step][None, :] - slack[:, None] * self.multipliers[None, :]).max(axis=1)
        return c + bound

    def alive(self, r, q, c):
        completed = np.where(self._missing == 0, self.grid + self._rs, _REF_NONE)
        least_tail = np.minimum.accumulate(completed[::-1])[::-1]
        at = np.searchsorted(self.grid, q)
        alive = least_tail[at] <= self.room - r
        if self.upper_ms is not None:
            alive &= self.lower_ms(r, q, c) <= self.upper_ms + _REF_COST_SLACK * abs(self.upper_ms)
        return alive


def _reference_event_sum(positions, deltas, width):
    out = np.zeros(width + 1, dtype=np.int64)
    np.add.at(out, positions, deltas)
    return np.cumsum(out)[:-1]


def _reference_multipliers(options, room):
    rates = []
    for segment in options:
        for a in segment:
            for b in segment:
                if a.retained_bytes < b.retained_bytes and a.ms > b.ms:
                    rates.append((a.ms - b.ms) / (b.retained_bytes - a.retained_bytes))
    if not rates:
        return np.zeros(1)
    rates = np.array(rates)
    coarse = np.quantile(rates, np.linspace(0.0, 1.0, _REF_MULTIPLIERS))
    probe = np.unique(np.quantile(rates, np.linspace(0.0, 1.0, _REF_ROOT_PROBES)))
    r = np.array([[o.retained_bytes for o in s] + [np.inf] * (3 - len(s)) for s in options], dtype=np.float64)
    c = np.array([[o.ms for o in s] + [np.inf] * (3 - len(s)) for s in options], dtype=np.float64)
    least_q = max(min(o.temp_bytes for o in s) for s in options)
    root = (c[:, :, None] + r[:, :, None] * probe).min(axis=1).sum(axis=0) - probe * (room - least_q)
    best = probe[int(np.argmax(root))]
    fine = best * np.exp2(np.linspace(-1.0, 1.0, _REF_FINE_MULTIPLIERS))
    return np.unique(np.concatenate([[0.0], coarse, fine]))


def _reference_option_arrays(segment):
    names = [name for name in OPTIONS if name in segment]
    return (
        np.array([OPTIONS.index(name) for name in names], dtype=np.int8),
        np.array([segment[name].retained_bytes for name in names], dtype=np.int64),
        np.array([segment[name].temp_bytes for name in names], dtype=np.int64),
        np.array([segment[name].ms for name in names], dtype=np.float64),
    )


def _reference_nondominated(r, q, c):
    levels, level = np.unique(q, return_inverse=True)
    order = np.lexsort((c, r, level))
    level, r, c = level[order], r[order], c[order]
    bounds = np.searchsorted(level, np.arange(levels.shape[0] + 1))
    keep = np.empty(r.shape[0], dtype=bool)
    stair_r = np.empty(0, dtype=np.int64)
    stair_c = np.empty(0, dtype=np.float64)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        level_r, level_c = r[lo:hi], c[lo:hi]
        ok = np.ones(hi - lo, dtype=bool)
        ok[1:] = level_c[1:] < np.minimum.accumulate(level_c)[:-1]
        if stair_r.shape[0]:
            at = np.searchsorted(stair_r, level_r, side="right") - 1
            ok &= ~((at >= 0) & (stair_c[np.maximum(at, 0)] <= level_c))
        keep[lo:hi] = ok
        if ok.any():
            merged_r = np.concatenate([stair_r, level_r[ok]])
            merged_c = np.concatenate([stair_c, level_c[ok]])
            by = np.lexsort((merged_c, merged_r))
            merged_r, merged_c = merged_r[by], merged_c[by]
            front = np.ones(by.shape[0], dtype=bool)
            front[1:] = merged_c[1:] < np.minimum.accumulate(merged_c)[:-1]
            stair_r, stair_c = merged_r[front], merged_c[front]
    return order[keep]


def _reference_thin(r, q, cap):
    along = np.argsort(r + q, kind="stable")
    picks = np.unique(np.linspace(0, along.shape[0] - 1, cap).round().astype(np.int64))
    return along[picks]


def _reference_pareto_frontier(
    persistent_bytes: int,
    table: Sequence[Mapping[str, OptionCost]],
    cap: int | None = None,
    *,
    budget_bytes: int | None = None,
    upper_ms: float | None = None,
) -> Frontier:
    bounds = None if budget_bytes is None else _ReferenceBounds(persistent_bytes, table, budget_bytes, upper_ms)
    r = np.zeros(1, dtype=np.int64)
    q = np.zeros(1, dtype=np.int64)
    c = np.zeros(1, dtype=np.float64)
    parents, choices = [], []
    truncated = False
    largest = 1
    for segment in table:
        names, seg_r, seg_q, seg_c = _reference_option_arrays(segment)
        n = r.shape[0]
        cand_r = (r[None, :] + seg_r[:, None]).ravel()
        cand_q = np.maximum(q[None, :], seg_q[:, None]).ravel()
        cand_c = (c[None, :] + seg_c[:, None]).ravel()
        if bounds is not None:
            bounds.advance()
            live = np.flatnonzero(bounds.alive(cand_r, cand_q, cand_c))
        else:
            live = np.arange(cand_r.shape[0])
        if live.shape[0] > 1:
            live = live[_reference_nondominated(cand_r[live], cand_q[live], cand_c[live])]
        largest = max(largest, live.shape[0])
        if cap is not None and live.shape[0] > cap:
            if bounds is None:
                live = live[_reference_thin(cand_r[live], cand_q[live], int(cap))]
            else:
                bound = bounds.lower_ms(cand_r[live], cand_q[live], cand_c[live])
                live = live[np.argsort(bound, kind="stable")[: int(cap)]]
            truncated = True
        parents.append(live % n)
        choices.append(names[live // n])
        r, q, c = cand_r[live], cand_q[live], cand_c[live]
    return Frontier(
        persistent_bytes=int(persistent_bytes),
        retained=r,
        max_temp=q,
        ms=c,
        truncated=truncated,
        largest=largest,
        _parents=tuple(parents),
        _choices=tuple(choices),
    )


# --- the comparison ---


def _assert_identical(got: Frontier, want: Frontier) -> None:
    assert (got.persistent_bytes, got.truncated, got.largest) == (want.persistent_bytes, want.truncated, want.largest)
    for a, b in ((got.retained, want.retained), (got.max_temp, want.max_temp), (got.ms, want.ms)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)  # float ms too: the same sums in the same order
    assert len(got._parents) == len(want._parents)
    for a, b in zip(got._parents + got._choices, want._parents + want._choices, strict=True):
        np.testing.assert_array_equal(a, b)


def _check_every_mode(card, budget: int) -> None:
    """Identical frontiers without a budget, with one, with an incumbent, and capped."""
    args = (card.persistent_bytes, card.segments)
    _assert_identical(pareto_frontier(*args), _reference_pareto_frontier(*args))
    _assert_identical(pareto_frontier(*args, 3), _reference_pareto_frontier(*args, 3))
    fitting = _reference_pareto_frontier(*args, budget_bytes=budget)
    _assert_identical(pareto_frontier(*args, budget_bytes=budget), fitting)
    capped = _reference_pareto_frontier(*args, 4, budget_bytes=budget)
    _assert_identical(pareto_frontier(*args, 4, budget_bytes=budget), capped)
    best = fitting.best(budget)
    if best is None:
        return
    # The incumbent as plan() finds it, and the optimum itself: the tightest cost bound,
    # where the most prefixes sit at the limit.
    for incumbent in {float(fitting.ms[best]), float(fitting.ms.max())}:
        _assert_identical(
            pareto_frontier(*args, budget_bytes=budget, upper_ms=incumbent),
            _reference_pareto_frontier(*args, budget_bytes=budget, upper_ms=incumbent),
        )


def _budget_between(card, fraction: float) -> int:
    least = min_peak_bytes(card.persistent_bytes, card.segments)
    most = card.persistent_bytes + sum(max(o.retained_bytes for o in s.values()) for s in card.segments)
    most += max(o.temp_bytes for s in card.segments for o in s.values())
    return int(least + fraction * (most - least))


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    kind=st.sampled_from(["tradeoff", "uniform", "blocks"]),
    missing=st.sampled_from([0.0, 0.3]),
    max_bytes=st.sampled_from([8, 64, 1 << 30]),
    fraction=st.floats(-0.05, 1.0),
)
def test_hypothesis_frontier_is_identical_to_the_reference_on_random_cards(seed, n, kind, missing, max_bytes, fraction):
    # Small max_bytes forces ties in r and q (many q levels, duplicates); missing options
    # make segments of one or two options; fractions below 0 give infeasible budgets.
    card = random_card(np.random.default_rng(seed), n, kind=kind, missing=missing, max_bytes=max_bytes)
    _check_every_mode(card, max(_budget_between(card, fraction), 0))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 50),
    st.lists(
        st.dictionaries(
            st.sampled_from(["eager", "whole", "region"]),
            st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12)),
            min_size=1,
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 200),
)
def test_hypothesis_frontier_is_identical_to_the_reference_on_tied_integer_cards(persistent, segments, budget):
    # Integer-valued times: exact ties in cost too, so the cost bound meets the incumbent
    # exactly and duplicates must keep the same representative.
    card = card_from_dict(
        {
            "persistent_bytes": persistent,
            "segments": [
                {o: {"retained_bytes": r, "temp_bytes": q, "ms": c} for o, (r, q, c) in s.items()} for s in segments
            ],
        }
    )
    _check_every_mode(card, budget)


@pytest.mark.parametrize("kind", ["tradeoff", "blocks"])
def test_plans_are_identical_to_the_reference_at_256_segments(kind, monkeypatch):
    # plan() end to end (incumbent pass, exact pass, policy, digest) on the bench's card
    # families at a size where the frontier holds hundreds of prefixes.
    rng = np.random.default_rng(256 + len(kind))
    cards = [random_card(rng, 256, kind=kind) for _ in range(2)]
    budgets = [_budget_between(card, fraction) for card, fraction in zip(cards, (0.3, 0.6), strict=True)]
    ours = [plan(card, budget, "joint") for card, budget in zip(cards, budgets, strict=True)]
    monkeypatch.setattr(planners_module, "pareto_frontier", _reference_pareto_frontier)
    theirs = [plan(card, budget, "joint") for card, budget in zip(cards, budgets, strict=True)]
    for a, b in zip(ours, theirs, strict=True):
        assert a.feasible and len(set(a.policy)) > 1  # a real mix, not a trivial plan
        assert [getattr(a, f.name) for f in fields(a) if f.compare] == [
            getattr(b, f.name) for f in fields(b) if f.compare
        ]
        np.testing.assert_array_equal(a.frontier, b.frontier)
        assert a.digest == b.digest
