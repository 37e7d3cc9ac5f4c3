"""stateaware.auto: segments chosen by block class, by predicate and by ``"repeated"``.

Real model families at toy sizes (random init, nothing downloaded): torchvision ResNet-18
and EfficientNet-B0 (BatchNorm; stochastic depth and dropout), a timm ViT (drop path).
Each is wrapped with no state declared and trained two steps beside an eager deepcopy;
loss, gradients, weights, buffers (BatchNorm statistics and counters) and the RNG state
must be equal byte for byte.
"""

from __future__ import annotations

import copy

import pytest
import torch

import stateaware.auto as auto
from stateaware.auto.segment import select_segments

torchvision = pytest.importorskip("torchvision")
timm = pytest.importorskip("timm")

from torchvision.models.resnet import BasicBlock  # noqa: E402

BATCH, SIDE, CLASSES = 2, 32, 10


@pytest.fixture(autouse=True)
def one_thread():
    # Profiling times segments; one intra-op thread keeps a shared machine's stalls out.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _resnet18() -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None, num_classes=CLASSES)


def _efficientnet_b0() -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.efficientnet_b0(weights=None, num_classes=CLASSES)


def _vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=SIDE,
        patch_size=8,
        depth=2,
        embed_dim=32,
        num_heads=2,
        drop_path_rate=0.1,
        num_classes=CLASSES,
    )


def _step_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)  # its own generator: the global RNG is what we compare
    return torch.randn(BATCH, 3, SIDE, SIDE, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g)


def _train(model: torch.nn.Module, steps: int = 2) -> dict[str, object]:
    """``steps`` SGD steps in train mode; everything training can change, after them."""
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1234)
    losses = []
    for step in range(steps):
        x, y = _step_batch(step)
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.detach().clone())
        if step < steps - 1:
            optimizer.step()
        else:  # the last step's gradients are compared before the update, then it is taken
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            optimizer.step()
    return {
        "losses": losses,
        "grads": grads,
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "rng": torch.get_rng_state(),
    }


def _assert_identical(eager: dict, wrapped: dict) -> None:
    for a, b in zip(eager["losses"], wrapped["losses"], strict=True):
        assert torch.equal(a, b), (a, b)
    assert eager["grads"].keys() == wrapped["grads"].keys() and eager["grads"]
    for name in eager["grads"]:
        assert torch.equal(eager["grads"][name], wrapped["grads"][name]), name
    assert eager["state"].keys() == wrapped["state"].keys()
    for name in eager["state"]:  # weights and buffers: running stats and num_batches_tracked included
        a, b = eager["state"][name], wrapped["state"][name]
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert torch.equal(eager["rng"], wrapped["rng"])


def _wrap_and_compare(model: torch.nn.Module, segments: object, expected: list[str]) -> None:
    eager = copy.deepcopy(model)
    x, _ = _step_batch(0)
    model.train()
    wrapped, plan = auto.wrap(model, (x,), budget="0%", segments=segments)
    assert plan.card.provenance["auto"]["segments"] == expected
    assert any(option != "eager" for option in plan.policy), plan.policy  # the least peak recomputes
    _assert_identical(_train(eager), _train(wrapped))


RESNET_BLOCKS = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]


@pytest.mark.parametrize(
    "segments",
    [BasicBlock, lambda name, module: isinstance(module, BasicBlock), "repeated"],
    ids=["class", "predicate", "repeated"],
)
def test_resnet18_by_block_type_trains_bit_identically(segments):
    _wrap_and_compare(_resnet18(), segments, RESNET_BLOCKS)


def test_timm_vit_by_block_class_trains_bit_identically():
    _wrap_and_compare(_vit(), timm.models.vision_transformer.Block, ["blocks.0", "blocks.1"])


def test_efficientnet_b0_repeated_trains_bit_identically():
    model = _efficientnet_b0()
    _wrap_and_compare(model, "repeated", [f"features.{i}" for i in range(9)])


def test_selection_rules_on_model_families():
    resnet = _resnet18()
    assert select_segments(resnet, None) == RESNET_BLOCKS  # not a Sequential: "repeated"
    assert select_segments(resnet, (BasicBlock, torch.nn.Linear)) == [*RESNET_BLOCKS, "fc"]
    # outermost match wins: a block's own convolutions are not segments beside it
    assert select_segments(resnet, (BasicBlock, torch.nn.Conv2d)) == ["conv1", *RESNET_BLOCKS]
    chain = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    assert select_segments(chain, None) == ["0", "1"]  # an nn.Sequential's children, unchanged
    assert select_segments(resnet, ["layer1", "fc"]) == ["layer1", "fc"]


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
