"""The contract's last silent edges, each now right or an error.

Every test has a negative control: the mechanism switched off (monkeypatched to a no-op)
and the gradient is then wrong, or no error is raised.
"""

from __future__ import annotations

import importlib
import random
import types

import numpy as np
import pytest
import torch
from torch import nn

from stateaware.torch_replay import ReplayError, UndeclaredStateError, checkpoint

ckpt = importlib.import_module("stateaware.torch_replay.checkpoint")
host_rng = importlib.import_module("stateaware.torch_replay._host_rng")
state_mod = importlib.import_module("stateaware.torch_replay._state")


# --------------------------------------------------------------------------- host RNGs


def _noisy(x: torch.Tensor) -> torch.Tensor:
    scale = random.random() + float(np.random.rand())  # host draws: a replay must see the same ones
    return (x * scale).sin()


def _host_run() -> tuple[torch.Tensor, torch.Tensor, float, float]:
    random.seed(3)
    np.random.seed(3)
    x = torch.randn(5, requires_grad=True)
    out = checkpoint(_noisy, x)
    after = (random.random(), float(np.random.rand()))  # the streams after one forward...
    random.seed(3)
    np.random.seed(3)
    random.random(), np.random.rand()
    eager_next = (random.random(), float(np.random.rand()))
    random.seed(3)
    np.random.seed(3)
    x2 = x.detach().clone().requires_grad_()
    _noisy(x2).sum().backward()
    random.seed(3)
    np.random.seed(3)
    out = checkpoint(_noisy, x)
    random.random(), np.random.rand()  # ...and advance them between forward and backward
    out.sum().backward()
    stream = (random.random(), float(np.random.rand()))
    assert after == eager_next  # the forward advanced each stream once
    assert x.grad is not None and x2.grad is not None
    return x.grad, x2.grad, *stream


def _eager_stream_after_two_draws() -> tuple[float, float]:
    random.seed(3)
    np.random.seed(3)
    for _ in range(2):
        random.random(), np.random.rand()
    return random.random(), float(np.random.rand())


@pytest.mark.parametrize("learned", [False, True], ids=["recorded call", "learned call"])
def test_python_and_numpy_rng_are_replayed_and_advance_once(learned: bool) -> None:
    if learned:
        _host_run()  # the first calls of this shape learn that the segment draws
    ours, eager, py_next, np_next = _host_run()
    assert torch.equal(ours, eager)
    assert (py_next, np_next) == _eager_stream_after_two_draws()  # the replay left the streams as it found them


def test_negative_control_host_rng_not_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_rng.HostRngState, "enter", lambda self: None)
    monkeypatch.setattr(host_rng.HostRngState, "exit", lambda self: None)
    ours, eager, py_next, np_next = _host_run()
    assert not torch.equal(ours, eager)
    assert (py_next, np_next) != _eager_stream_after_two_draws()


# --------------------------------------------------------------------------- train/eval


