"""The Pareto dynamic program over (retained bytes, max temporary bytes, cost) — paper §4.

Eq. 3 charges a policy ``P + Σ r + max q`` bytes and ``Σ c`` milliseconds. Walking the
segments in order, a partial policy is summarised by the triple ``(R, Q, C) = (Σ r,
max q, Σ c)`` of its prefix, and only triples that no other prefix beats in all three
coordinates can start an optimal completion. The program keeps exactly those.

NOTE [ Why three coordinates, not two ]
    Dominance on ``R + Q`` alone is unsafe: ``Q`` is a maximum, so a later segment with a
    large ``q`` can raise both prefixes' ``Q`` to the same value, and the prefix that
    "lost" on ``R + Q`` by having a larger ``Q`` but smaller ``R`` then wins. Keeping
    ``R`` and ``Q`` apart makes the pruning exact (Rule 1 below).

NOTE [ Rules ]
    Rule 1 (exactness): a triple is dropped only if another kept triple is <= in all three
    coordinates (or it duplicates one). Every completion of the dropped prefix is then
    matched or beaten by the same completion of its dominator, so with no cap and no
    budget the final set contains an optimal policy for *every* budget. Rule 4 extends
    this to the budget bounds.
    Rule 2 (no rounding): bytes are int64 and compared exactly; nothing is bucketed.
    Times are float64 sums; two policies whose times differ only by summation rounding
    may both be kept, which costs a point, never an optimum.
    Rule 3 (truncation is recorded): with ``cap`` set, a step whose frontier exceeds the
    cap keeps ``cap`` triples and marks the result ``truncated``; the optimality claim is
    then dropped, the policies stay valid. Without a budget the kept triples are spread
    evenly along ``R + Q`` (both ends kept); with one, they are those with the least lower
    bound on completed time (bounds.py), a beam search toward the optimum.
    Rule 4 (bounds are not truncation): with a budget, a prefix is also dropped when no
    completion of it fits, or when every fitting completion provably takes longer than a
    policy already found (bounds.py). Neither can drop every optimum, so an untruncated
    run with bounds still returns an optimal policy for that budget; only the *set* it
    returns shrinks (to the policies that fit, or that may be optimal).

NOTE [ The dominance sweep ]
    Candidates are sorted by (Q level, R, C) and swept one Q level at a time. Inside a
    level, a candidate is beaten iff an earlier one (smaller R) is no costlier: a running
    minimum. Against lower levels, only their two-dimensional (R, C) staircase matters:
    the staircase point with the largest R' <= R has the least C' among all R' <= R, so one
    ``searchsorted`` per level answers every query. The level's survivors are then merged
    into the staircase. Work: one sort of the candidates plus, per level, a search of the
    level's candidates and a merge of the staircase (which is the 2-D front of everything
    swept so far, far smaller than the candidate set). Under a budget a step's surviving
    candidates mostly share one Q level (1 to 2 on average on the bench's 1,024-segment
    cards); then the running minimum alone is the answer, with no per-level loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .bounds import Bounds
from .profile_card import OPTIONS, OptionCost

__all__ = ["Frontier", "pareto_frontier", "step_pareto_policies", "min_peak_bytes", "tradeoff_curve"]

#: int64 headroom: any sum of bytes in a policy must stay below this.
_INT64_MAX = np.iinfo(np.int64).max

Table = Sequence[Mapping[str, OptionCost]]


@dataclass(frozen=True)
class Frontier:
    """The final Pareto set of a dynamic-program run, with back-pointers to its policies.

    ``retained``, ``max_temp`` and ``ms`` hold one triple per kept policy. ``peak_bytes``
    is ``persistent_bytes + retained + max_temp``. ``largest`` is the largest frontier any
    step held (after pruning, before any cap). ``truncated`` is true iff a cap bit at some
    step (NOTE [ Rules ], Rule 3).
    """

    persistent_bytes: int
    retained: np.ndarray = field(repr=False, compare=False)
    max_temp: np.ndarray = field(repr=False, compare=False)
    ms: np.ndarray = field(repr=False, compare=False)
    truncated: bool
    largest: int
    # Per segment: index of the parent triple in the previous step, and the option chosen.
    _parents: tuple[np.ndarray, ...] = field(repr=False, compare=False)
    _choices: tuple[np.ndarray, ...] = field(repr=False, compare=False)

    @property
    def size(self) -> int:
        return int(self.retained.shape[0])

    @property
    def peak_bytes(self) -> np.ndarray:
        peaks: np.ndarray = self.persistent_bytes + self.retained + self.max_temp
        return peaks

    def policy(self, index: int) -> tuple[str, ...]:
        """The per-segment options of the kept policy at ``index``."""
        out = []
        for parents, choices in zip(reversed(self._parents), reversed(self._choices), strict=True):
            out.append(OPTIONS[int(choices[index])])
            index = int(parents[index])
        return tuple(reversed(out))

    def best(self, budget_bytes: int) -> int | None:
        """Index of the least-time policy with peak <= budget (ties: lower peak); or None."""
        peak = self.peak_bytes
        fits = np.flatnonzero(peak <= budget_bytes)
        if fits.size == 0:
            return None
        order = np.lexsort((peak[fits], self.ms[fits]))
        return int(fits[order[0]])


def _option_arrays(segment: Mapping[str, OptionCost]) -> tuple[np.ndarray, ...]:
    names = [name for name in OPTIONS if name in segment]
    return (
        np.array([OPTIONS.index(name) for name in names], dtype=np.int8),
        np.array([segment[name].retained_bytes for name in names], dtype=np.int64),
        np.array([segment[name].temp_bytes for name in names], dtype=np.int64),
        np.array([segment[name].ms for name in names], dtype=np.float64),
    )


def _check_headroom(persistent_bytes: int, table: Table) -> None:
    # Python ints: the worst case must fit int64 before NumPy sums silently wrap.
    worst = persistent_bytes + sum(max(o.retained_bytes for o in s.values()) for s in table)
    worst += max(o.temp_bytes for s in table for o in s.values())
    if worst > _INT64_MAX:
        raise ValueError(
            f"card byte totals reach {worst}, beyond int64; the static model sums bytes exactly "
            "in 64-bit integers, so rescale the card (e.g. to KiB) before planning"
        )


def _nondominated(r: np.ndarray, q: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Indices of the triples no other triple weakly dominates (one of each duplicate).

    Ordered by (q, r, c, index); needs at least one triple. See NOTE [ The dominance sweep ].
    """
    order = np.lexsort((c, r, q))
    q, r, c = q[order], r[order], c[order]
    # Sorted by (r, c) inside a level: beaten iff an earlier point of the level is no costlier.
    keep = np.empty(r.shape[0], dtype=bool)
    keep[0] = True
    keep[1:] = c[1:] < np.minimum.accumulate(c)[:-1]
    starts = np.flatnonzero(q[1:] != q[:-1]) + 1
    if starts.shape[0] == 0:
        return order[keep]  # one level (the common case): the running minimum is the answer
    keep[starts] = True
    bounds = np.concatenate([[0], starts, [r.shape[0]]])
    stair_r = np.empty(0, dtype=np.int64)
    stair_c = np.empty(0, dtype=np.float64)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        level_r, level_c = r[lo:hi], c[lo:hi]
        ok = keep[lo:hi]
        if lo:  # the global running minimum above was this level's own only for the first
            ok[1:] = level_c[1:] < np.minimum.accumulate(level_c)[:-1]
            # Any lower level: the staircase point with the largest r' <= r has the least c'.
            at = np.searchsorted(stair_r, level_r, side="right") - 1
            ok &= ~((at >= 0) & (stair_c[np.maximum(at, 0)] <= level_c))
        if ok.any():
            merged_r = np.concatenate([stair_r, level_r[ok]])
            merged_c = np.concatenate([stair_c, level_c[ok]])
            by = np.lexsort((merged_c, merged_r))
            merged_r, merged_c = merged_r[by], merged_c[by]
            front = np.ones(by.shape[0], dtype=bool)
            front[1:] = merged_c[1:] < np.minimum.accumulate(merged_c)[:-1]
            stair_r, stair_c = merged_r[front], merged_c[front]
    return order[keep]


