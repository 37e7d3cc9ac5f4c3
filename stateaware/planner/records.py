"""Cards and plans as rows of the record store's ``profiles`` and ``policies`` tables.

The one builder of each table's rows: every writer (the timing and CIFAR cohort kinds,
``stateaware.cost_runtime.plans``) goes through ``profile_rows``, ``plan_columns``
and ``policy_row``, so a column means the same thing whoever wrote it. Plain dicts
keyed by the column names of ``stateaware/records/schema.py``; no pyarrow here, so the
planner stays importable without the record store. ``card_from_profile_rows`` rebuilds
the card from its rows, so a report can re-plan from the Parquet files alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .planners import Plan
from .profile_card import OPTIONS, ProfileCard, card_from_dict

__all__ = ["WORKLOAD_COLUMNS", "PLAN_COLUMNS", "profile_rows", "plan_columns", "policy_row", "card_from_profile_rows"]

#: The workload-description columns ``profiles`` and ``policies`` share (schema ``_WORKLOAD``).
WORKLOAD_COLUMNS = (
    "workload",
    "cell",
    "buffer_bytes",
    "write_fraction",
    "live_segments",
    "granularity_bytes",
    "width",
    "batch",
    "budget_bytes",
)

#: What a plan contributes to its ``policies`` row (absent ones are null: a fixed policy
#: has no frontier, ``functional`` has no card option and so no policy or prediction).
PLAN_COLUMNS = (
    "planner",
    "feasible",
    "policy",
    "predicted_peak_bytes",
    "predicted_ms",
    "min_peak_bytes",
    "frontier_size",
    "truncated",
    "card_digest",
    "plan_digest",
)


def _workload(columns: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(columns) - set(WORKLOAD_COLUMNS))
    if unknown:
        raise ValueError(
            f"unknown workload column(s) {', '.join(unknown)}; valid columns are: {', '.join(WORKLOAD_COLUMNS)}"
        )
    return dict(columns)


def profile_rows(card: ProfileCard, **workload: Any) -> list[dict[str, Any]]:
    """One ``profiles`` row per (segment, option present), in segment then option order.

    Every cost field of the option (``OptionCost.to_dict``, the state parts included), so
    ``card_from_profile_rows`` gives back the card and its digest. ``workload`` fills
    the shared workload columns (``workload="feature_queue"``, ``cell=...``); an unknown
    name is a ``ValueError`` listing the valid ones.
    """
    shared = _workload(workload)
    digest = card.digest
    provenance = json.dumps(dict(card.provenance), sort_keys=True, default=str)
    rows = []
    for index, segment in enumerate(card.segments):
        for option in OPTIONS:
            if option in segment:
                rows.append(
                    {
                        "card_digest": digest,
                        "segment": index,
                        "option": option,
                        **segment[option].to_dict(),
                        "persistent_bytes": card.persistent_bytes,
                        "provenance_json": provenance,
                        **shared,
                    }
                )
    return rows


def plan_columns(result: Plan) -> dict[str, Any]:
    """The plan's ``PLAN_COLUMNS``: ``policy`` is None when no policy fits (an
    infeasible plan is recorded, never executed); the predictions are the true costs."""
    return {
        "planner": result.planner,
        "feasible": bool(result.feasible),
        "policy": list(result.policy) if result.feasible else None,
        "predicted_peak_bytes": result.predicted_peak_bytes,
        "predicted_ms": result.predicted_ms,
        "min_peak_bytes": result.min_peak_bytes,
        "frontier_size": int(result.frontier_size),
        "truncated": bool(result.truncated),
        "card_digest": result.card_digest,
        "plan_digest": result.digest,
    }


def policy_row(
    plan: Plan | Mapping[str, Any], method: str | None = None, *, seed: int | None = None, **workload: Any
) -> dict[str, Any]:
    """The ``policies`` row of one plan; ``method`` names the method it configures
    (default: the planner's name).

    ``plan`` is a planner ``Plan`` or a mapping of ``PLAN_COLUMNS`` (a fixed policy's
    prediction; missing columns are null, others are a ``ValueError``). ``seed`` is the
    training seed where plans differ by seed; ``workload`` fills the shared workload
    columns, and a ``budget_bytes`` disagreeing with a ``Plan``'s own is a ``ValueError``.
    """
    shared = _workload(workload)
    if isinstance(plan, Plan):
        if shared.get("budget_bytes", plan.budget_bytes) != plan.budget_bytes:
            raise ValueError(
                f"budget_bytes={shared['budget_bytes']} disagrees with the plan's budget {plan.budget_bytes}"
            )
        shared["budget_bytes"] = plan.budget_bytes
        columns = plan_columns(plan)
    else:
        unknown = sorted(set(plan) - set(PLAN_COLUMNS))
        if unknown:
            raise ValueError(
                f"unknown plan column(s) {', '.join(unknown)}; valid columns are: {', '.join(PLAN_COLUMNS)}"
            )
        columns = {name: plan.get(name) for name in PLAN_COLUMNS}
    return {"method": method if method is not None else columns["planner"], **columns, "seed": seed, **shared}


def card_from_profile_rows(rows: Iterable[Mapping[str, Any]]) -> ProfileCard:
    """Rebuild a card from its ``profiles`` rows (one digest only); validated as on load."""
    rows = list(rows)
    digests = {row["card_digest"] for row in rows}
    if len(digests) != 1:
        raise ValueError(f"expected the rows of exactly one card, got digests {sorted(digests)}")
    n = max(int(row["segment"]) for row in rows) + 1
    segments: list[dict[str, Any]] = [{} for _ in range(n)]
    fields = ("retained_bytes", "temp_bytes", "ms", "state_retained_bytes", "state_temp_bytes", "state_ms")
    for row in rows:
        segments[int(row["segment"])][row["option"]] = {f: row[f] for f in fields if row.get(f) is not None}
    card = card_from_dict(
        {
            "persistent_bytes": rows[0]["persistent_bytes"],
            "segments": segments,
            "provenance": json.loads(rows[0]["provenance_json"] or "{}"),
        }
    )
    if card.digest not in digests:
        raise ValueError(f"rebuilt card has digest {card.digest}, rows say {digests.pop()}")
    return card