class _ModeScale(nn.Module):
    """Scales by 2 in training mode, 3 in eval: the same saved tensors in both modes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * (2.0 if self.training else 3.0)).sin()


def _mode_run(layer: type[nn.Module] = nn.Dropout) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 6), layer(), nn.Tanh()).train()
    x = torch.randn(4, 6)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.manual_seed(1)
    net(xa).sum().backward()
    torch.manual_seed(1)
    out = checkpoint(net, xb)  # reached, not declared (it has no buffers to declare)
    net.eval()  # toggled between forward and backward: the replay must still run in train mode
    out.sum().backward()
    assert not net.training and not net[1].training  # the outside mode is put back
    net.train()
    assert xa.grad is not None and xb.grad is not None
    return xa.grad, xb.grad


@pytest.mark.parametrize("layer", [nn.Dropout, _ModeScale])
def test_replay_runs_in_the_mode_the_forward_saw(layer: type[nn.Module]) -> None:
    eager, ours = _mode_run(layer)
    assert torch.equal(eager, ours)


def test_negative_control_modes_not_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_mod.TrainingModes, "enter", lambda self: None)
    eager, ours = _mode_run(_ModeScale)
    assert not torch.equal(eager, ours)  # silently wrong: same saved tensors, other mode
    with pytest.raises(ReplayError):  # dropout in eval saves fewer tensors: torch's count error
        _mode_run(nn.Dropout)


def test_a_module_in_a_closure_is_reached_too() -> None:
    torch.manual_seed(0)
    drop = nn.Dropout(0.5)
    x = torch.randn(8, requires_grad=True)
    torch.manual_seed(2)
    out = checkpoint(lambda t: drop(t).exp(), x)
    drop.eval()
    out.sum().backward()
    xa = x.detach().clone().requires_grad_()
    drop.train()
    torch.manual_seed(2)
    drop(xa).exp().sum().backward()
    assert x.grad is not None and xa.grad is not None
    assert torch.equal(x.grad, xa.grad)


# --------------------------------------------------------------------------- .data and rebinding


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.scale).sin()


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.scale.data.mul_(3.0),  # in place through an alias: no version bump
        lambda m: setattr(m.scale, "data", torch.full((4,), 5.0)),  # a new storage
        lambda m: setattr(m, "scale", torch.zeros(4)),  # the buffer rebound
    ],
    ids=["data-inplace", "data-rebound", "buffer-rebound"],
)
def test_an_undeclared_read_changed_outside_is_an_error_at_the_replay(change) -> None:  # type: ignore[no-untyped-def]
    m = _Scaled()
    out = checkpoint(m, torch.randn(4, requires_grad=True))
    change(m)
    with pytest.raises(UndeclaredStateError, match="scale"):
        out.sum().backward()


class _NoBindings:
    """``Bindings`` switched off: the replay sees the modules as they are at backward."""

    def __init__(self, modules: object) -> None:
        pass

    def enter(self) -> None:
        pass

    def exit(self) -> None:
        pass


def test_negative_control_without_the_witnesses_the_gradient_is_silently_wrong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both mechanisms off: the witnesses (the error) and the forward's bindings (Rule 10,
    # which alone would replay with the forward's buffer and hide the rebinding).
    monkeypatch.setattr(ckpt, "_check_reads_unchanged", lambda frame: None)
    monkeypatch.setattr(ckpt, "Bindings", _NoBindings)
    m = _Scaled()
    x = torch.randn(4, requires_grad=True)
    out = checkpoint(m, x)
    m.scale = torch.zeros(4)
    out.sum().backward()  # no error
    assert x.grad is not None
    assert not torch.equal(x.grad, (x.detach() * 2.0).cos() * 2.0)  # eager's gradient


def test_unchanged_reads_raise_nothing_and_a_declared_rebinding_is_fine() -> None:
    m = _Scaled()
    x = torch.randn(4, requires_grad=True)
    out = checkpoint(m, x, state=[m])
    m.scale = torch.zeros(4)  # declared: the replay reinstates the forward's buffer
    out.sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, (x.detach() * 2.0).cos() * 2.0)
    out = checkpoint(m, x)  # undeclared but unchanged
    out.sum().backward()


# --------------------------------------------------------------------------- containers under auto


class _Remembers(nn.Module):
    """Keeps state in a Python container of tensors, written in forward."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.kind = kind
        self.history: object = {"list": [], "dict": {}, "object": types.SimpleNamespace(last=torch.zeros(8))}[kind]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        summary = x.detach().mean(0)
        if isinstance(self.history, list):
            self.history.append(summary)
            memory = torch.stack(self.history).sum(0)
        elif isinstance(self.history, dict):
            self.history[len(self.history)] = summary
            memory = sum(self.history.values())
        else:
            self.history.last.add_(summary)  # type: ignore[attr-defined]  # in place, inside a plain object
            memory = self.history.last  # type: ignore[attr-defined]
        return torch.tanh(self.lin(x) + memory)


def _remembering_model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), _Remembers(kind), nn.Linear(8, 8))


@pytest.mark.parametrize("kind", [("list", "list"), ("dict", "dict"), ("object", "SimpleNamespace")], ids=str)
def test_auto_refuses_a_container_of_tensors_written_in_forward_naming_it(kind: tuple[str, str]) -> None:
    import stateaware.auto as auto

    with pytest.raises(ValueError, match=rf"2\.history \(a {kind[1]} of tensors written in forward\)"):
        auto.profile(_remembering_model(kind[0]), (torch.randn(4, 8),), repeats=1)


def test_negative_control_without_container_discovery_auto_accepts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import stateaware.auto as auto

    discover = importlib.import_module("stateaware.auto.discover")
    monkeypatch.setattr(discover, "_containers", lambda model, root: {})
    card = auto.profile(_remembering_model("list"), (torch.randn(4, 8),), repeats=1)  # silently accepted
    assert "history" not in repr(card.provenance["auto"]["state"])
