"""Planner benchmark: time and frontier size by card size, against enumeration and a
memory-blind knapsack — all measured side by side in one run.

    python bench/bench_planner.py                  # n = 16, 64, 256, 1024; 3 cards each
    python bench/bench_planner.py --cards 5 --full-limit-s 30

Sections
  1. joint planner time (the default: untruncated, exact budget bounds) and frontier sizes
     for n = 16 ... 1024 on random cards of two families (synthetic.py): ``tradeoff`` (every
     segment's costs drawn independently) and ``blocks`` (copies of four segment types).
     Budgets sit at 25/50/75 % between the card's least peak and its all-eager peak.
     ``full`` is the budget-independent untruncated frontier (every policy that is optimal
     at some budget); it is skipped once the previous size took longer than
     ``--full-limit-s`` or held more than ``--full-limit-points`` triples, because its size
     grows polynomially with n (roughly n^3 on ``tradeoff`` cards).
  2. exhaustive enumeration vs the dynamic program on the same n = 16 eager/whole cards
     (2^16 policies) and n = 10 three-option cards (3^10).
  3. a plain two-objective knapsack that ignores temporary memory (every q set to 0):
     on how many cards its policy exceeds the budget once max q is counted.
  4. the joint planner against the dynamic program as it was before its speed-up (commit e49bfd1, kept as the
     reference in tests/planner/test_frontier_reference.py), on section 1's cards: both
     times side by side, and a check that every plan is identical.

Times are wall-clock medians of single runs on this machine (shared CPU cores: compare
rows of one run, not runs of different days). Nothing here is a paper figure.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from stateaware.planner import (
    OptionCost,
    enumerate_policies,
    evaluate_policy,
    format_bytes,
    min_peak_bytes,
    pareto_frontier,
    plan,
)
from stateaware.planner.synthetic import random_card

FRACTIONS = (0.25, 0.5, 0.75)


def _budget(card, fraction: float) -> int:
    least = min_peak_bytes(card.persistent_bytes, card.segments)
    eager = evaluate_policy(card, ("eager",) * card.n_segments)[0]
    return int(least + fraction * (eager - least))


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _enumerate_best(card, budget):
    """Every policy of ``card`` and the fastest one within ``budget`` (timed as one call)."""
    policies = enumerate_policies(card.persistent_bytes, card.segments)
    return policies, policies.best(budget)


def bench_sizes(sizes: list[int], cards: int, full_limit_s: float, full_limit_points: int, seed: int) -> None:
    print("1. joint planner by card size (untruncated; times in seconds)")
    header = (
        f"{'family':9s} {'n':>5s} {'plan med':>9s} {'plan max':>9s} {'kept max':>9s} "
        f"{'full size':>10s} {'full largest':>12s} {'full s':>8s}"
    )
    print(header)
    for kind in ("blocks", "tradeoff"):
        full_too_slow = False
        for n in sizes:
            rng = np.random.default_rng([seed, n, len(kind)])
            plan_s, kept, full_sizes, full_largest, full_s = [], [], [], [], []
            for k in range(cards):
                card = random_card(rng, n, kind=kind)
                budget = _budget(card, FRACTIONS[k % len(FRACTIONS)])
                result, seconds = _timed(functools.partial(plan, card, budget, "joint"))
                assert result.feasible and not result.truncated
                plan_s.append(seconds)
                # The largest frontier the exact pass held (not part of Plan; measured here).
                exact = pareto_frontier(
                    card.persistent_bytes, card.segments, budget_bytes=budget, upper_ms=result.predicted_ms * (1 + 1e-9)
                )
                kept.append(exact.largest)
                if not full_too_slow:
                    front, seconds = _timed(functools.partial(pareto_frontier, card.persistent_bytes, card.segments))
                    full_sizes.append(front.size)
                    full_largest.append(front.largest)
                    full_s.append(seconds)
            if full_sizes:
                full = (
                    f"{int(statistics.median(full_sizes)):>10d} {max(full_largest):>12d} "
                    f"{statistics.median(full_s):>8.3f}"
                )
                full_too_slow = max(full_s) > full_limit_s or max(full_largest) > full_limit_points
            else:
                full = f"{'skipped':>10s} {'':>12s} {'':>8s}"
            print(
                f"{kind:9s} {n:>5d} {statistics.median(plan_s):>9.3f} {max(plan_s):>9.3f} {max(kept):>9d} {full}",
                flush=True,
            )
    print("   plan: plan(card, budget, 'joint') end to end; kept max: largest frontier of its exact pass;")
    print("   full: budget-independent untruncated frontier (final size median, largest at any step, seconds)")


def bench_exhaustive(cards: int, seed: int) -> None:
    print("\n2. exhaustive enumeration vs the dynamic program (same cards, seconds, medians)")
    print(f"{'case':26s} {'policies':>9s} {'enumerate':>10s} {'DP plan':>9s} {'DP full':>9s} {'enum/plan':>10s}")
    rng = np.random.default_rng([seed, 2])
    for label, n, options in (
        ("n=16 eager/whole", 16, ("eager", "whole")),
        ("n=10 eager/whole/region", 10, ("eager", "whole", "region")),
    ):
        enum_s, plan_s, full_s, count = [], [], [], 0
        planner = "joint" if len(options) == 3 else "eager_whole"
        for k in range(max(cards, 5)):
            card = random_card(rng, n, options=options)
            budget = _budget(card, FRACTIONS[k % len(FRACTIONS)])
            (enum, best), seconds = _timed(functools.partial(_enumerate_best, card, budget))
            enum_s.append(seconds)
            count = enum.count
            result, seconds = _timed(functools.partial(plan, card, budget, planner))
            plan_s.append(seconds)
            _, seconds = _timed(functools.partial(pareto_frontier, card.persistent_bytes, card.segments))
            full_s.append(seconds)
            assert abs(result.predicted_ms - enum.ms[best]) <= 1e-9 * enum.ms[best]
        e, p, f = (statistics.median(x) for x in (enum_s, plan_s, full_s))
        print(f"{label:26s} {count:>9d} {e:>10.4f} {p:>9.4f} {f:>9.4f} {e / p:>10.1f}")


def bench_memory_blind(cards: int, seed: int) -> None:
    print("\n3. a two-objective knapsack that ignores temporary memory (q := 0)")
    print(
        f"{'family':9s} {'n':>4s} {'cards':>6s} {'over budget':>12s} {'median over':>12s} {'joint feasible there':>21s}"
    )
    for kind in ("tradeoff", "blocks"):
        for n in (16, 64):
            rng = np.random.default_rng([seed, 3, n, len(kind)])
            over = joint_ok = 0
            excess = []
            total = max(cards, 1) * 40
            for _ in range(total):
                card = random_card(rng, n, kind=kind)
                budget = _budget(card, rng.uniform(0.0, 1.0))
                blind = [{o: OptionCost(c.retained_bytes, 0, c.ms) for o, c in s.items()} for s in card.segments]
                front = pareto_frontier(card.persistent_bytes, blind, budget_bytes=budget)
                best = front.best(budget)
                if best is None:
                    continue
                peak, _ = evaluate_policy(card, front.policy(best))
                if peak > budget:
                    over += 1
                    excess.append(peak - budget)
                    joint_ok += plan(card, budget, "joint").feasible
            median = format_bytes(statistics.median(excess)) if excess else "-"
            print(f"{kind:9s} {n:>4d} {total:>6d} {over:>12d} {median:>12s} {joint_ok:>21d}")
    print("   over budget: cards on which the memory-blind policy's true peak (with max q) exceeds the budget;")
    print("   joint feasible there: of those, cards on which the joint planner does fit the budget")


def bench_reference(sizes: list[int], cards: int, seed: int) -> None:
    # The reference lives with the tests that pin the program to it; the repository root
    # is not on sys.path when this script runs as bench/bench_planner.py.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from stateaware.planner import planners as planners_module
    from tests.planner.test_frontier_reference import _reference_pareto_frontier

    current = planners_module.pareto_frontier
    print("\n4. joint planner now vs the program before its speed-up (same cards as 1; seconds)")
    print(
        f"{'family':9s} {'n':>5s} {'before med':>11s} {'before max':>11s} {'now med':>9s} {'now max':>9s} "
        f"{'med ratio':>10s} {'max ratio':>10s} {'plans':>10s}"
    )
    for kind in ("blocks", "tradeoff"):
        for n in sizes:
            rng = np.random.default_rng([seed, n, len(kind)])
            before, now = [], []
            for k in range(cards):
                card = random_card(rng, n, kind=kind)
                budget = _budget(card, FRACTIONS[k % len(FRACTIONS)])
                ours, seconds = _timed(functools.partial(plan, card, budget, "joint"))
                now.append(seconds)
                planners_module.pareto_frontier = _reference_pareto_frontier
                try:
                    theirs, seconds = _timed(functools.partial(plan, card, budget, "joint"))
                finally:
                    planners_module.pareto_frontier = current
                before.append(seconds)
                same = [getattr(ours, f.name) for f in fields(ours) if f.compare] == [
                    getattr(theirs, f.name) for f in fields(theirs) if f.compare
                ]
                assert same and np.array_equal(ours.frontier, theirs.frontier), f"{kind} n={n} card {k} differs"
            b_med, b_max, n_med, n_max = statistics.median(before), max(before), statistics.median(now), max(now)
            print(
                f"{kind:9s} {n:>5d} {b_med:>11.3f} {b_max:>11.3f} {n_med:>9.3f} {n_max:>9.3f} "
                f"{b_med / n_med:>10.2f} {b_max / n_max:>10.2f} {'identical':>10s}",
                flush=True,
            )
    print("   ratio: before / now (median over cards, and max over cards); plans: every field and frontier equal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--cards", type=int, default=3, help="random cards per size (default %(default)s)")
    parser.add_argument(
        "--full-limit-s",
        type=float,
        default=20.0,
        help="stop measuring the budget-independent frontier after a size that took longer",
    )
    parser.add_argument("--full-limit-points", type=int, default=20_000, help="... or held a frontier larger than this")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--skip", nargs="*", default=[], choices=["sizes", "exhaustive", "blind", "reference"])
    args = parser.parse_args()
    if "sizes" not in args.skip:
        bench_sizes(args.sizes, args.cards, args.full_limit_s, args.full_limit_points, args.seed)
    if "exhaustive" not in args.skip:
        bench_exhaustive(args.cards, args.seed)
    if "blind" not in args.skip:
        bench_memory_blind(args.cards, args.seed)
    if "reference" not in args.skip:
        bench_reference(args.sizes, args.cards, args.seed)


if __name__ == "__main__":
    main()
