"""The budget bounds' fast paths against their definitions (bounds.py NOTEs)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from stateaware.planner.bounds import Bounds, _upper_envelope
from stateaware.planner.synthetic import random_card


def test_upper_envelope_picks_a_maximising_line_at_every_slack():
    rng = np.random.default_rng(5)
    for _ in range(200):
        count = int(rng.integers(1, 40))
        slopes = np.unique(np.concatenate([[0.0], rng.exponential(rng.choice([1e-9, 1.0, 1e3]), count)]))
        intercepts = rng.normal(0.0, 1e4, slopes.shape[0])
        order = np.argsort(-slopes, kind="stable")
        lines, breaks = _upper_envelope(intercepts, order, slopes[order].tolist())
        assert (np.diff(breaks) > 0).all() and breaks.shape[0] == lines.shape[0] - 1
        slack = np.concatenate([rng.uniform(-1e6, 1e6, 200), breaks, [0.0]])
        values = intercepts[None, :] - slack[:, None] * slopes[None, :]
        picked = values[np.arange(slack.shape[0]), lines[np.searchsorted(breaks, slack)]]
        np.testing.assert_allclose(picked, values.max(axis=1), rtol=1e-12, atol=1e-12 * np.abs(values).max())
        # No line is kept needlessly: each is a maximum (exactly, in rationals) mid-way
        # between its breaks, or beyond the last break at either end.
        edges = [float(breaks[0]) - 1.0 - abs(float(breaks[0]))] if breaks.shape[0] else [-1.0]
        edges += breaks.tolist()
        edges += [edges[-1] + 1.0 + abs(edges[-1])]
        exact = [(Fraction(float(a)), Fraction(float(m))) for a, m in zip(intercepts, slopes, strict=True)]
        for k, line in enumerate(lines.tolist()):
            mid = (Fraction(edges[k]) + Fraction(edges[k + 1])) / 2
            values = [a - mid * m for a, m in exact]
            assert values[line] == max(values)


def _suffix_by_definition(table, start, grid):
    """Least retained sum over segments start.. using options with q <= T, per T in grid;
    and how many of those segments have no such option."""
    rs, missing = np.zeros(grid.shape[0], dtype=np.int64), np.zeros(grid.shape[0], dtype=np.int64)
    for segment in table[start:]:
        for g, threshold in enumerate(grid):
            allowed = [o.retained_bytes for o in segment.values() if o.temp_bytes <= threshold]
            if allowed:
                rs[g] += min(allowed)
            else:
                missing[g] += 1
    return rs, missing


def _alive_by_definition(bounds, r, q, c):
    completed = np.where(bounds._missing == 0, bounds.grid + bounds._rs, np.iinfo(np.int64).max)
    least_tail = np.minimum.accumulate(completed[::-1])[::-1]
    fits = least_tail[np.searchsorted(bounds.grid, q)] <= bounds.room - r
    return fits & (bounds.lower_ms(r, q, c) <= bounds.upper_ms + 1e-9 * abs(bounds.upper_ms))


def test_advance_keeps_the_suffix_tables_and_alive_matches_its_definition():
    rng = np.random.default_rng(8)
    for trial in range(60):
        kind = ("tradeoff", "uniform")[trial % 2]
        card = random_card(
            rng, int(rng.integers(1, 9)), kind=kind, missing=0.3, max_bytes=int(rng.choice([8, 1 << 20]))
        )
        table = card.segments
        budget = card.persistent_bytes + sum(max(o.retained_bytes for o in s.values()) for s in table)
        budget = int(rng.uniform(0.3, 1.2) * budget)
        upper = float(rng.uniform(0.2, 1.0) * sum(max(o.ms for o in s.values()) for s in table))
        bounds = Bounds(card.persistent_bytes, table, budget, upper)
        for step in range(len(table) + 1):
            rs, missing = _suffix_by_definition(table, step, bounds.grid)
            np.testing.assert_array_equal(bounds._rs, rs)
            np.testing.assert_array_equal(bounds._missing, missing)
            # Random prefixes, then prefixes moved to within a few ulps of the cost limit:
            # the envelope's decision must equal lower_ms's everywhere, the rechecked band too.
            q = rng.choice(bounds.grid, 64)
            r = rng.integers(0, max(budget, 1), 64)
            c = rng.uniform(0.0, upper, 64)
            limit = upper + 1e-9 * abs(upper)
            near = c + (limit - bounds.lower_ms(r, q, c))
            near = near + rng.integers(-4, 5, 64) * np.spacing(np.abs(near) + 1.0)
            for prefix_c in (c, near):
                want = _alive_by_definition(bounds, r, q, prefix_c)
                np.testing.assert_array_equal(bounds.alive(r, q, prefix_c, bounds.positions(q)), want)
            if step < len(table):
                bounds.advance()


def test_alive_rechecks_where_the_envelope_and_the_float_maximum_round_apart():
    # Near a crossing, the line that is largest in exact arithmetic can round below its
    # neighbour; with the cost limit exactly at the envelope's value, only the recheck
    # gives lower_ms's answer (drop the prefix).
    card = random_card(np.random.default_rng(0), 1, kind="uniform", max_bytes=1)  # all bytes 0
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(3000):
        slopes = np.array([0.0, rng.uniform(1e-3, 2e-3), rng.uniform(3e-3, 4e-3)])
        crossing = float(rng.integers(10**8, 10**9))
        intercepts = np.array([rng.uniform(1e6, 2e6), 0.0, 0.0])
        intercepts[1] = intercepts[0] + slopes[1] * crossing
        intercepts[2] = intercepts[1] + (slopes[2] - slopes[1]) * crossing / 2
        order = np.argsort(-slopes, kind="stable")
        lines, breaks = _upper_envelope(intercepts, order, slopes[order].tolist())
        for slack in (crossing - 1.0, crossing, crossing + 1.0):
            line = lines[np.searchsorted(breaks, slack)]
            envelope = intercepts[line] - slack * slopes[line]
            if envelope == (intercepts - slack * slopes).max():
                continue
            # An incumbent whose limit (upper + 1e-9 upper) is exactly the envelope's value.
            upper = envelope / (1 + 1e-9)
            for _ in range(64):
                limit = upper + 1e-9 * abs(upper)
                if limit == envelope:
                    break
                upper = np.nextafter(upper, np.inf if limit < envelope else -np.inf)
            if limit != envelope:
                continue
            bounds = Bounds(card.persistent_bytes, card.segments, 10**12, float(upper))
            bounds._lagrangian = np.vstack([intercepts, np.zeros(3)])
            bounds.multipliers, bounds._descending, bounds._descending_slopes = slopes, order, slopes[order].tolist()
            r, q, c = np.array([bounds.room - int(slack)]), np.zeros(1, np.int64), np.zeros(1)
            assert bounds.lower_ms(r, q, c)[0] > limit
            assert not bounds.alive(r, q, c, bounds.positions(q))[0]
            checked += 1
    assert checked >= 10  # 16 such cases with this seed: the comparison is made, not skipped
