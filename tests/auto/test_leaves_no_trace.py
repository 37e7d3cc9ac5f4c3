"""Profiling leaves every module exactly as it found it: hooks, ``__dict__`` entries and the
markers libraries set on a model's first forward (Hugging Face's output recording), and
torch's process-wide module hooks; and ``auto`` plans blocks it once refused.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import stateaware.auto as auto
from stateaware.auto.wrapper import apply_policy
from tests import model_zoo as zoo

_PLAIN = (bool, int, float, str, bytes, type(None))


def _summary(value: Any) -> Any:
    if isinstance(value, (dict, set)):  # torch's tables: which entries, by identity
        items = value.items() if isinstance(value, dict) else ((v, None) for v in value)
        return type(value).__name__, tuple((k if isinstance(k, _PLAIN) else id(k), _summary(v)) for k, v in items)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_summary(v) for v in value)
    if isinstance(value, (torch.Tensor, nn.Module)) or callable(value):
        return id(value)
    return type(value).__name__  # plain objects are restored as copies: their type and key must stay


def fingerprint(model: nn.Module) -> dict[str, Any]:
    """Every module's ``__dict__`` (keys, tables by entry, tensors and callables by identity)
    and torch's global module hook tables."""
    out: dict[str, Any] = {name: {k: _summary(v) for k, v in vars(m).items()} for name, m in model.named_modules()}
    globals_ = vars(torch.nn.modules.module)
    out["<global hooks>"] = {k: _summary(v) for k, v in globals_.items() if k.startswith("_global_")}
    return out


class _Library(nn.Module):
    """What a library does on a model's first forward: hooks on every layer (one of them
    with kwargs, one always called), a process-wide hook, and a marker that it did."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3)])
        self.recorded: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not getattr(self, "_hooks_installed", False):
            for layer in self.layers:
                layer.register_forward_hook(lambda m, a, out: self.recorded.append(out))
                layer.register_forward_pre_hook(lambda m, a, kw: None, with_kwargs=True)
                layer.register_forward_hook(lambda m, a, out: None, always_call=True)
            torch.nn.modules.module.register_module_forward_hook(lambda m, a, out: None)
            self._hooks_installed = True
        self.recorded.clear()
        return self.layers(x)


def test_profiling_leaves_hooks_markers_and_global_hooks_as_it_found_them():
    torch.manual_seed(0)
    model = _Library()
    before = fingerprint(model)
    model_wrapped, _ = auto.wrap(model, (torch.randn(4, 8),), budget="50%", segments=nn.Sequential, repeats=1)
    assert fingerprint(auto.remove(model_wrapped)) == before
    model(torch.randn(4, 8))
    assert len(model.recorded) == 3  # each layer's output once: the hooks are installed once


def _moe(build, **config: Any) -> nn.Module:
    model = build()
    for key, value in config.items():
        setattr(model.config, key, value)
    model.config.use_cache = False
    return model


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_profiling_a_hugging_face_moe_model_leaves_it_unchanged_and_exact(name):
    pytest.importorskip("transformers")
    case = zoo.CASES[name]
    model = _moe(case.build, output_hidden_states=True)
    twin = _moe(case.build, output_hidden_states=True)
    before = fingerprint(model)
    _, kwargs = case.example()
    block = zoo.block_of(case)
    card = auto.profile(
        model, (kwargs["input_ids"],), segments=[n for n, m in model.named_modules() if isinstance(m, block)]
    )
    assert fingerprint(model) == before
    assert card.provenance["auto"]["eager_only"] == {}  # the router's in-place top-k is the layer's own
    batch = zoo.tokens(0)
    torch.manual_seed(5)
    ours = model(**batch[1])
    torch.manual_seed(5)
    eager = twin(**batch[1])
    layers = model.config.num_hidden_layers
    assert len(ours.hidden_states) == len(eager.hidden_states) == layers + 1
    assert len(ours.router_logits) == len(eager.router_logits) == layers
    ours.loss.backward()
    eager.loss.backward()
    assert torch.equal(ours.loss, eager.loss) and torch.equal(ours.aux_loss, eager.aux_loss)
    for (n, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad)), n


def test_auto_plans_spectral_norm_blocks_and_trains_them_exactly():
    """spectral_norm rebinds its ``_u`` buffer to the same tensor (``out=``): not a rebinding."""
    from torch.nn.utils.parametrizations import spectral_norm

    def build() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Sequential(spectral_norm(nn.Linear(16, 16)), nn.Tanh()) for _ in range(3)])

    def train(model: nn.Module) -> list[torch.Tensor]:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            optimizer.zero_grad()
            model(torch.randn(4, 16, generator=torch.Generator().manual_seed(step))).pow(2).sum().backward()
            optimizer.step()
        return [t.detach().clone() for t in model.state_dict().values()]

    model = build()
    card = auto.profile(model, (torch.randn(4, 16),), repeats=1)
    assert card.provenance["auto"]["eager_only"] == {}
    planned = apply_policy(model, card, ["whole"] * 3)  # every block recomputed, its state declared
    for a, b in zip(train(build()), train(planned), strict=True):
        assert torch.equal(a, b)
