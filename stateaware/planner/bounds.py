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
    best of a few ``λ``: zero and quantiles of the card's own time-per-byte exchange rates
    between options. A prefix is dropped only when ``C + bound`` exceeds the incumbent's
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
        self.grid = np.unique(np.array([0] + [o.temp_bytes for s in options for o in s], dtype=np.int64))
        n, width = len(options), self.grid.shape[0]
        # Per segment, per threshold: least r with q <= T (or _NONE when there is none).
        least = np.full((n, width), _NONE, dtype=np.int64)
        for i, segment in enumerate(options):
            for option in segment:
                allowed = self.grid >= option.temp_bytes
                least[i, allowed] = np.minimum(least[i, allowed], option.retained_bytes)
        self._least = least
        undefined = least == _NONE
        self._rs = np.where(undefined, 0, least).sum(axis=0)  # over the remaining segments
        self._missing = undefined.sum(axis=0)
        self._step = 0
        self.multipliers = _multipliers(options)
        per_segment = np.array(
            [[min(o.ms + lam * o.retained_bytes for o in segment) for lam in self.multipliers] for segment in options]
        )
        # _lagrangian[i] = sum over segments i..n-1 (one column per multiplier); [n] = 0.
        self._lagrangian = np.vstack([np.cumsum(per_segment[::-1], axis=0)[::-1], np.zeros(len(self.multipliers))])

    def advance(self) -> None:
        """Move past one more segment: it leaves the remaining suffix."""
        least = self._least[self._step]
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


def _multipliers(options: list[list[OptionCost]]) -> np.ndarray:
    rates = []
    for segment in options:
        for a in segment:
            for b in segment:
                if a.retained_bytes < b.retained_bytes and a.ms > b.ms:
                    rates.append((a.ms - b.ms) / (b.retained_bytes - a.retained_bytes))
    if not rates:
        return np.zeros(1)
    quantiles = np.quantile(np.array(rates), np.linspace(0.0, 1.0, _MULTIPLIERS))
    return np.unique(np.concatenate([[0.0], quantiles]))
