"""stateaware.cost_runtime.cells: the timing protocol on plain dicts, without conf/ or torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stateaware.cost_runtime.cells import (
    anchor_cell_of,
    cells_of,
    effective_params,
    named_cell,
    place_budget,
    process_cells,
)

GIB = 1 << 30

#: A hardware profile as plain data (the shape of conf/hardware/*.yaml), written here so the
#: tests say what the functions take; none of it is read from conf/.
HARDWARE = {
    "name": "lab",
    "device": "cpu",
    "scale": 0.5,
    "params": {
        "cost_runtime": {
            "granularity_bytes": 256,
            "byte_scale": 0.5,
            "budget_rule": "relative",
            "cells": {
                "a": {
                    "workload": "feature_queue",
                    "buffer_bytes": 4096,
                    "write_fraction": 0.5,
                    "live_segments": 2,
                    "width": 4,
                    "batch": 2,
                    "rank": 1,
                },
                "b": {
                    "workload": "prototype_memory",
                    "buffer_bytes": 8192,
                    "write_fraction": 1.0,
                    "live_segments": 3,
                    "width": 4,
                    "batch": 2,
                    "rank": 1,
                },
            },
            "calibration": {"buffers": {64: 1024, 1024: 2048}, "width": 4, "batch": 2, "rank": 1},
            "three_workload": {
                "buffer_bytes": 4096,
                "write_fraction": 0.001,
                "live_segments": 4,
                "width": 4,
                "batch": 2,
                "rank": 1,
            },
            "overrides": {"quick": {"steps": 2}},
        }
    },
}


def test_named_cells_carry_the_profiles_granularity_and_unknown_ones_name_the_valid():
    assert cells_of({"cells": ["b", "a"]}, HARDWARE) == [
        {"cell": "b", "granularity_bytes": 256, **HARDWARE["params"]["cost_runtime"]["cells"]["b"]},
        {"cell": "a", "granularity_bytes": 256, **HARDWARE["params"]["cost_runtime"]["cells"]["a"]},
    ]
    with pytest.raises(
        ValueError, match="cell 'c' is not in hardware.params.cost_runtime.cells; valid cells are: a, b"
    ):
        cells_of({"cells": ["c"]}, HARDWARE)
    with pytest.raises(ValueError, match="valid grids are: calibration, three_workload"):
        cells_of({"grid": "mine"}, HARDWARE)
    with pytest.raises(ValueError, match="needs params.cells or params.grid"):
        cells_of({}, HARDWARE)
    with pytest.raises(ValueError, match="hardware profile 'bare' has no params.cost_runtime section"):
        cells_of({"cells": ["a"]}, {"name": "bare"})


def test_the_calibration_grid_is_workload_by_buffer_by_fraction_by_live_segments():
    cells = cells_of({"grid": "calibration"}, HARDWARE)
    assert len(cells) == 3 * 2 * 2 * 2
    assert cells[0]["cell"] == "feature_queue-64MiB-f0.001-l1" and cells[0]["buffer_bytes"] == 1024
    assert cells[-1]["cell"] == "unrolled_recurrence-1024MiB-f1-l64" and cells[-1]["buffer_bytes"] == 2048
    assert {c["granularity_bytes"] for c in cells} == {256}


def test_processes_cycle_through_cells_but_three_workload_gives_each_workload_a_block():
    assert [c["cell"] for c in process_cells({"cells": ["a", "b"]}, HARDWARE, 5)] == ["a", "b", "a", "b", "a"]
    assert [c["cell"] for c in process_cells({"grid": "three_workload"}, HARDWARE, 7)] == ["feature_queue"] * 3 + [
        "prototype_memory"
    ] * 2 + ["unrolled_recurrence"] * 2


def test_the_profiles_overrides_reduce_a_cohorts_params_and_say_what_they_replaced():
    assert effective_params({"name": "quick", "params": {"steps": 20, "warmup": 3}}, HARDWARE) == {
        "steps": 2,
        "warmup": 3,
        "reduced_from": {"steps": 20},
    }
    assert effective_params({"name": "other", "params": {"steps": 20}}, HARDWARE) == {"steps": 20}


def test_budgets_are_absolute_scaled_or_placed_between_the_anchor_cards_anchors(monkeypatch):
    absolute = {
        **HARDWARE,
        "params": {"cost_runtime": {**HARDWARE["params"]["cost_runtime"], "budget_rule": "absolute"}},
    }
    assert place_budget({"budget_gib": 44}, absolute, None) == 44 * GIB
    assert place_budget({"budget_gib": 44, "placement": "scaled"}, HARDWARE, None) == 22 * GIB
    with pytest.raises(ValueError, match="valid placements are: relative, scaled"):
        place_budget({"budget_gib": 44, "placement": "guess"}, HARDWARE, None)

    # The anchor card's two anchors (least eager/whole peak, all-eager peak): 100 and 300 bytes.
    monkeypatch.setattr("stateaware.cost_runtime.plans.anchors", lambda card: (100, 300))
    placed = place_budget({"budget_gib": 3.0, "anchor_gib": {"min_eager_whole": 2.0, "eager": 6.0}}, HARDWARE, object())
    assert placed == 150  # a quarter of the way from 2 to 6 GiB -> a quarter of the way from 100 to 300 B


def test_only_a_relative_placement_on_a_relative_profile_uses_another_cells_card():
    a = named_cell("a", HARDWARE)
    assert anchor_cell_of({"anchor_cell": "b"}, HARDWARE, a) == named_cell("b", HARDWARE)
    assert anchor_cell_of({"anchor_cell": "a"}, HARDWARE, a) is None
    assert anchor_cell_of({"anchor_cell": "b", "placement": "scaled"}, HARDWARE, a) is None
    assert anchor_cell_of({}, HARDWARE, a) is None


def test_planning_cells_imports_neither_torch_nor_the_config_layer():
    code = (
        "import sys; from stateaware.cost_runtime.cells import process_cells; "
        "print(sorted(m for m in ('torch', 'omegaconf', 'hydra', 'stateaware.cohorts') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
