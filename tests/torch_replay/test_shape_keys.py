"""What vouches for one call must not vouch for a call that can take another branch.

Rule 6 learns a segment's reads on the first call of a call shape and re-reads version
counters after (``_learned_reads``). A segment's Python code can branch on what its
arguments look like — a batch size, a dtype, ``requires_grad``, a float or a tuple of
sizes — and read or write other state on the other branch; so those are part of the call
shape, and a call with new ones is recorded again.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import stateaware.auto as auto
from stateaware.torch_replay import UndeclaredStateError, _reads, checkpoint, set_read_recording

D = torch.float64


@pytest.fixture(autouse=True)
def _fresh_profiles():
    set_read_recording("first_call")  # also forgets every learned profile
    yield
    set_read_recording("first_call")


class Branchy(nn.Module):
    """BatchNorm on big batches, LayerNorm on small ones (the running statistics are
    written only on the BatchNorm branch)."""

    def __init__(self, width: int = 3, threshold: int = 8):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.bn = nn.BatchNorm1d(width)
        self.ln = nn.LayerNorm(width)
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return self.bn(h) if x.shape[0] >= self.threshold else self.ln(h)


def _batch(n: int, dtype: torch.dtype = D, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def test_a_branch_on_the_batch_size_after_the_first_call_is_caught():
    model = Branchy().double()
    checkpoint(model, _batch(4).requires_grad_()).sum().backward()  # LayerNorm: nothing written
    with pytest.raises(UndeclaredStateError, match=r"bn\.running_mean.*running statistic"):
        checkpoint(model, _batch(12).requires_grad_())  # BatchNorm now: a new call shape, recorded


def test_the_same_batch_size_again_runs_on_the_learned_profile(monkeypatch):
    # The negative control of the test above: the key holds the shape, not the call.
    calls = []
    original = _reads.Touched.__torch_function__
    monkeypatch.setattr(
        _reads.Touched, "__torch_function__", lambda self, f, *a, **k: calls.append(f) or original(self, f, *a, **k)
    )
    model = Branchy().double()
    checkpoint(model, _batch(4, seed=1).requires_grad_()).sum().backward()
    recorded = len(calls)
    assert recorded > 0
    checkpoint(model, _batch(4, seed=2).requires_grad_()).sum().backward()
    assert len(calls) == recorded


def test_a_declared_module_replays_a_batch_size_branch_as_eager_does():
    model = Branchy().double()
    eager = copy.deepcopy(model)
    for n in (4, 12, 4, 12):  # a profile per batch size; each replays the branch its forward took
        x = _batch(n, seed=n).requires_grad_()
        xe = x.detach().clone().requires_grad_()
        checkpoint(model, x, state=[model]).square().sum().backward()
        eager(xe).square().sum().backward()
        assert torch.equal(x.grad, xe.grad)
    assert int(model.bn.num_batches_tracked) == int(eager.bn.num_batches_tracked) == 2
    for (name, a), b in zip(model.state_dict().items(), eager.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    for (name, a), b in zip(model.named_parameters(), eager.parameters(), strict=True):
        assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad), name  # bn: unused, None


class Picky(nn.Module):
    """Counts, in a buffer read nowhere else, the calls whose arguments look a certain way
    (``when`` picks how)."""

    def __init__(self, when: str):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=D))
        self.w = nn.Parameter(torch.ones(3, dtype=D))  # so that every call needs grad
        self.when = when

    def forward(self, x: torch.Tensor, scale: float = 1.0, size: tuple[int, ...] = (1,)) -> torch.Tensor:
        writes = {
            "dtype": x.dtype == torch.float32,
            "requires_grad": not x.requires_grad,
            "float argument": scale > 1.5,
            "tuple argument": size[0] > 1,
            "rank": x.dim() == 2,
        }[self.when]
        if writes:
            self.count.add_(1)
        h = (x * self.w.to(x.dtype)).sum(-1, keepdim=True) * scale
        return torch.tanh(h).expand(*x.shape[:-1], size[0])


def _x(*shape: int, dtype: torch.dtype = D, grad: bool = True) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


# (the first call: takes the branch that writes nothing; the second: the other branch)
SPELLINGS = {
    "dtype": ((_x(4, 3), 1.0, (1,)), (_x(4, 3, dtype=torch.float32), 1.0, (1,))),
    "requires_grad": ((_x(4, 3), 1.0, (1,)), (_x(4, 3, grad=False), 1.0, (1,))),
    "float argument": ((_x(4, 3), 1.0, (1,)), (_x(4, 3), 2.0, (1,))),
    "tuple argument": ((_x(4, 3), 1.0, (1,)), (_x(4, 3), 1.0, (2,))),
    "rank": ((_x(2, 4, 3), 1.0, (1,)), (_x(4, 3), 1.0, (1,))),
}


@pytest.mark.parametrize("when", sorted(SPELLINGS))
def test_every_spelling_of_what_a_branch_can_look_at_is_part_of_the_call_shape(when):
    model = Picky(when)
    first, second = SPELLINGS[when]
    checkpoint(model, *first).sum().backward()
    assert float(model.count) == 0  # the first call took the branch that writes nothing
    with pytest.raises(UndeclaredStateError, match=r"count.*version 0 -> 1"):
        checkpoint(model, *second)


def _train_sizes(mode: str, sizes: list[int], declare: bool) -> list[object]:
    """One step per batch size on a fresh seeded model; per step the error (type and first
    line) or the input's gradient, then the model's buffers."""
    set_read_recording(mode)
    torch.manual_seed(0)
    model = Branchy(threshold=6).double()
    out: list[object] = []
    for step, n in enumerate(sizes):
        x = _batch(n, seed=step).requires_grad_()
        try:
            y = checkpoint(model, x, state=[model]) if declare else checkpoint(model, x)
            y.square().sum().backward()
            out.append(x.grad)
        except UndeclaredStateError as exc:
            out.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    out.extend(model.state_dict().values())
    return out


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(2, 10), min_size=1, max_size=5), declare=st.booleans())
def test_learned_profiles_raise_exactly_when_recording_every_call_does_across_batch_sizes(sizes, declare):
    every, first = _train_sizes("every_call", sizes, declare), _train_sizes("first_call", sizes, declare)
    assert len(every) == len(first)
    for e, f in zip(every, first, strict=True):
        if isinstance(e, str):
            assert e == f
        else:
            assert isinstance(f, torch.Tensor) and torch.equal(e, f)


# --------------------------------------------------------------------------- auto


def _chain() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(Branchy(width=8, threshold=8) for _ in range(3)))


def _recomputing(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """``model`` with every segment recomputed, as profiled on ``x``."""
    card = auto.profile(model, (x,), repeats=1)
    plan = auto.plan(card, "50%")
    return auto.apply(model, dataclasses.replace(plan, policy=("whole",) * card.n_segments))


def test_auto_profiled_at_one_batch_size_refuses_a_branch_it_did_not_see():
    model = _recomputing(_chain(), torch.randn(4, 8))  # profiled on the LayerNorm branch
    with pytest.raises(UndeclaredStateError, match=r"running_mean.*running statistic"):
        model(torch.randn(12, 8)).sum().backward()


def test_auto_trained_at_the_profiled_batch_size_equals_eager():
    # The control of the test above: the branch it profiled trains bit-identically.
    eager = _chain()
    model = _recomputing(_chain(), torch.randn(4, 8))
    for step in range(2):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
        for m in (eager, model):
            m(x).square().sum().backward()
    for (name, a), b in zip(model.state_dict().items(), eager.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    for (name, a), b in zip(model.named_parameters(), eager.parameters(), strict=True):
        assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad), name  # bn: unused, None
