"""The shipped frozen cards (conf/cards/) load unchanged under the four-option card format:
same digests (cohorts name them) and the same plans as the three-option planner gave.

tests/data/frozen_card_plans.json was written by the planner before ``offload`` existed:
per card, its digest and, at five budgets from its least to its all-eager peak, each
planner's plan digest and predicted peak. Cards frozen later (three_workload at 4 MiB)
were added the same way by the planner of their day, so they pin its plans from then on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stateaware.planner import load_card, plan

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "data" / "frozen_card_plans.json").read_text())


def test_every_shipped_card_is_in_the_golden_file():
    assert sorted(p.name for p in (ROOT / "conf" / "cards").glob("*.json")) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_frozen_card_keeps_its_digest_and_its_plans(name):
    card = load_card(ROOT / "conf" / "cards" / name)
    expected = GOLDEN[name]
    assert card.digest == expected["card_digest"]
    assert name.rsplit("-", 1)[1].removesuffix(".json") == card.digest[:12]
    for row in expected["plans"]:
        got = plan(card, row["budget_bytes"], row["planner"])
        assert (got.digest, got.predicted_peak_bytes) == (row["plan_digest"], row["predicted_peak_bytes"]), row
