"""stateaware.auto: segments chosen by block class, by predicate and by ``"repeated"``.

torchvision's ResNet-18 at a toy size (``tests/model_zoo.py``) is wrapped with its blocks
selected each way and no state declared, then trained two steps beside an eager deep
copy: loss, gradients, weights, buffers (BatchNorm statistics and counters) and the RNG
state must be equal byte for byte. The other model families train in
``tests/auto/test_model_matrix.py``; here the selection rules are checked on them.
"""

from __future__ import annotations

import copy

import pytest
import torch

import stateaware.auto as auto
from stateaware.auto.segment import select_segments
from tests import model_zoo as zoo

torchvision = pytest.importorskip("torchvision")
timm = pytest.importorskip("timm")

from torchvision.models.resnet import BasicBlock  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def _resnet18() -> torch.nn.Module:
    return zoo.CASES["resnet18"].build()


def _wrap_and_compare(model: torch.nn.Module, segments: object, expected: list[str]) -> None:
    case = zoo.CASES["resnet18"]
    eager = copy.deepcopy(model)
    (x,), _ = case.example()
    wrapped, plan = auto.wrap(model, (x,), budget="0%", segments=segments, repeats=1)
    assert plan.card.provenance["auto"]["segments"] == expected
    assert any(option != "eager" for option in plan.policy), plan.policy  # the least peak recomputes
    zoo.assert_identical(zoo.train(case, eager), zoo.train(case, wrapped))


RESNET_BLOCKS = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]


@pytest.mark.parametrize(
    "segments",
    [BasicBlock, lambda name, module: isinstance(module, BasicBlock), "repeated"],
    ids=["class", "predicate", "repeated"],
)
def test_resnet18_by_block_type_trains_bit_identically(segments):
    _wrap_and_compare(_resnet18(), segments, RESNET_BLOCKS)


def test_selection_rules_on_model_families():
    resnet = _resnet18()
    assert select_segments(resnet, None) == RESNET_BLOCKS  # not a Sequential: "repeated"
    assert select_segments(resnet, (BasicBlock, torch.nn.Linear)) == [*RESNET_BLOCKS, "fc"]
    # outermost match wins: a block's own convolutions are not segments beside it
    assert select_segments(resnet, (BasicBlock, torch.nn.Conv2d)) == ["conv1", *RESNET_BLOCKS]
    chain = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    assert select_segments(chain, None) == ["0", "1"]  # an nn.Sequential's children, unchanged
    assert select_segments(resnet, ["layer1", "fc"]) == ["layer1", "fc"]
    efficientnet, vit = zoo.CASES["efficientnet_b0"], zoo.CASES["timm_vit"]
    assert select_segments(efficientnet.build(), "repeated") == [f"features.{i}" for i in range(9)]
    assert select_segments(vit.build(), zoo.block_of(vit)) == ["blocks.0", "blocks.1"]


def test_nothing_matching_is_one_message_listing_what_the_model_has():
    resnet = _resnet18()
    with pytest.raises(ValueError, match=r"segments=LSTM matches no submodule of ResNet; it has the classes Conv2d"):
        select_segments(resnet, torch.nn.LSTM)
    with pytest.raises(ValueError, match=r"predicate matches no submodule.*containers.*layer1 \(2\)"):
        select_segments(resnet, lambda name, module: False)
    flat = torch.nn.Module()
    flat.a, flat.b = torch.nn.Linear(2, 2), torch.nn.ReLU()
    with pytest.raises(ValueError, match=r"'repeated' matches no submodule of Module.*containers .*: none"):
        auto.profile(flat, (torch.randn(2, 2),))
    with pytest.raises(ValueError, match=r"a string must be 'repeated'.*segments=\['layer1'\]"):
        select_segments(resnet, "layer1")
    with pytest.raises(TypeError, match="must return a bool"):
        select_segments(resnet, lambda name, module: None)
    with pytest.raises(TypeError, match="not an nn.Module subclass"):
        select_segments(resnet, int)
