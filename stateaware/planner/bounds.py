"""Exact pruning bounds for the dynamic program at a known budget.

A partial policy ``(R, Q, C)`` over the first ``i`` segments can be dropped without losing
an optimum when no completion of it fits the budget, or when every completion that fits
costs more than a policy already in hand. Both tests below are *lower bounds* on what the
remaining segments ``i..n-1`` must add, so they only ever drop prefixes that cannot lead
to an optimal policy: pruning with them is not truncation (see frontier.py, NOTE
[ Rules ]), and both are monotone in ``(R, Q, C)``, so they never drop a dominator while
keeping a point it dominates.

NOTE [ Feasibility bound ]
    For a threshold ``T``, ``Rs_i(T)`` is the least retained sum of the remaining segments
    using only options with ``q <= T`` (undefined if some segment has none). A completion
    of a prefix with max temporary ``Q`` ends at max temporary ``T >= Q`` and retains at
    least ``Rs_i(T)``, so the least completed peak is exactly
    ``P + R + min_{T >= Q} (T + Rs_i(T))`` over the card's ``q`` values. This is exact,
    not merely a bound: a prefix is dropped iff no completion fits.

NOTE [ Cost bound ]
    Any completion that fits has ``Σ r_j <= B = M - P - R - Q``. For ``λ >= 0``,
    ``Σ c_j >= Σ (c_j + λ r_j) - λ B >= L_i(λ) - λ B`` with
    ``L_i(λ) = Σ_j min_o (c_jo + λ r_jo)`` (a Lagrangian relaxation). The bound takes the
    best of a set of ``λ``: zero, quantiles of the card's own time-per-byte exchange rates
    between options, and a fine grid around the multiplier that is best at the root (see
    ``_multipliers``). The bound's tightness near the optimum decides how many prefixes
    survive: on 1,024-segment random cards, 16 multipliers left ~5,600 prefixes at the
    widest step and 48 left ~1,500 (bench/bench_planner.py measures the current figure).
    A prefix is dropped only when ``C + bound`` exceeds the incumbent's
    time by more than ``_COST_SLACK`` (relative), which absorbs float summation order.

NOTE [ The envelope ]
    At one step the bound is ``max_j (L_j - λ_j s)`` of the prefix's slack ``s``: the
    upper envelope of a few dozen lines, convex in ``s``, on which usually a dozen lines
    ever attain the maximum. ``alive`` builds that envelope once per step and evaluates,
    for each prefix, only the line that is largest at its slack (one search instead of
    one product per multiplier: the multipliers had been most of a 1,024-segment plan's
    time). The result must be the decision ``lower_ms`` gives, bit for bit, because the
    surviving set decides the frontier, its size and which of equal policies is kept. The
    envelope's line is evaluated with ``lower_ms``'s own float expression, so the two
    differ only where rounding makes another line's value larger than the exact maximum's
    — by a few ulps of the largest term, ``|L_j| + |λ_j s|``. Every prefix whose value lies
    within ``_RECHECK`` of that scale from the limit is therefore re-evaluated with every
    multiplier; outside that band both evaluations fall on the same side of the limit.

    ``advance`` likewise subtracts the leaving segment's least-``r`` step function as at
    most three slice updates (its events) instead of rebuilding it across the grid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .profile_card import OPTIONS, OptionCost

__all__: list[str] = []  # private helpers of frontier.py

#: Relative slack on the cost bound: sums taken in different orders differ by a few ulps
#: per term; 1e-9 of the incumbent is far above that for any card with < 10^6 segments
#: and far below any difference a planner should care about.
_COST_SLACK = 1e-9

#: Number of exchange-rate quantiles tried as Lagrange multipliers (plus zero). More
#: multipliers tighten the bound slightly and cost one column each per state.
_MULTIPLIERS = 16

#: Rate quantiles probed to find the root's best multiplier, and multipliers placed
#: around it (a factor of two either side): the bound's tightness near the optimum
#: decides how many prefixes survive, so most columns go there.
_ROOT_PROBES = 256
#: 48: past it the surviving prefixes barely shrink (1,494 at 48, 1,301 at 128 on one
#: 1,024-segment card) while each column costs time on every prefix.
_FINE_MULTIPLIERS = 48

_NONE = np.iinfo(np.int64).max

#: Relative band around the cost limit inside which ``alive`` re-evaluates a prefix with
#: every multiplier (NOTE [ The envelope ]). The envelope's value differs from the exact
#: float maximum by a few ulps of the terms' magnitude (~1e-16); 1e-9 leaves seven orders
#: of magnitude of margin and still rechecks almost nothing.
_RECHECK = 1e-9


class Bounds:
    """Precomputed suffix quantities for one table at one budget (see the NOTEs)."""

    def __init__(
        self,
        persistent_bytes: int,
        table: Sequence[Mapping[str, OptionCost]],
        budget_bytes: int,
        upper_ms: float | None,
    ) -> None:
        self.room = int(budget_bytes) - int(persistent_bytes)
        self.upper_ms = upper_ms
        options = [list(segment.values()) for segment in table]
        # (segments, len(OPTIONS)) arrays; a missing option has q = _NONE, so no threshold admits it.
        self._q = np.array(
            [[o.temp_bytes for o in s] + [_NONE] * (len(OPTIONS) - len(s)) for s in options], dtype=np.int64
        )
        self._r = np.array(
            [[o.retained_bytes for o in s] + [0] * (len(OPTIONS) - len(s)) for s in options], dtype=np.int64
        )
        ms = np.array([[o.ms for o in s] + [np.inf] * (len(OPTIONS) - len(s)) for s in options], dtype=np.float64)
        self.grid = np.unique(np.concatenate([[0], self._q[self._q != _NONE]]))
        # Suffix totals over the remaining segments, per threshold T = grid[g]: the least
        # retained sum with q <= T, and how many segments have no option with q <= T.
        # Each segment's least r is a step function of T; sum the steps as events.
        at = np.searchsorted(self.grid, self._q)  # where each option becomes allowed
        order = np.argsort(self._q, axis=1, kind="stable")
        ordered_at = np.take_along_axis(at, order, axis=1)
        ordered_r = np.take_along_axis(self._r, order, axis=1)
        running = np.minimum.accumulate(np.where(ordered_at < self.grid.shape[0], ordered_r, _NONE), axis=1)
        # Step k of a segment: its least r drops as its k-th option (by q) becomes allowed.
        steps = np.diff(np.concatenate([np.zeros((len(options), 1), np.int64), running], axis=1), axis=1)
        valid = ordered_at < self.grid.shape[0]  # missing options are never allowed
        self._rs = _event_sum(ordered_at[valid], steps[valid], self.grid.shape[0])
        self._missing = len(options) - np.cumsum(np.bincount(ordered_at[:, 0], minlength=self.grid.shape[0] + 1))[:-1]
        # Per segment, the (grid position, change in least r) events advance() subtracts.
        self._events = [
            (at_i[ok].tolist(), step_i[ok].tolist()) for at_i, step_i, ok in zip(ordered_at, steps, valid, strict=True)
        ]
        self._step = 0
        self.multipliers = _multipliers(options, self.room)
        self._descending = np.argsort(-self.multipliers, kind="stable")
        self._descending_slopes = self.multipliers[self._descending].tolist()
        per_segment = (ms[:, :, None] + self._r[:, :, None].astype(np.float64) * self.multipliers[None, None, :]).min(
            axis=1
        )
        # _lagrangian[i] = sum over segments i..n-1 (one column per multiplier); [n] = 0.
        self._lagrangian = np.vstack([np.cumsum(per_segment[::-1], axis=0)[::-1], np.zeros(len(self.multipliers))])

    def advance(self) -> None:
        """Move past one more segment: it leaves the remaining suffix."""
        # Subtract the segment's least-r step function, event by event (exact int64): it is
        # undefined (counts as missing) below its first event, the running least r above.
        starts, deltas = self._events[self._step]
        self._missing[: starts[0]] -= 1
        for start, delta in zip(starts, deltas, strict=True):
            self._rs[start:] -= delta
        self._step += 1

    def lower_ms(self, r: np.ndarray, q: np.ndarray, c: np.ndarray) -> np.ndarray:
        """A lower bound on the time of any fitting completion of each prefix (NOTE [ Cost bound ]).

        The reference evaluation, every multiplier for every prefix; ``alive`` decides
        with the envelope instead (NOTE [ The envelope ]) and falls back to this.
        """
        slack = (self.room - r - q).astype(np.float64)
        bound = (self._lagrangian[self._step][None, :] - slack[:, None] * self.multipliers[None, :]).max(axis=1)
        return c + bound

    def positions(self, q: np.ndarray) -> np.ndarray:
        """Where each temporary-bytes value ``q`` (one of the card's, or 0) sits in ``grid``."""
        return np.searchsorted(self.grid, q)

    def alive(self, r: np.ndarray, q: np.ndarray, c: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Mask of prefixes (over the segments passed so far) that may still be optimal.

        ``at`` is ``positions(q)``, which the caller can carry along more cheaply.
        """
        completed = np.where(self._missing == 0, self.grid + self._rs, _NONE)
        # Least completed peak for a prefix whose max temporary is grid[g]: min over T >= grid[g].
        least_tail = np.minimum.accumulate(completed[::-1])[::-1]
        alive = least_tail[at] <= self.room - r  # no overflow: room - r never underflows int64
        if self.upper_ms is not None:
            # The cost bound only for prefixes that can still fit: the mask is the same.
            fits = np.flatnonzero(alive)
            if fits.shape[0]:
                alive[fits] = self._cheap_enough(r[fits], q[fits], c[fits])
        return alive

    def _cheap_enough(self, r: np.ndarray, q: np.ndarray, c: np.ndarray) -> np.ndarray:
        """``lower_ms(r, q, c) <= upper_ms (+ slack)``, exactly, via NOTE [ The envelope ]."""
        limit = self.upper_ms + _COST_SLACK * abs(self.upper_ms)
        lagrangian = self._lagrangian[self._step]
        lines, breaks = _upper_envelope(lagrangian, self._descending, self._descending_slopes)
        slack = (self.room - r - q).astype(np.float64)
        line = lines[np.searchsorted(breaks, slack)]
        # The same float expression lower_ms evaluates, for the line that is largest in
        # exact arithmetic; it differs from lower_ms's float maximum only by rounding.
        lower = c + (lagrangian[line] - slack * self.multipliers[line])
        cheap = lower <= limit
        # One scale for all prefixes (the largest term any line adds): a wider band than
        # each prefix needs, which only rechecks more.
        scale = np.abs(lagrangian).max() + np.abs(slack).max() * self.multipliers.max() + np.abs(c).max() + abs(limit)
        near = np.flatnonzero(np.abs(lower - limit) <= _RECHECK * scale)
        if near.shape[0]:
            cheap[near] = self.lower_ms(r[near], q[near], c[near]) <= limit
        return cheap


def _upper_envelope(intercepts: np.ndarray, order: np.ndarray, m: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """The lines of ``s -> max_j (intercepts[j] - slopes[j] * s)`` that attain the maximum
    somewhere, and where each hands over to the next.

    ``order`` sorts the slopes descending (steepest descent first: it wins at the least
    slack) and ``m`` lists them in that order; they must be distinct (the multipliers are
    ``np.unique``'s output). Returns ``(lines, breaks)``: for slack ``s``, the maximising
    line is ``lines[searchsorted(breaks, s)]``; ``breaks`` is ascending, one shorter than
    ``lines``. The convex-hull trick, in Python floats: at most a few dozen lines.
    """
    a = intercepts[order].tolist()
    hull: list[int] = []
    breaks: list[float] = []
    for j in range(len(a)):
        while hull:
            top = hull[-1]
            # Line j (less steep) overtakes the top line from slack x on.
            x = (a[top] - a[j]) / (m[top] - m[j])
            if breaks and x <= breaks[-1]:
                hull.pop()  # j overtakes it before it overtook its predecessor: never on top
                breaks.pop()
                continue
            breaks.append(x)
            break
        hull.append(j)
    return order[np.array(hull, dtype=np.int64)], np.array(breaks, dtype=np.float64)


def _event_sum(positions: np.ndarray, deltas: np.ndarray, width: int) -> np.ndarray:
    """``out[g] = Σ deltas[k] for positions[k] <= g`` (exact int64)."""
    out = np.zeros(width + 1, dtype=np.int64)
    np.add.at(out, positions, deltas)
    return np.cumsum(out)[:-1]


def _multipliers(options: list[list[OptionCost]], room: int) -> np.ndarray:
    """Zero, quantiles of the card's exchange rates, and a fine grid around the root's best.

    The root's best multiplier maximises ``L_0(λ) - λ (room - least q)``, a concave
    function of ``λ`` whose breakpoints are the exchange rates; every prefix's own best
    multiplier lies near it, so a fine grid there tightens the bound where it matters.
    """
    rates = []
    for segment in options:
        for a in segment:
            for b in segment:
                if a.retained_bytes < b.retained_bytes and a.ms > b.ms:
                    rates.append((a.ms - b.ms) / (b.retained_bytes - a.retained_bytes))
    if not rates:
        return np.zeros(1)
    rates = np.array(rates)
    coarse = np.quantile(rates, np.linspace(0.0, 1.0, _MULTIPLIERS))
    # The root bound on a grid of rate quantiles, then a fine grid around its maximum.
    probe = np.unique(np.quantile(rates, np.linspace(0.0, 1.0, _ROOT_PROBES)))
    r = np.array(
        [[o.retained_bytes for o in s] + [np.inf] * (len(OPTIONS) - len(s)) for s in options], dtype=np.float64
    )
    c = np.array([[o.ms for o in s] + [np.inf] * (len(OPTIONS) - len(s)) for s in options], dtype=np.float64)
    least_q = max(min(o.temp_bytes for o in s) for s in options)
    root = (c[:, :, None] + r[:, :, None] * probe).min(axis=1).sum(axis=0) - probe * (room - least_q)
    best = probe[int(np.argmax(root))]
    fine = best * np.exp2(np.linspace(-1.0, 1.0, _FINE_MULTIPLIERS))
    return np.unique(np.concatenate([[0.0], coarse, fine]))
