"""Declaring a module works whatever its buffers view.

torchvision's Swin block registers ``relative_position_index`` as a view (``.flatten()``
of a tensor no module holds), so it could be neither declared nor excluded. A declared
module's view buffers are now preserved by their bytes, through the view.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from stateaware.torch_replay import UndeclaredStateError, checkpoint

swin = pytest.importorskip("torchvision.models.swin_transformer")


def _block() -> nn.Module:
    torch.manual_seed(0)
    block = swin.SwinTransformerBlock(dim=32, num_heads=2, window_size=[4, 4], shift_size=[2, 2])
    return block.train()


def _grads(block: nn.Module, x: torch.Tensor, checkpointed: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = x.clone().requires_grad_()
    block.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # stochastic depth and dropout draw from torch's RNG
    out = checkpoint(block, x, state=[block]) if checkpointed else block(x)
    (out * torch.arange(out.numel()).reshape(out.shape)).sum().backward()
    assert x.grad is not None
    return x.grad, [p.grad.clone() for p in block.parameters() if p.grad is not None]


def test_swin_block_declares_its_view_buffer_and_matches_eager_bit_for_bit() -> None:
    block = _block()
    assert block.attn.relative_position_index._base is not None  # the premise: a view buffer
    x = torch.randn(2, 8, 8, 32)
    eager_x, eager_p = _grads(block, x, checkpointed=False)
    ours_x, ours_p = _grads(block, x, checkpointed=True)
    assert torch.equal(eager_x, ours_x)
    assert len(eager_p) == len(ours_p) > 0
    assert all(torch.equal(a, b) for a, b in zip(eager_p, ours_p, strict=True))


class _Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("acc", torch.ones(2, 3).flatten())  # a view of an unheld base

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.acc.sin()
        self.acc.add_(1.0)  # the forward writes its state: a replay must see the old bytes
        return y


def _run_counter() -> tuple[torch.Tensor, torch.Tensor, _Counter]:
    m = _Counter()
    x = torch.randn(6, requires_grad=True)
    checkpoint(m, x, state=[m]).sum().backward()
    assert x.grad is not None
    return x.grad, m.acc, m


def test_a_written_view_buffer_is_replayed_from_its_forward_bytes() -> None:
    grad, acc, m = _run_counter()
    assert torch.equal(grad, torch.ones(6).sin())  # eager: d/dx (x * sin(acc_before))
    assert torch.equal(acc, torch.full((6,), 2.0))  # written once
    assert m.acc._base is not None  # still the same view after the replay


class _NoOp:
    """An engine that preserves nothing: the view-buffer mechanism switched off."""

    kind, retained_bytes = "whole", 0

    def __init__(self, live: torch.Tensor, name: str) -> None:
        self.live, self.name = live, name

    def lives(self) -> list[torch.Tensor]:
        return [self.live]

    def enter(self) -> None: ...

    def exit(self) -> None: ...

    def owns_storage(self, ptr: int) -> bool:
        return False


def test_negative_control_without_view_preservation_the_gradient_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("stateaware.torch_replay.checkpoint")
    real = module.make_engine

    def off(mode, live, name, rows):  # type: ignore[no-untyped-def]
        return _NoOp(live, name) if live._base is not None else real(mode, live, name, rows)

    monkeypatch.setattr(module, "make_engine", off)
    grad, _, _ = _run_counter()
    assert torch.equal(grad, torch.full((6,), 2.0).sin())  # the replay read the written buffer


def test_undeclared_swin_block_is_still_an_error_not_a_wrong_gradient() -> None:
    block = _block()
    x = torch.randn(1, 8, 8, 32, requires_grad=True)
    out = checkpoint(block, x)  # reads its parameters only: no state to declare
    block.attn.relative_position_index.data = block.attn.relative_position_index.data.flip(0).clone()
    with pytest.raises(UndeclaredStateError, match="relative_position_index"):
        out.sum().backward()


def test_two_declared_aliases_of_one_storage_are_refused() -> None:
    m = nn.Module()
    base = torch.zeros(4, 2)
    m.register_buffer("a", base.flatten())
    m.register_buffer("b", base[0])
    with pytest.raises(ValueError, match="share storage"):
        checkpoint(lambda x: x * m.a.sum(), torch.ones(1, requires_grad=True), state=[m])
