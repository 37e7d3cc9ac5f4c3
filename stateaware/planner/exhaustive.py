"""Exhaustive enumeration of every policy: the reference the dynamic program is held to.

All ``Π_i k_i`` policies (``k_i`` options in segment ``i``) are costed at once with NumPy:
policy ``p`` is a mixed-radix number whose digit ``i`` picks segment ``i``'s option, so
each segment adds one gathered column to the retained sum, the temporary maximum and the
time. 2^16 or 3^10 policies take milliseconds; the count is capped at
``MAX_POLICIES`` because memory grows with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .profile_card import OPTIONS, OptionCost

__all__ = ["MAX_POLICIES", "Enumeration", "enumerate_policies"]

#: The most policies enumerated in one call: 3^14 ≈ 4.8 M policies need ~150 MiB of
#: arrays, the most a test or a laptop check should allocate for a reference answer.
MAX_POLICIES = 3**14


@dataclass(frozen=True)
class Enumeration:
    """Every policy's predicted peak and time; ``digits[p, i]`` indexes ``OPTIONS``."""

    peak_bytes: np.ndarray = field(repr=False)  # int64, one per policy
    ms: np.ndarray = field(repr=False)  # float64, one per policy
    digits: np.ndarray = field(repr=False)  # int8, (policies, segments), indices into OPTIONS

    @property
    def count(self) -> int:
        return int(self.peak_bytes.shape[0])

    def policy(self, index: int) -> tuple[str, ...]:
        return tuple(OPTIONS[int(d)] for d in self.digits[index])

    def best(self, budget_bytes: int) -> int | None:
        """The least-time policy with peak <= budget (ties: lower peak, then first); or None."""
        fits = np.flatnonzero(self.peak_bytes <= budget_bytes)
        if fits.size == 0:
            return None
        order = np.lexsort((self.peak_bytes[fits], self.ms[fits]))
        return int(fits[order[0]])

    def optimum_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """``(peaks, ms)``: at budget ``peaks[j]`` (the distinct peaks, ascending) the least
        time is ``ms[j]``; it holds until the next peak. One sort answers every budget."""
        order = np.argsort(self.peak_bytes, kind="stable")
        peaks = self.peak_bytes[order]
        best = np.minimum.accumulate(self.ms[order])
        last = np.r_[peaks[1:] != peaks[:-1], True]
        return peaks[last], best[last]


def enumerate_policies(persistent_bytes: int, table: Sequence[Mapping[str, OptionCost]]) -> Enumeration:
    """Cost every policy over ``table`` (per segment: option name -> costs).

    ``ValueError`` if a segment has no option or there are more than ``MAX_POLICIES``.
    """
    names = [[name for name in OPTIONS if name in segment] for segment in table]
    for position, options in enumerate(names):
        if not options:
            raise ValueError(f"segment {position} has no option to enumerate")
    count = int(np.prod([len(options) for options in names], dtype=object))
    if count > MAX_POLICIES:
        raise ValueError(
            f"{count} policies exceed MAX_POLICIES = {MAX_POLICIES}; enumerate a smaller card "
            "and use the dynamic program (pareto_frontier) for large ones"
        )
    index = np.arange(count, dtype=np.int64)
    retained = np.full(count, persistent_bytes, dtype=np.int64)
    temp = np.zeros(count, dtype=np.int64)
    ms = np.zeros(count, dtype=np.float64)
    digits = np.empty((count, len(table)), dtype=np.int8)
    for i, (segment, options) in enumerate(zip(table, names, strict=True)):
        index, digit = np.divmod(index, len(options))
        retained += np.array([segment[o].retained_bytes for o in options], dtype=np.int64)[digit]
        np.maximum(temp, np.array([segment[o].temp_bytes for o in options], dtype=np.int64)[digit], out=temp)
        ms += np.array([segment[o].ms for o in options], dtype=np.float64)[digit]
        digits[:, i] = np.array([OPTIONS.index(o) for o in options], dtype=np.int8)[digit]
    return Enumeration(peak_bytes=retained + temp, ms=ms, digits=digits)
