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
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .card import OptionCost

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
        # (segments, 3) arrays; a missing option has q = _NONE, so no threshold admits it.
        self._q = np.array([[o.temp_bytes for o in s] + [_NONE] * (3 - len(s)) for s in options], dtype=np.int64)
        self._r = np.array([[o.retained_bytes for o in s] + [0] * (3 - len(s)) for s in options], dtype=np.int64)
        ms = np.array([[o.ms for o in s] + [np.inf] * (3 - len(s)) for s in options], dtype=np.float64)
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
        self._step = 0
        self.multipliers = _multipliers(options, self.room)
        per_segment = (ms[:, :, None] + self._r[:, :, None].astype(np.float64) * self.multipliers[None, None, :]).min(axis=1)
        # _lagrangian[i] = sum over segments i..n-1 (one column per multiplier); [n] = 0.
        self._lagrangian = np.vstack([np.cumsum(per_segment[::-1], axis=0)[::-1], np.zeros(len(self.multipliers))])

    def advance(self) -> None:
        """Move past one more segment: it leaves the remaining suffix."""
        q, r = self._q[self._step], self._r[self._step]
        least = np.where(self.grid[None, :] >= q[:, None], r[:, None], _NONE).min(axis=0)
        undefined = least == _NONE
        self._rs = self._rs - np.where(undefined, 0, least)
        self._missing = self._missing - undefined
        self._step += 1

    def lower_ms(self, r: np.ndarray, q: np.ndarray, c: np.ndarray) -> np.ndarray:
        """A lower bound on the time of any fitting completion of each prefix (NOTE [ Cost bound ])."""
        slack = (self.room - r - q).astype(np.float64)
        bound = (self._lagrangian[self._step][None, :] - slack[:, None] * self.multipliers[None, :]).max(axis=1)
        return c + bound

    def alive(self, r: np.ndarray, q: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Mask of prefixes (over the segments passed so far) that may still be optimal."""
        completed = np.where(self._missing == 0, self.grid + self._rs, _NONE)
        # Least completed peak for a prefix whose max temporary is grid[g]: min over T >= grid[g].
        least_tail = np.minimum.accumulate(completed[::-1])[::-1]
        at = np.searchsorted(self.grid, q)
        alive = least_tail[at] <= self.room - r  # no overflow: room - r never underflows int64
        if self.upper_ms is not None:
            alive &= self.lower_ms(r, q, c) <= self.upper_ms + _COST_SLACK * abs(self.upper_ms)
        return alive


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
    r = np.array([[o.retained_bytes for o in s] + [np.inf] * (3 - len(s)) for s in options], dtype=np.float64)
    c = np.array([[o.ms for o in s] + [np.inf] * (3 - len(s)) for s in options], dtype=np.float64)
    least_q = max(min(o.temp_bytes for o in s) for s in options)
    root = (c[:, :, None] + r[:, :, None] * probe).min(axis=1).sum(axis=0) - probe * (room - least_q)
    best = probe[int(np.argmax(root))]
    fine = best * np.exp2(np.linspace(-1.0, 1.0, _FINE_MULTIPLIERS))
    return np.unique(np.concatenate([[0.0], coarse, fine]))
