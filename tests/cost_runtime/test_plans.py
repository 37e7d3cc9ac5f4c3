"""Plans from a card, budget placement by position, and frozen cards named by digest."""

from __future__ import annotations

import json

import pytest

from stateaware.cost_runtime.frozen_cards import FrozenCardError, freeze, load_frozen
from stateaware.cost_runtime.plans import anchors, budget_at, plan_methods, position_of, predict
from stateaware.planner import card_from_dict

MIB = 1 << 20


def card_doc(eager_peak=None):
    # Per segment: eager keeps 3 MiB; whole keeps 1 MiB activations + 1 MiB snapshot; region 1 MiB + a
    # small journal; replays cost more time.
    seg = {
        "eager": {"retained_bytes": 3 * MIB, "temp_bytes": MIB, "ms": 1.0},
        "whole": {
            "retained_bytes": 2 * MIB,
            "temp_bytes": 2 * MIB,
            "ms": 2.0,
            "state_retained_bytes": MIB,
            "state_temp_bytes": MIB,
            "state_ms": 0.5,
        },
        "region": {
            "retained_bytes": MIB + 4096,
            "temp_bytes": MIB + 4096,
            "ms": 1.8,
            "state_retained_bytes": 4096,
            "state_temp_bytes": 4096,
            "state_ms": 0.3,
        },
    }
    prov = {} if eager_peak is None else {"eager_step_peak_bytes": eager_peak}
    return {"persistent_bytes": 4 * MIB, "segments": [seg] * 8, "provenance": prov}


def test_predict_is_the_static_model():
    card = card_from_dict(card_doc())
    assert predict(card, ["eager"] * 8) == (4 * MIB + 8 * 3 * MIB + MIB, 8.0)
    peak, ms = predict(card, ["eager"] * 4 + ["whole"] * 4)
    assert peak == 4 * MIB + 4 * 3 * MIB + 4 * 2 * MIB + 2 * MIB and ms == 12.0
    with pytest.raises(ValueError, match="8 segments"):
        predict(card, ["eager"])


def test_budget_positions_use_the_measured_eager_anchor_when_the_card_has_one():
    predicted = card_from_dict(card_doc())
    min_ew, eager = anchors(predicted)
    assert (min_ew, eager) == (4 * MIB + 16 * MIB + 2 * MIB, 29 * MIB)
    measured = card_from_dict(card_doc(eager_peak=28 * MIB))
    assert anchors(measured) == (22 * MIB, 28 * MIB)
    assert budget_at(measured, 0.0) == 22 * MIB and budget_at(measured, 1.0) == 28 * MIB
    assert budget_at(measured, 0.5) == 25 * MIB
    assert position_of(44, 40, 46) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="eager"):
        position_of(1, 5, 5)


def test_plans_per_method_under_a_tight_budget():
    card = card_from_dict(card_doc(eager_peak=28 * MIB))
    budget = budget_at(card, -1.0)  # below every eager/whole policy
    rows = plan_methods(card, budget, ["eager", "whole", "regions", "functional", "agnostic", "eager_whole", "joint"])
    assert rows["eager_whole"]["feasible"] is False and rows["eager_whole"]["policy"] is None
    assert rows["eager_whole"]["min_peak_bytes"] == 22 * MIB
    joint = rows["joint"]
    assert joint["feasible"] and joint["predicted_peak_bytes"] <= budget and "region" in joint["policy"]
    assert rows["eager"]["feasible"] and rows["eager"]["policy"] == ["eager"] * 8  # executed, evaluated
    assert rows["functional"]["predicted_peak_bytes"] is None
    assert {r["card_digest"] for r in rows.values()} == {card.digest}
    with pytest.raises(ValueError, match="valid methods are"):
        plan_methods(card, budget, ["snapshot"])


def test_eager_whole_never_chooses_regions_and_joint_is_no_slower():
    card = card_from_dict(card_doc(eager_peak=28 * MIB))
    for position in (0.2, 0.5, 0.9):
        rows = plan_methods(card, budget_at(card, position), ["eager_whole", "joint"])
        assert "region" not in rows["eager_whole"]["policy"]
        assert rows["joint"]["predicted_ms"] <= rows["eager_whole"]["predicted_ms"]


def test_frozen_cards_round_trip_and_refuse_edits(tmp_path):
    path, digest = freeze(card_doc(), "cell", tmp_path)
    assert path.name == f"cell-{digest[:12]}.json"
    assert load_frozen(digest, tmp_path).digest == digest
    assert load_frozen(digest[:12], tmp_path).digest == digest
    with pytest.raises(FrozenCardError, match="at least the first 12"):
        load_frozen(digest[:6], tmp_path)
    with pytest.raises(FrozenCardError, match="no frozen card"):
        load_frozen("0" * 64, tmp_path)
    doc = json.loads(path.read_text())
    doc["segments"][0]["eager"]["ms"] = 9.0
    path.write_text(json.dumps(doc))
    with pytest.raises(FrozenCardError, match="edited after freezing"):
        load_frozen(digest, tmp_path)
