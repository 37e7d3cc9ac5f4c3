"""The plan plot draws peaks and the budget in one binary unit, chosen by their magnitude.

It drew the axis in GiB whatever the card (a 25 MiB card's points all near 0.02) while
the budget line's label was in the budget's own unit (MiB): the line sat where its label
did not say. ``frontier_figure`` picks the unit ``format_bytes`` prints the largest of
them in, and uses it for the axis, the points and the budget line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stateaware.plan import frontier_figure
from stateaware.planner import load_card, plan
from stateaware.planner.budget import budget_on_card
from stateaware.units import UNITS

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
CARDS = {
    "MiB": ROOT / "conf" / "cards" / "large_sparse-523727961a1b.json",  # peaks ~25 MiB
    "GiB": ROOT / "tests" / "data" / "cards" / "handwritten_large_sparse.json",  # peaks ~45 GiB
    "KiB": ROOT / "conf" / "cards" / "prototype_memory-faaaf1592058.json",  # peaks ~650 KiB
}


@pytest.mark.parametrize("unit", list(CARDS))
@pytest.mark.parametrize("budget", ["50%", "0%", "100%"])
def test_the_axis_and_the_budget_line_share_the_unit_of_the_largest_peak(unit, budget):
    import matplotlib.pyplot as plt

    card = load_card(CARDS[unit])
    result = plan(card, budget_on_card(budget, card), "joint", full_frontier=True)
    fig = frontier_figure(result)
    try:
        (ax,) = fig.axes
        assert ax.get_xlabel() == f"predicted peak ({unit})"
        (line,) = [line for line in ax.get_lines() if str(line.get_label()).startswith("budget")]
        x = result.budget_bytes / UNITS[unit]
        assert list(line.get_xdata()) == [x, x]
        assert line.get_label() == f"budget {x:.3f} {unit}"
        (frontier,) = [line for line in ax.get_lines() if line.get_label() == "frontier (planner's cost view)"]
        assert list(frontier.get_xdata()) == [p / UNITS[unit] for p in result.frontier[:, 0].tolist()]
        assert 1 <= max(frontier.get_xdata().max(), x) < 1024  # the unit fits the largest value
    finally:
        plt.close(fig)
