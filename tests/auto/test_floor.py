"""The floor: every plan torch's checkpoint can run, ``stateaware.auto`` can.

Given torch's checkpoint-every-block measured peak as the budget, or ``"0%"`` (the least
memory the model reaches), ours' measured step peak is at most torch's; where the last
segment's retention is what sets the peak, ours recomputes it too. Peaks are byte counts measured by the same
function (``stateaware.auto.step_peak_bytes``), deterministic on a CPU, not timings.
The first model is stateless; the BatchNorm one (torchvision's resnet18) has running
statistics, which ours keeps exact (updated once per step, torch's twice) with no
snapshot of them. On
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


def _resnet18():
    # torchvision's resnet18 (random init) at 32x32, batch 4: its running statistics are a
    # large share of what a replay retains (torch's every-block peak is within 30 KB of
    # the plans that recompute every block but the last)
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    return model, (torch.randn(4, 3, 32, 32),), [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]


def test_a_batch_norm_model_reaches_torchs_peak_and_stays_exact():
    # torch's checkpoint updates the running statistics twice (forward and replay); ours
    # once, and without a snapshot of them (NOTE [ Running statistics kept by no
    # snapshot ]), so its least plan retains no more than torch's every-block plan.
    make = _resnet18
    torch_peak, least, at_torchs = _fitted(make)
    assert least.measured_peak_bytes <= torch_peak
    assert at_torchs.feasible and at_torchs.measured_peak_bytes <= torch_peak

    model, inputs, _ = make()
    eager = copy.deepcopy(model)
    assert least.policy.count("eager") < len(least.policy) - 1  # several blocks replay their BatchNorms
    auto.apply(model, least)
    # one training step of each (the loss squares the logits: gradients flow through every statistic)
    for net in (model, eager):
        net.train()
        net(*inputs).square().mean().backward()
    for (name, ours), theirs in zip(model.named_parameters(), eager.parameters(), strict=True):
        assert torch.equal(ours.grad, theirs.grad), name
    for (name, ours), theirs in zip(model.named_buffers(), eager.buffers(), strict=True):
        assert torch.equal(ours, theirs), name  # running statistics and num_batches_tracked: once
    assert all(int(b) == 1 for n, b in model.named_buffers() if n.endswith("num_batches_tracked"))
