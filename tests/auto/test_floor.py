"""The floor: every plan torch's checkpoint can run, ``stateaware.auto`` can.

Given torch's checkpoint-every-block measured peak as the budget, or ``"0%"`` (the least
memory the model reaches), ours' measured step peak is at most torch's; where the last
segment's retention is what sets the peak, ours recomputes it too. Peaks are byte counts measured by the same
function (``stateaware.auto.step_peak_bytes``), deterministic on a CPU, not timings.
The model is stateless, so ours preserves nothing that torch's does not keep either. On
the bench's models (a GPT-2, a ViT) keeping the last block eager can be truly least (it
keeps no RNG stash and its recompute would be held at the same moment); the floor is
torch's peak there, not a policy.
"""

from __future__ import annotations

import copy
import functools
import types

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import stateaware.auto as auto

pytestmark = pytest.mark.usefixtures("one_thread")


class HeadAtEnd(nn.Module):
    """A stem, repeated blocks, and a head whose wide activations exist at the forward's
    end only: the all-eager step alone cannot tell those bytes from bytes alive
    throughout, which made a plan keeping the last block eager look cheapest."""

    def __init__(self, width: int = 128, blocks: int = 4, head: int = 8) -> None:
        super().__init__()
        self.stem = nn.Linear(width, width)
        self.body = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh()) for _ in range(blocks)
        )
        self.head = nn.Sequential(nn.Linear(width, head * width), nn.Tanh(), nn.Linear(head * width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.body:
            x = block(x)
        return self.head(x)


def _head_at_end():
    torch.manual_seed(0)
    return HeadAtEnd(), (torch.randn(256, 128),), [f"body.{i}" for i in range(4)]


def _torch_every_block(model: nn.Module, segments: list[str]) -> nn.Module:
    for name in segments:
        block = model.get_submodule(name)
        block.forward = functools.partial(checkpoint, types.MethodType(type(block).forward, block), use_reentrant=False)
    return model


def _fitted(make):
    model, inputs, segments = make()
    model.train()
    torch_peak = auto.step_peak_bytes(_torch_every_block(copy.deepcopy(model), segments), inputs)
    card = auto.profile(model, inputs, segments=segments, repeats=1)
    return torch_peak, auto.fit_applied(model, inputs, card, "0%"), auto.fit_applied(model, inputs, card, torch_peak)


def test_the_least_plan_recomputes_the_last_segment_too():
    torch_peak, least, at_torchs = _fitted(_head_at_end)
    assert "eager" not in least.policy  # every segment, the last included
    assert least.measured_peak_bytes <= torch_peak
    assert at_torchs.measured_peak_bytes <= torch_peak  # given torch's peak as the budget: not refused
