"""``bench/bench_budget.py --quick``: every method runs, and the table says what it measured.

A smoke test of the bench, not a measurement (no time is asserted): on a tiny ResNet
with BatchNorm, the rows of every method exist, torch's checkpoint and SAC replay the
BatchNorm update (2 per step), eager and every plan of ours update it once, and ours'
eager-exact plans give eager's gradients bitwise.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch._dynamo

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_budget", REPO / "bench" / "bench_budget.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_budget", bench)  # its dataclasses look their module up there
_spec.loader.exec_module(bench)


def _rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("method",) and not cells[0].startswith("---"):
            rows[cells[0]] = cells
    return rows


def test_quick_bench_runs_every_method_and_reports_batchnorm_and_gradients(capsys):
    torch._dynamo.reset()
    try:
        assert bench.main(["--quick", "--models", "resnet18"]) == 0
    finally:
        torch._dynamo.reset()
    out = capsys.readouterr().out
    rows = _rows(out)
    rivals = ["eager", "checkpoint, every block", "SAC, every block", "compile@0.5"]
    ours = [f"ours@{b}" for b in bench.RELATIVE] + [f"ours@{r}" for r in rivals[1:]] + ["ours+compile@compile@0.5"]
    assert list(rows) == rivals + ours
    bn = {name: cells[6] for name, cells in rows.items() if not cells[2].startswith("refused")}
    assert bn["eager"] == "1" and bn["compile@0.5"] == "1"
    assert bn["checkpoint, every block"] == "2" and bn["SAC, every block"] == "2"  # the replay updates again
    peak = {name: float(cells[2].split()[0]) for name, cells in rows.items() if name in bn}
    assert peak["SAC, every block"] > peak["checkpoint, every block"]  # SAC keeps the conv outputs
    ran = [name for name in ours if name in bn]
    assert all(name in ran for name in ours[:3])  # a relative budget always has a plan
    assert all(bn[name] == "1" for name in ran)
    assert all(rows[name][5] == "bitwise" for name in ran if not name.startswith("ours+compile"))
    assert all(rows[name][5] == "bitwise" for name in rivals[:3])
    targets = [line for line in out.splitlines() if line.startswith("- ")]
    assert len(targets) == len(rivals) - 1 + 1 + 1  # each rival's peak, the compiled arm, refusals
    assert all(("met" in line) or ("MISSED" in line) for line in targets)