def _thin(r: np.ndarray, q: np.ndarray, cap: int) -> np.ndarray:
    """``cap`` indices spread evenly along r + q, both ends included (Rule 3)."""
    along = np.argsort(r + q, kind="stable")
    picks = np.unique(np.linspace(0, along.shape[0] - 1, cap).round().astype(np.int64))
    return along[picks]


def pareto_frontier(
    persistent_bytes: int,
    table: Table,
    cap: int | None = None,
    *,
    budget_bytes: int | None = None,
    upper_ms: float | None = None,
) -> Frontier:
    """Run the dynamic program over ``table`` (per segment: option name -> costs).

    With ``cap=None`` (the default) nothing is truncated (NOTE [ Rules ]):

    * with no budget, the result is the whole Pareto set — for *every* budget it holds a
      least-time policy (its size can grow fast with the number of segments);
    * with ``budget_bytes``, prefixes none of whose completions fit are dropped (exact,
      bounds.py NOTE [ Feasibility bound ]): the result is the Pareto set of the policies
      that fit, empty if none does;
    * with ``upper_ms`` as well (the time of a policy known to fit), prefixes whose every
      fitting completion must take longer are dropped too (NOTE [ Cost bound ]): the
      result then holds the policies that may be optimal at this budget, and an optimum.

    With a ``cap`` each step keeps at most ``cap`` triples and ``truncated`` says whether
    that ever removed one. Raises ``ValueError`` for an empty table, a segment with no
    option, a cap below 2, ``upper_ms`` without a budget, or byte totals that could
    overflow int64.
    """
    if cap is not None and (isinstance(cap, bool) or int(cap) != cap or cap < 2):
        raise ValueError(f"frontier_cap must be None (untruncated) or an integer >= 2, got {cap!r}")
    if len(table) == 0:
        raise ValueError("cannot plan an empty card: it has no segments")
    for index, segment in enumerate(table):
        if not segment:
            raise ValueError(f"segment {index} has no option in this planner's option set")
    if upper_ms is not None and budget_bytes is None:
        raise ValueError("upper_ms bounds cost at a budget; pass budget_bytes too")
    _check_headroom(persistent_bytes, table)
    bounds = None if budget_bytes is None else Bounds(persistent_bytes, table, budget_bytes, upper_ms)

    r = np.zeros(1, dtype=np.int64)
    q = np.zeros(1, dtype=np.int64)
    c = np.zeros(1, dtype=np.float64)
    # With bounds: each triple's position of q in bounds.grid, carried along so alive()
    # needs no search (grid holds 0 and every q, so max of positions = position of max).
    at = np.zeros(1, dtype=np.int64)
    parents: list[np.ndarray] = []
    choices: list[np.ndarray] = []
    truncated = False
    largest = 1
    for segment in table:
        names, seg_r, seg_q, seg_c = _option_arrays(segment)
        n = r.shape[0]
        cand_r = (r[None, :] + seg_r[:, None]).ravel()
        cand_q = np.maximum(q[None, :], seg_q[:, None]).ravel()
        cand_c = (c[None, :] + seg_c[:, None]).ravel()
        if bounds is not None:
            bounds.advance()
            cand_at = np.maximum(at[None, :], bounds.positions(seg_q)[:, None]).ravel()
            live = np.flatnonzero(bounds.alive(cand_r, cand_q, cand_c, cand_at))
        else:
            live = np.arange(cand_r.shape[0])
        if live.shape[0] > 1:
            live = live[_nondominated(cand_r[live], cand_q[live], cand_c[live])]
        largest = max(largest, live.shape[0])
        if cap is not None and live.shape[0] > cap:
            if bounds is None:
                live = live[_thin(cand_r[live], cand_q[live], int(cap))]
            else:
                # With a budget, keep the prefixes with the least lower bound on time: the
                # likeliest to lead to the optimum (a beam search on the cost bound).
                bound = bounds.lower_ms(cand_r[live], cand_q[live], cand_c[live])
                live = live[np.argsort(bound, kind="stable")[: int(cap)]]
            truncated = True
        parents.append(live % n)
        choices.append(names[live // n])
        r, q, c = cand_r[live], cand_q[live], cand_c[live]
        if bounds is not None:
            at = cand_at[live]
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


def step_pareto_policies(table: Table, cap: int | None = None) -> list[tuple[str, ...]]:
    """The policies over ``table`` no other beats in (Σ r, step peak, Σ c), one per triple.

    The *step peak* is ``max_i (Σ_{j≤i} r_j + q_i)``: a training step frees segment ``i``'s
    temporaries before any later segment retains anything, and runs its backward after
    every later segment's retention is freed, so the order of the options matters (a
    segment kept eager last costs its retention only once, at the end). Eq. 3's
    ``max q`` forgets the order: its Pareto set may drop the policy whose step peak is
    least (two policies with equal ``(Σ r, max q, Σ c)`` are one triple to it). A
    prediction that grows with ``Σ r`` and the step peak (``stateaware.auto.fit``'s) has
    its optimum at every budget among these policies. The program is the one of
    ``pareto_frontier`` with the step peak in place of ``max q`` (exact by the same Rule
    1: both coordinates only grow along a completion); ``cap`` thins each step to at most
    ``cap`` triples spread along ``Σ r +`` step peak, both ends kept.
    """
    if len(table) == 0 or any(not segment for segment in table):
        raise ValueError("every segment needs at least one option")
    r = np.zeros(1, dtype=np.int64)
    m = np.zeros(1, dtype=np.int64)
    c = np.zeros(1, dtype=np.float64)
    parents: list[np.ndarray] = []
    choices: list[np.ndarray] = []
    for segment in table:
        names, seg_r, seg_q, seg_c = _option_arrays(segment)
        n = r.shape[0]
        cand_r = (r[None, :] + seg_r[:, None]).ravel()
        cand_m = np.maximum(m[None, :], r[None, :] + seg_r[:, None] + seg_q[:, None]).ravel()
        cand_c = (c[None, :] + seg_c[:, None]).ravel()
        live = _nondominated(cand_r, cand_m, cand_c)
        if cap is not None and live.shape[0] > cap:
            live = live[_thin(cand_r[live], cand_m[live], int(cap))]
        parents.append(live % n)
        choices.append(names[live // n])
        r, m, c = cand_r[live], cand_m[live], cand_c[live]
    policies = []
    for index in range(r.shape[0]):
        out = []
        for parent, choice in zip(reversed(parents), reversed(choices), strict=True):
            out.append(OPTIONS[int(choice[index])])
            index = int(parent[index])
        policies.append(tuple(reversed(out)))
    return policies


def min_peak_bytes(persistent_bytes: int, table: Table) -> int | None:
    """The least ``P + Σ r + max q`` any policy over ``table`` reaches, exactly; None if none.

    Independent of the dynamic program (and of any cap): for each threshold ``T`` among
    the options' ``q`` values, the least retained sum using only options with ``q <= T``
    is a sum of per-segment step functions of ``T``; the answer is the least ``T`` plus
    that sum. Returns None when some segment has no option at all.
    """
    if any(not segment for segment in table) or len(table) == 0:
        return None
    _check_headroom(persistent_bytes, table)
    thresholds, deltas = [], []
    for segment in table:
        running = None
        for option in sorted(segment.values(), key=lambda o: (o.temp_bytes, o.retained_bytes)):
            if running is None:
                thresholds.append(option.temp_bytes)
                deltas.append(option.retained_bytes)
                running = option.retained_bytes
            elif option.retained_bytes < running:
                thresholds.append(option.temp_bytes)
                deltas.append(option.retained_bytes - running)
                running = option.retained_bytes
    at = np.array(thresholds, dtype=np.int64)
    order = np.argsort(at, kind="stable")
    at, retained = at[order], np.cumsum(np.array(deltas, dtype=np.int64)[order])
    # Only thresholds at which every segment has an option are policies.
    start = max(min(o.temp_bytes for o in segment.values()) for segment in table)
    # The sum after the last event at each distinct threshold.
    last = np.r_[at[1:] != at[:-1], True]
    at, retained = at[last], retained[last]
    valid = at >= start
    return int(persistent_bytes + (at[valid] + retained[valid]).min())


def tradeoff_curve(frontier: Frontier) -> np.ndarray:
    """The (peak bytes, ms) points no other final policy beats on both, sorted by peak.

    Shape (k, 2) float64 — for plotting; peaks above 2**53 bytes lose exactness here only.
    """
    peak, ms = frontier.peak_bytes, frontier.ms
    order = np.lexsort((ms, peak))
    peak, ms = peak[order], ms[order]
    keep = np.ones(peak.shape[0], dtype=bool)
    keep[1:] = ms[1:] < np.minimum.accumulate(ms)[:-1]
    return np.column_stack([peak[keep].astype(np.float64), ms[keep]])
