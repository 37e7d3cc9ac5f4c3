"""python -m stateaware.plan: text, --json, --plot, and errors that name the flag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stateaware.plan import main
from stateaware.planner import load_card, plan

HANDWRITTEN = str(Path(__file__).resolve().parents[1] / "data" / "cards" / "handwritten_large_sparse.json")
GiB = 1 << 30


def test_text_output_lists_every_segment_and_the_totals(capsys):
    assert main([HANDWRITTEN, "--budget", "32GiB", "--planner", "joint"]) == 0
    out = capsys.readouterr().out
    expected = plan(load_card(HANDWRITTEN), 32 * GiB, "joint")
    for index, option in enumerate(expected.policy):
        assert f"segment {index:4d}  {option}" in out
    assert f"({expected.predicted_peak_bytes} bytes), predicted" in out
    assert f"{expected.predicted_ms:.3f} ms per step" in out
    assert "untruncated" in out and expected.card_digest in out


def test_json_output_is_exactly_the_documented_object(capsys):
    assert main([HANDWRITTEN, "--budget", "1.5GiB", "--planner", "region", "--json"]) == 0
    card = load_card(HANDWRITTEN)
    assert json.loads(capsys.readouterr().out) == {
        "feasible": False,
        "policy": [],
        "predicted_peak_bytes": None,
        "predicted_ms": None,
        "frontier_size": 0,
        "truncated": False,
        "budget_bytes": 1610612736,
        "planner": "region",
        "min_peak_bytes": plan(card, 0, "region").min_peak_bytes,
        "card_digest": card.digest,
    }
    assert main([HANDWRITTEN, "--budget", "47244640256", "--json"]) == 0  # 44 GiB in bytes
    doc = json.loads(capsys.readouterr().out)
    assert json.loads(plan(load_card(HANDWRITTEN), 44 * GiB).to_json()) == doc


def test_infeasible_text_reports_the_minimum_peak(capsys):
    assert main([HANDWRITTEN, "--budget", "16GiB", "--planner", "eager_whole"]) == 0
    out = capsys.readouterr().out
    floor = plan(load_card(HANDWRITTEN), 0, "eager_whole").min_peak_bytes
    assert "feasible  no" in out and f"({floor} bytes)" in out


def test_agnostic_over_budget_is_said_plainly(capsys):
    assert main([HANDWRITTEN, "--budget", "32GiB", "--planner", "agnostic"]) == 0
    assert "fits      NO: over by" in capsys.readouterr().out


def test_plot_writes_a_png(tmp_path, capsys):
    target = tmp_path / "frontier.png"
    assert main([HANDWRITTEN, "--budget", "32GiB", "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("budget", ["--budget=-3GiB", "--budget=44GB", "--budget=lots", "--budget=-1"])
def test_bad_budgets_name_the_flag_and_the_forms(budget, capsys):
    with pytest.raises(SystemExit) as info:
        main([HANDWRITTEN, budget])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --budget" in err and "44GiB" in err and "MiB" in err


def test_malformed_card_exits_2_naming_segment_and_field(tmp_path, capsys):
    doc = json.loads(Path(HANDWRITTEN).read_text())
    del doc["segments"][3]["region"]["ms"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as info:
        main([str(bad), "--budget", "32GiB"])
    assert info.value.code == 2
    assert "segments[3].region: missing field(s) ms" in capsys.readouterr().err


def test_module_runs_as_a_fresh_process():
    done = subprocess.run(
        [sys.executable, "-m", "stateaware.plan", HANDWRITTEN, "--budget", "44GiB", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["feasible"] is True


FROZEN = Path(__file__).resolve().parents[2] / "conf" / "cards" / "feature_queue-579a6e625041.json"
LARGE = Path(__file__).resolve().parents[2] / "conf" / "cards" / "large_sparse-523727961a1b.json"


def test_text_names_the_cards_hardware_scale_and_segment_count(capsys):
    assert main([str(FROZEN), "--budget", "50%"]) == 0
    out = capsys.readouterr().out
    assert "hardware  cpu, scale 1/2048 of the paper's bytes" in out
    assert "segments  64, persistent" in out
    assert main([HANDWRITTEN, "--budget", "44GiB"]) == 0
    assert "hardware  none: written by hand, scale unrecorded of the paper's bytes" in capsys.readouterr().out


def test_a_relative_budget_sits_between_the_least_peak_and_all_eager(capsys):
    from stateaware.planner import evaluate_policy

    card = load_card(FROZEN)
    assert main([str(FROZEN), "--budget", "50%", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    least = plan(card, 0, "joint").min_peak_bytes
    eager, _ = evaluate_policy(card, ("eager",) * card.n_segments)
    assert doc["budget_bytes"] == least + (eager - least) // 2
    assert doc["planner"] == "joint" and doc["min_peak_bytes"] == least and doc["card_digest"] == card.digest
    assert doc["feasible"] and doc["predicted_peak_bytes"] <= doc["budget_bytes"]
    assert main([str(FROZEN), "--budget", "0%", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_peak_bytes"] == least
    with pytest.raises(SystemExit) as info:
        main([str(FROZEN), "--budget", "fifty%"])
    assert info.value.code == 2
    # The anchors are the card's, not the planner's: every planner gets the same bytes.
    assert main([str(LARGE), "--budget", "50%", "--planner", "eager_whole", "--json"]) == 0
    ew = json.loads(capsys.readouterr().out)
    assert main([str(LARGE), "--budget", "50%", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["budget_bytes"] == ew["budget_bytes"]


def test_the_frontier_size_printed_is_the_one_plotted(tmp_path, capsys, monkeypatch):
    import stateaware.commands.plan as cli

    plotted = []
    monkeypatch.setattr(cli, "plot_frontier", lambda result, path: plotted.append(result.frontier.shape[0]))
    assert main([str(FROZEN), "--budget", "50%", "--plot", str(tmp_path / "f.png")]) == 0
    out = capsys.readouterr().out
    word = "point" if plotted[0] == 1 else "points"
    assert f"frontier  {plotted[0]} {word} on the peak/time trade-off (as plotted)" in out
    assert f"({plotted[0]} points)" in out
