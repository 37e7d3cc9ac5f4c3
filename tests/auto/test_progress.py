"""``auto`` talks while it works: one progress line with an ETA on a terminal's stderr
(NOTE [ When auto talks ] in stateaware/auto/progress.py), silent otherwise or when told.

The model: ``Sequential(Linear, BatchNorm1d, Linear)``. Its measurements are the eager
step and the trace (2), per Linear its options eager, whole and selective (3 each), for the
BatchNorm eager, whole, offload and selective plus a replay blind to its state (5), the
all-recomputed step (1): 14 for ``profile``; ``wrap`` adds the budget loop's at most
three steps (its unused ones count as done at the end): 17.
"""

from __future__ import annotations

import io
import re
import sys

import pytest
import torch
from torch import nn

import stateaware.auto as auto


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 8))


def _stderr_of(monkeypatch, stream: io.StringIO, call) -> str:
    monkeypatch.setattr(sys, "stderr", stream)
    call()
    monkeypatch.undo()
    return stream.getvalue()


def test_wrap_shows_one_line_with_an_eta_through_tqdm_on_a_terminal(monkeypatch):
    x = torch.randn(4, 8)
    out = _stderr_of(monkeypatch, _Terminal(), lambda: auto.wrap(_model(), (x,), budget="50%", repeats=1))
    frames = out.split("\r")
    assert out.endswith("\n") and out.count("\n") == 1  # one line, redrawn in place
    # tqdm's rate: steps per second, or seconds per step on a slow (loaded) machine; a frame
    # shorter than the one before it is padded with spaces that blank the rest of the line
    done = r"stateaware\.auto: 100%\|#+\| 17/17 \[\d\d:\d\d<00:00, +[\d.]+(?:step/s|s/step)\] *\n"
    assert re.fullmatch(done, frames[-1])
    # an ETA while it runs (the budget loop's three steps join the total once profiling ends)
    assert any(re.search(r" 2/14 \[\d\d:\d\d<\d\d:\d\d", f) for f in frames)
    for note in ["the model's own eager step", "segment 2/3 '1': offload", "segment 2/3 '1': a replay blind"]:
        assert any(note in f for f in frames), note
    assert any("budget loop: measuring plan 1 of at most 3" in f for f in frames)


def test_without_tqdm_the_line_is_rewritten_in_place_with_its_own_eta(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    auto.profile(_model(), (torch.randn(4, 8),), repeats=1)
    monkeypatch.undo()
    frames = [f.rstrip() for f in stream.getvalue().split("\r") if f]
    assert frames[:2] == [
        "stateaware.auto: profiling: 0/2 [0:00 elapsed, ETA ?]",
        "stateaware.auto: profiling: 0/2 [0:00 elapsed, ETA ?] the model's own eager step",
    ]
    assert re.fullmatch(r"stateaware\.auto: profiling: 14/14 \[\d+:\d\d elapsed, ETA 0:00\]\n?", frames[-1])
    assert stream.getvalue().endswith("\n") and stream.getvalue().count("\n") == 1
    counts = [int(m[1]) for f in frames if (m := re.search(r": (\d+)/\d+ \[", f))]
    assert counts == sorted(counts) and set(range(15)) <= set(counts)  # every measurement counted, in order


@pytest.mark.parametrize(("stream", "progress"), [(_Terminal(), False), (io.StringIO(), None)])
def test_silent_when_told_or_when_stderr_is_not_a_terminal(monkeypatch, stream, progress):
    x = torch.randn(4, 8)
    assert _stderr_of(monkeypatch, stream, lambda: auto.profile(_model(), (x,), repeats=1, progress=progress)) == ""


def test_progress_on_a_pipe_when_asked_and_a_bad_value_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    out = _stderr_of(monkeypatch, io.StringIO(), lambda: auto.profile(_model(), (torch.randn(4, 8),), progress=True))
    assert "stateaware.auto: profiling: 14/14" in out
    with pytest.raises(ValueError, match=r"^progress='yes'; valid values are None .*True, False$"):
        auto.profile(_model(), (torch.randn(4, 8),), progress="yes")
