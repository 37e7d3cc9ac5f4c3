"""stateaware.torch_replay.checkpoint inside a ``torch.compile``d model (CPU backends).

Our checkpoint is a graph break: the code around it is compiled, the segment and its
replay run eagerly (the replay is driven by saved-tensor hooks whose Python state
Dynamo cannot guard on without recompiling every call). These tests pin that a compiled
model gives eager's gradients and declared-state bytes, and that the number of compiled
graphs stops growing after the first step.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.utils.checkpoint as native
from torch._dynamo.utils import counters

from stateaware.torch_replay import checkpoint

F64 = torch.float64


class Net(torch.nn.Module):
    """Compiled prologue and epilogue around a checkpointed block that updates a buffer."""

    def __init__(self, how: str):
        super().__init__()
        torch.manual_seed(0)
        self.how = how
        self.inp, self.out = torch.nn.Linear(6, 8, dtype=F64), torch.nn.Linear(8, 3, dtype=F64)
        self.block = torch.nn.Sequential(
            torch.nn.Linear(8, 8, dtype=F64), torch.nn.Tanh(), torch.nn.Linear(8, 8, dtype=F64)
        )
        self.register_buffer("mem", torch.linspace(-1, 1, 8, dtype=F64))

    def segment(self, h):
        r = self.block(h + self.mem)
        with torch.no_grad():
            self.mem.mul_(0.5).add_(r.mean(0) * 0.25)
        return torch.nn.functional.dropout(r, 0.2, training=True)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        if self.how == "ours":
            h = checkpoint(self.segment, h, state=[self.mem])
        elif self.how == "native":
            h = native.checkpoint(self.segment, h, use_reentrant=False)
        else:
            h = self.segment(h)
        return self.out(h).square().sum()


def _train(how: str, backend: str | None, steps: int = 3):
    net = Net(how)
    run = torch.compile(net, backend=backend) if backend else net
    torch.manual_seed(1)
    grads, graphs = [], []
    for _ in range(steps):
        x = torch.randn(5, 6, dtype=F64)
        net.zero_grad()
        run(x).backward()
        grads.append([p.grad.clone() for p in net.parameters()])
        graphs.append(counters["stats"]["unique_graphs"])
    return grads, net.mem.clone(), graphs


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_aot_eager_matches_eager_exactly_and_compiles_a_bounded_number_of_graphs():
    ref_grads, ref_mem, _ = _train("eager", None)
    grads, mem, graphs = _train("ours", "aot_eager")
    for got, want in zip(grads, ref_grads, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(mem, ref_mem)  # the segment's buffer write happened once per step
    assert graphs[0] >= 1 and graphs[-1] == graphs[0]  # no recompiles after the first step


@pytest.mark.slow
def test_inductor_matches_eager_within_float64_reordering():
    # Inductor fuses and reorders the compiled prologue/epilogue, so gradients differ from
    # eager by float64 rounding only (1e-12 absolute on values of order 1); the segment
    # itself runs eagerly, so the buffer bytes are exact.
    ref_grads, ref_mem, _ = _train("eager", None)
    grads, mem, graphs = _train("ours", "inductor")
    for got, want in zip(grads, ref_grads, strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(mem, ref_mem, rtol=1e-12, atol=1e-12)
    assert graphs[-1] == graphs[0]


def test_fullgraph_refuses_the_graph_break():
    # Documented limit: the checkpoint runs eagerly, which fullgraph=True forbids.
    lin = torch.nn.Linear(4, 4, dtype=F64)

    def model(x):
        return checkpoint(lambda h: torch.tanh(lin(h)), x * 2).sum()

    run = torch.compile(model, backend="aot_eager", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported):
        run(torch.randn(2, 4, dtype=F64, requires_grad=True))
