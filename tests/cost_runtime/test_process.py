"""stateaware.cost_runtime.timing_process: one timing process as a library call, rows via ``write``."""

from __future__ import annotations

from stateaware.cost_runtime.cells import named_cell
from stateaware.planner.records import card_from_profile_rows
from stateaware.records.schema import IDENTITY, schema_for

HARDWARE = {
    "name": "lab",
    "device": "cpu",
    "scale": 1.0,
    "params": {
        "cost_runtime": {
            "granularity_bytes": 256,
            "byte_scale": 1.0,
            "budget_rule": "absolute",
            "threads": 1,
            "profile_repeats": 1,
            "cells": {
                "tiny": {
                    "workload": "feature_queue",
                    "buffer_bytes": 16384,
                    "write_fraction": 0.01,
                    "live_segments": 3,
                    "width": 8,
                    "batch": 4,
                    "rank": 1,
                }
            },
        }
    },
}


def test_a_process_writes_plans_its_card_checks_and_timings_through_the_callable():
    from stateaware.cost_runtime.timing_process import run_cell

    written: list[tuple[str, list[dict], str]] = []
    params = {
        "cell": named_cell("tiny", HARDWARE),
        "methods": ["eager", "whole", "joint"],
        "budget_gib": 1.0,
        "card": "measure",
        "warmup": 0,
        "steps": 2,
        "shuffle": False,
    }
    run_cell(
        params,
        HARDWARE,
        lambda table, rows, part: written.append((table, rows, part)),
        seed=5,
        cohort="lab-cohort",
        keep_threads=True,
    )
    tables = [t for t, _, _ in written]
    assert tables[:3] == ["policies", "profiles", "records"] and tables[3:] == ["timings"] * 3
    assert [p for t, _, p in written if t == "timings"] == [
        "cell=tiny-method=eager",
        "cell=tiny-method=whole",
        "cell=tiny-method=joint",
    ]
    policies, profiles = written[0][1], written[1][1]
    identity = {f.name for f in IDENTITY}
    for table, rows, _ in written:
        assert set().union(*rows) <= {f.name for f in schema_for(table)} - identity
    assert [r["method"] for r in policies] == ["eager", "whole", "joint"]
    assert {r["budget_bytes"] for r in policies} == {1 << 30} and {r["cell"] for r in policies} == {"tiny"}
    # The profiles rows are the whole card: it rebuilds with the digest the plans name.
    card = card_from_profile_rows(profiles)
    assert {r["card_digest"] for r in policies} == {card.digest}
    assert card.provenance["cohort"] == "lab-cohort" and card.provenance["hardware"] == "lab"
    assert sum(len(rows) for t, rows, _ in written if t == "timings") == 3 * 2
