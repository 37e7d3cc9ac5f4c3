"""``preserve="stats"``: running statistics that only training-mode norms use keep no snapshot.

NOTE [ Running statistics kept by no snapshot ] in ``stateaware.torch_replay.running_stats``.
Exactness is bitwise against the same module run eagerly (one thread); "no snapshot" is
the bytes a forward leaves allocated, measured exactly on the CPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from stateaware.cost_runtime.measure import allocated_window
from stateaware.torch_replay import ReplayError, checkpoint, set_read_recording

pytestmark = pytest.mark.usefixtures("one_thread")


def _norm(kind: str, channels: int, momentum: float | None) -> nn.Module:
    if kind == "batch1d":
        return nn.BatchNorm1d(channels, momentum=momentum)
    if kind == "batch2d":
        return nn.BatchNorm2d(channels, momentum=momentum)
    return nn.InstanceNorm2d(channels, momentum=momentum, affine=True, track_running_stats=True)


def _block(kind: str, channels: int, momentum: float | None) -> nn.Module:
    first = nn.Linear(3, channels) if kind == "batch1d" else nn.Conv2d(3, channels, 1)
    return nn.Sequential(first, _norm(kind, channels, momentum), nn.Tanh(), _norm(kind, channels, momentum))


@settings(max_examples=12, deadline=None)
@given(
    kind=st.sampled_from(["batch1d", "batch2d", "instance2d"]),
    channels=st.integers(1, 6),
    batch=st.integers(2, 5),
    momentum=st.sampled_from([0.1, 0.5, None]),
    seed=st.integers(0, 2**16),
)
def test_gradients_and_statistics_equal_eagers_bitwise(kind, channels, batch, momentum, seed):
    # Each step: our forward, then an eager forward of the same block (its statistics move
    # before our replay), then the backward; the replay must neither read nor write them.
    torch.manual_seed(seed)
    ours = _block(kind, channels, momentum)
    eager = copy.deepcopy(ours)
    for _ in range(3):  # the first call of the shape is recorded, the later ones learned
        x = torch.randn(batch, 3) if kind == "batch1d" else torch.randn(batch, 3, 2, 3)
        y = checkpoint(ours, x, state=[ours], preserve="stats")
        ours(x * 2)
        y.square().sum().backward()
        y_eager = eager(x)
        eager(x * 2)
        y_eager.square().sum().backward()
        assert torch.equal(y, y_eager)
        for a, b in zip(ours.parameters(), eager.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad)
        for a, b in zip(ours.buffers(), eager.buffers(), strict=True):
            assert torch.equal(a, b)  # running statistics and num_batches_tracked: updated once per call


def _forward_bytes(block: nn.Module, x: torch.Tensor, preserve: str) -> int:
    """Bytes a checkpointed forward leaves allocated (its output and what it keeps)."""
    box = {}

    def forward() -> None:
        box["y"] = checkpoint(block, x, state=[block], preserve=preserve)

    _, end = allocated_window(forward, "cpu")
    box["y"].sum().backward()
    return end


def test_a_running_statistic_keeps_no_snapshot_its_counter_does():
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.BatchNorm2d(8))
    x = torch.randn(4, 3, 6, 6)
    statistics = sum(b.numel() * b.element_size() for n, b in block.named_buffers() if "running" in n)
    for recording in ("first_call", "every_call"):  # learned calls, and a recorded call each time
        set_read_recording(recording)
        try:
            for _ in range(2):
                whole, stats = _forward_bytes(block, x, "whole"), _forward_bytes(block, x, "stats")
                assert whole - stats == statistics == 2 * 2 * 8 * 4  # num_batches_tracked keeps its 8 bytes
        finally:
            set_read_recording("first_call")


class ReadsItsStatistic(nn.Module):
    """Normalises in training mode, then scales by its running mean: the output reads it."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.register_buffer("running_mean", torch.randn(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(x, self.running_mean, self.running_var, training=True, momentum=0.5)
        return y * self.running_mean.clone()


def test_a_statistic_the_output_reads_keeps_its_snapshot_and_replays_exactly():
    torch.manual_seed(0)
    ours = ReadsItsStatistic(5)
    eager = copy.deepcopy(ours)
    for _ in range(3):
        x = torch.randn(4, 5, requires_grad=True)
        y = checkpoint(ours, x, state=[ours], preserve="stats")
        ours(x.detach() + 1)  # moves the statistic before the replay
        (g,) = torch.autograd.grad(y.square().sum(), x)
        y_eager = eager(x)
        eager(x.detach() + 1)
        (g_eager,) = torch.autograd.grad(y_eager.square().sum(), x)
        assert torch.equal(g, g_eager)
        assert torch.equal(ours.running_mean, eager.running_mean)
        assert torch.equal(ours.running_var, eager.running_var)
    x = torch.randn(4, 5, requires_grad=True)
    # the mean is snapshotted (it is read), the variance is not (only the norm uses it)
    assert _forward_bytes(ours, x, "whole") - _forward_bytes(ours, x, "stats") == 5 * 4


class SometimesShifts(nn.Module):
    """A BatchNorm whose statistic a Python flag (not part of a call shape) also writes."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(3)
        self.shift = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(x)
        if self.shift:
            self.bn.running_mean.add_(1.0)
        return y


def test_a_learned_statistic_written_in_place_is_refused_at_the_forward():
    module = SometimesShifts()
    x = torch.randn(4, 3, requires_grad=True)
    checkpoint(module, x, state=[module], preserve="stats").sum().backward()  # learned: a statistic only
    module.shift = True
    with pytest.raises(ReplayError, match=r"running_mean is kept by no snapshot .* wrote it in place"):
        checkpoint(module, x, state=[module], preserve="stats")
