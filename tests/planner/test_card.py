"""Profile cards: validation names the segment and field; the digest covers costs only."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stateaware.planner import CardError, OptionCost, card_from_dict, load_card, save_card

HANDWRITTEN = Path(__file__).resolve().parents[1] / "data" / "cards" / "handwritten_large_sparse.json"


def _doc() -> dict:
    return {
        "persistent_bytes": 100,
        "segments": [
            {"eager": {"retained_bytes": 10, "temp_bytes": 2, "ms": 1.5}},
            {
                "eager": {"retained_bytes": 20, "temp_bytes": 3, "ms": 2},
                "whole": {"retained_bytes": 8, "temp_bytes": 21, "ms": 4, "state_retained_bytes": 6, "state_ms": 1},
                "region": {"retained_bytes": 3, "temp_bytes": 22, "ms": 3.5, "state_temp_bytes": 1},
            },
        ],
        "provenance": {"workload": "test", "measured_at": "2026-11-29"},
    }


def test_load_save_round_trip_keeps_costs_digest_and_provenance(tmp_path):
    card = card_from_dict(_doc())
    digest = save_card(card, tmp_path / "c.json")
    again = load_card(tmp_path / "c.json")
    assert digest == card.digest == again.digest
    assert again == card
    assert dict(again.provenance) == {"workload": "test", "measured_at": "2026-11-29"}
    assert again.segments[1]["whole"] == OptionCost(8, 21, 4.0, state_retained_bytes=6, state_ms=1.0)
    assert set(again.segments[0]) == {"eager"}  # an absent option stays absent


def test_digest_ignores_provenance_and_spelling_but_not_costs():
    base = card_from_dict(_doc()).digest
    doc = _doc()
    doc["provenance"] = {"workload": "other"}
    doc["segments"][0]["eager"] = {"ms": 1.5, "temp_bytes": 2.0, "retained_bytes": 10, "state_ms": 0}
    assert card_from_dict(doc).digest == base
    doc["segments"][0]["eager"]["ms"] = 1.5000001
    assert card_from_dict(doc).digest != base
    doc = _doc()
    doc["segments"][1]["whole"]["state_ms"] = 2  # the agnostic view changes: a different card
    assert card_from_dict(doc).digest != base
    doc = _doc()
    del doc["segments"][1]["region"]
    assert card_from_dict(doc).digest != base


def test_digest_is_sha256_of_the_documented_canonical_json():
    import hashlib

    card = card_from_dict(_doc())
    text = json.dumps(card.canonical_costs(), sort_keys=True, separators=(",", ":"))
    assert card.digest == hashlib.sha256(text.encode()).hexdigest()
    assert "provenance" not in text


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d["segments"][1]["whole"].pop("temp_bytes"), ["segments[1].whole", "temp_bytes"]),
        (
            lambda d: d["segments"][1]["region"].update(retained_bytes=-1),
            ["segments[1].region.retained_bytes", "non-negative"],
        ),
        (
            lambda d: d["segments"][0]["eager"].update(retained_bytes=1.5),
            ["segments[0].eager.retained_bytes", "whole number"],
        ),
        (lambda d: d["segments"][0]["eager"].update(ms="fast"), ["segments[0].eager.ms"]),
        (lambda d: d["segments"][0]["eager"].update(ms=float("nan")), ["segments[0].eager.ms", "finite"]),
        (lambda d: d["segments"][0]["eager"].update(temp_bytes=True), ["segments[0].eager.temp_bytes"]),
        (
            lambda d: d["segments"][1]["whole"].update(state_retained_bytes=9),
            ["segments[1].whole.state_retained_bytes", "exceeds"],
        ),
        (lambda d: d["segments"][1]["whole"].update(retained=1), ["segments[1].whole", "'retained'", "valid fields"]),
        (lambda d: d["segments"][1].update(swap={}), ["segments[1]", "'swap'", "eager, whole, region, offload"]),
        (lambda d: d["segments"].__setitem__(0, {}), ["segments[0]", "no option"]),
        (lambda d: d.pop("persistent_bytes"), ["persistent_bytes"]),
        (lambda d: d.update(segments=[]), ["segments", "non-empty"]),
    ],
)
def test_malformed_cards_name_the_segment_and_field(edit, words):
    doc = copy.deepcopy(_doc())
    edit(doc)
    with pytest.raises(CardError) as info:
        card_from_dict(doc)
    for word in words:
        assert word in str(info.value)


def test_load_names_the_file_on_bad_json_and_bad_fields(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(CardError, match="bad.json: not valid JSON"):
        load_card(path)
    doc = _doc()
    doc["segments"][1]["eager"]["ms"] = -1
    path.write_text(json.dumps(doc))
    with pytest.raises(CardError, match=r"bad.json: segments\[1\]\.eager\.ms"):
        load_card(path)


def test_card_is_read_only():
    card = card_from_dict(_doc())
    with pytest.raises(TypeError):
        card.segments[0]["whole"] = card.segments[1]["whole"]


def test_handwritten_card_loads_with_sixteen_segments_of_three_options():
    card = load_card(HANDWRITTEN)
    assert card.n_segments == 16
    assert all(set(s) == {"eager", "whole", "region"} for s in card.segments)
    # Whole replay retains the 1 GiB snapshot as state; regions only a journal.
    assert all(s["whole"].state_retained_bytes == 1 << 30 for s in card.segments)
    assert all(s["region"].state_retained_bytes < 32 << 20 for s in card.segments)
