"""Errors at the checkpoint's boundary are ours, naming cause and fix.

Each test has a negative control: with our check switched off, the user gets torch's
(or Python's) unrelated error instead.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Iterator

import pytest
import torch

from stateaware.torch_replay import Region, checkpoint

ckpt = importlib.import_module("stateaware.torch_replay.checkpoint")


def _generator_segment(x: torch.Tensor) -> Iterator[torch.Tensor]:
    for k in range(2):
        yield (x * k).sin()


def test_a_segment_returning_a_generator_is_refused_at_the_call() -> None:
    with pytest.raises(TypeError, match=r"returned a generator.*Tip: return a tuple"):
        checkpoint(_generator_segment, torch.ones(3, requires_grad=True))


def test_negative_control_a_generator_escapes_the_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    off = types.SimpleNamespace(isgenerator=lambda obj: False, isasyncgen=lambda obj: False)
    monkeypatch.setattr(ckpt, "inspect", off)
    out = checkpoint(_generator_segment, torch.ones(3, requires_grad=True))  # no error at the call...
    assert inspect.isgenerator(out)  # ...and its body would run outside the checkpoint, unchecked


def test_negative_region_rows_are_our_value_error() -> None:
    buf = torch.zeros(4, 2)
    with pytest.raises(ValueError, match=r"Region.rows holds -1, outside 0..3.*rows % tensor.shape\[0\]"):
        Region(buf, torch.tensor([0, -1]))
    with pytest.raises(ValueError, match="holds 4"):
        Region(buf, torch.tensor([4]))
    Region(buf, torch.tensor([0, 3]))  # in range: accepted


def test_negative_control_unchecked_rows_reach_index_select() -> None:
    buf = torch.zeros(4, 2)
    region = object.__new__(Region)  # constructed without __post_init__: the check switched off
    object.__setattr__(region, "tensor", buf)
    object.__setattr__(region, "rows", torch.tensor([-1]))
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(IndexError, match="index out of range"):
        checkpoint(lambda t: (buf[0] + t).sum(), x, state=[region], preserve="region")


def _segment(x: torch.Tensor) -> torch.Tensor:
    return x.sin().sum()


@pytest.mark.parametrize("transform", ["grad", "vmap"])
def test_torch_func_transforms_are_refused_with_our_message(transform: str) -> None:
    x = torch.randn(3)
    with pytest.raises(RuntimeError, match=r"under a torch.func transform.*Tip:"):
        if transform == "grad":
            torch.func.grad(lambda t: checkpoint(_segment, t))(x)
        else:
            torch.func.vmap(lambda t: checkpoint(_segment, t))(x.unsqueeze(1).requires_grad_())


def test_negative_control_torch_func_without_our_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckpt.torch._C._functorch, "peek_interpreter_stack", lambda: None)
    with pytest.raises(RuntimeError) as raised:
        torch.func.grad(lambda t: checkpoint(_segment, t))(torch.randn(3))
    assert "torch.func transform" not in str(raised.value)  # torch's own error, not ours
