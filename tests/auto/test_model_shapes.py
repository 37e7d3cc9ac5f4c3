"""stateaware.auto on model shapes the field's code has: a tensor shared by every time step,
a segment that writes its own input in place, a segment fed a namedtuple."""

from __future__ import annotations

import collections
import copy

import pytest
import torch
from torch import nn

import stateaware.auto as auto
from stateaware.torch_replay import UndeclaredStateError, checkpoint
from tests import model_zoo as zoo

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_tensor_every_segment_holds_is_named_as_each_segment_holds_it():
    case = zoo.CASES["shared_cell_rnn"]
    model = case.build()
    (xs,), _ = case.example()
    card = auto.profile(model, (xs[:4],), segments=zoo.block_of(case), repeats=1)
    found = card.provenance["auto"]["state"]
    assert [[e["name"] for e in entries] for entries in found] == [[f"steps.{i}.counter"] for i in range(16)]
    # Declared under the model's own name, the same tensor is covered in every segment.
    auto.profile(model, (xs[:4],), segments=zoo.block_of(case), state=[model.steps_taken], repeats=1)
    with pytest.raises(UndeclaredStateError, match=r"segment 'steps.0' writes 'steps.0.counter'"):
        auto.profile(model, (xs[:4],), segments=zoo.block_of(case), state=[model.head], repeats=1)


def _inplace_chain() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 8), nn.Tanh())


def test_a_segment_writing_its_own_input_runs_eagerly_and_the_card_says_why():
    model, x = _inplace_chain(), torch.randn(4, 8)
    # The mechanism it stands on: our checkpoint refuses the in-place write to its input.
    with pytest.raises(UndeclaredStateError, match="argument 0"):
        checkpoint(model[1], model[0](x))
    card = auto.profile(model, (x,), repeats=1)
    assert list(card.segments[1]) == ["eager"]
    assert list(card.provenance["auto"]["eager_only"]) == ["1"]
    assert "argument 0" in card.provenance["auto"]["eager_only"]["1"]
    assert all(len(card.segments[i]) > 1 for i in (0, 2, 3))
    eager = copy.deepcopy(model)
    wrapped, plan = auto.wrap(model, (x,), budget="0%", repeats=1)
    assert plan.policy[1] == "eager"
    eager(x).sum().backward()
    wrapped(x).sum().backward()
    for a, b in zip(eager.parameters(), wrapped.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


Pair = collections.namedtuple("Pair", ["left", "right"])


class PairBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Linear(8, 8)

    def forward(self, pair: Pair) -> Pair:
        return Pair(torch.tanh(self.mix(pair.left) + pair.right), pair.right)


class PairNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(PairBlock() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pair = Pair(x, x * 2)
        for block in self.blocks:
            pair = block(pair)
        return pair.left


def test_a_segment_fed_a_namedtuple_is_profiled_and_trains_as_eager():
    torch.manual_seed(0)
    model, x = PairNet(), torch.randn(4, 8)
    eager = copy.deepcopy(model)
    wrapped, plan = auto.wrap(model, (x,), budget="0%", repeats=1)
    assert plan.card.provenance["auto"]["segments"] == ["blocks.0", "blocks.1", "blocks.2"]
    eager(x).sum().backward()
    wrapped(x).sum().backward()
    for a, b in zip(eager.parameters(), wrapped.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
