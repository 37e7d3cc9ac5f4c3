"""A declared module's listing of its state is kept between calls (``checkpoint._module_entries``)
and must follow every change a training loop can make between them: a buffer rebound through
``setattr`` or written into ``_buffers`` directly (no registration hook), a plain tensor
attribute rebound, added or removed, a flipped ``training`` flag. Each checkpointed step is
compared with an eager twin, bitwise."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.torch_replay import checkpoint

checkpoint_module = importlib.import_module("stateaware.torch_replay.checkpoint")

D = torch.float64


class Stats(torch.nn.Module):
    """A registered running mean, a plain-attribute running variance and an optional plain
    step counter, all written by the forward."""

    def __init__(self):
        super().__init__()
        self.register_buffer("rm", torch.zeros(3, dtype=D))
        self.rv = torch.ones(3, dtype=D)

    def forward(self, x):
        if hasattr(self, "steps"):
            self.steps.add_(1)
        y = F.batch_norm(x, self.rm, self.rv, training=self.training, momentum=0.5)
        return torch.tanh(y)


def _change(m: Stats, op: str, value: float) -> None:
    if op == "rebind buffer":
        m.rm = torch.full((3,), value, dtype=D)
    elif op == "write _buffers":
        m._buffers["rm"] = torch.full((3,), value, dtype=D)  # no hook, no __setattr__
    elif op == "rebind plain":
        m.rv = torch.full((3,), 1.0 + abs(value), dtype=D)
    elif op == "add plain":
        m.steps = torch.zeros(1, dtype=D)
    elif op == "drop plain":
        m.__dict__.pop("steps", None)
    elif op == "flip training":
        m.train(not m.training)


OPS = ["rebind buffer", "write _buffers", "rebind plain", "add plain", "drop plain", "flip training"]


def _state(m: Stats) -> list[torch.Tensor]:
    return [m.rm.clone(), m.rv.clone()] + ([m.steps.clone()] if hasattr(m, "steps") else [])


def _train(ops: list[tuple[str, float]]) -> None:
    eager, ours = Stats(), Stats()
    x = torch.linspace(-2, 3, 12, dtype=D).reshape(4, 3)
    for step, (op, value) in enumerate([("none", 0.0), *ops]):
        for m in (eager, ours):
            _change(m, op, value)
        xs = [x.clone().mul_(step + 1).requires_grad_() for _ in range(2)]
        eager(xs[0]).sum().backward()
        checkpoint(ours, xs[1], state=[ours]).sum().backward()
        assert torch.equal(xs[0].grad, xs[1].grad), op
        for a, b in zip(_state(eager), _state(ours), strict=True):
            assert torch.equal(a, b), op


@settings(max_examples=12, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.floats(-2, 2)), min_size=1, max_size=6))
def test_declared_module_listing_follows_every_change(ops):
    _train(ops)


@pytest.mark.parametrize("checked", [True, False])
def test_a_counter_added_after_the_first_call_is_declared(monkeypatch, checked):
    # Negative control (checked=False): with the check that keeps the listing fresh switched
    # off, the counter added after the first call is not in the declaration, so the replay
    # counts the step a second time.
    if not checked:
        monkeypatch.setattr(checkpoint_module, "_unchanged", lambda now, then: True)
    m = Stats()
    for _ in range(2):
        x = torch.linspace(-2, 3, 12, dtype=D).reshape(4, 3).requires_grad_()
        checkpoint(m, x, state=[m]).sum().backward()
        if not hasattr(m, "steps"):
            m.steps = torch.zeros(1, dtype=D)
    assert m.steps.item() == (1.0 if checked else 2.0)
