"""stateaware.integrations.transformers: our checkpoint as Hugging Face's layer checkpoint.

Tiny GPT-2, Llama and BERT from configs (``tests/model_zoo.py``: random init, fixed seed, nothing downloaded)
train two AdamW steps in train mode with dropout on, under ``enable`` and eagerly from a
deep copy: losses, gradients, weights, buffers and the RNG state after must be equal bit
for bit. Sizes are tiny (hidden 16, 2 layers, sequence 8, batch 2) for a shared 2-core box.
"""

from __future__ import annotations

import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stateaware.auto.profiler import profile  # noqa: E402
from stateaware.integrations import transformers as hf  # noqa: E402
from tests import model_zoo as zoo  # noqa: E402

MODELS = ("gpt2", "llama", "bert")


def build(name: str) -> torch.nn.Module:
    return zoo.CASES[name].build()


def batch(step: int) -> dict[str, torch.Tensor]:
    return zoo.tokens(step)[1]


def train(model: torch.nn.Module, steps: int = 2) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, grads = [], []
    torch.manual_seed(1)
    for step in range(steps):
        opt.zero_grad()
        loss = model(**batch(step)).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        opt.step()
    return losses, grads


def assert_same_training(eager: torch.nn.Module, ours: torch.nn.Module) -> None:
    # The reference trains without the key/value cache, as every checkpointed layer does (HF
    # turns it off there): with the default use_cache=True, eager training's gradients differ
    # from use_cache=False in the last bits (the cache's concatenation changes the backward's
    # summation order), for HF's own checkpoint as for ours.
    eager.config.use_cache = False
    losses_e, grads_e = train(eager)
    rng_e = torch.get_rng_state()
    losses_o, grads_o = train(ours)
    rng_o = torch.get_rng_state()
    for a, b in zip(losses_e, losses_o, strict=True):
        assert torch.equal(a, b)
    for ge, go in zip(grads_e, grads_o, strict=True):
        assert ge.keys() == go.keys() and ge
        for n in ge:
            assert torch.equal(ge[n], go[n]), n
    for (n, a), (_, b) in zip(eager.state_dict().items(), ours.state_dict().items(), strict=True):
        assert torch.equal(a, b), n
    assert torch.equal(rng_e, rng_o)


@pytest.mark.parametrize("name", list(MODELS))
def test_enable_trains_bit_identically_to_eager(name):
    model = build(name)
    eager = copy.deepcopy(model)
    enabled = hf.enable(model)
    assert enabled.checkpointed == enabled.layers and len(enabled.layers) == 2
    calls = []
    layer = model.get_submodule(enabled.layers[0])
    real = layer._gradient_checkpointing_func
    layer._gradient_checkpointing_func = lambda *a, **k: calls.append(1) or real(*a, **k)
    assert_same_training(eager, model)
    assert calls, "the layer ran through HF's checkpoint door"


BUDGET = os.environ.get("BUDGET", "0%")  # the least peak: checkpoint every layer that lowers it


def test_a_budget_checkpoints_the_chosen_layers_and_trains_bit_identically():
    model = build("llama")
    eager = copy.deepcopy(model)
    enabled = hf.enable(model, budget=BUDGET, example_inputs=batch(0))
    assert enabled.plan is not None and enabled.plan.feasible
    assert len(enabled.options) == 2 and enabled.checkpointed
    for layer, option in zip(enabled.layers, enabled.options, strict=True):
        assert model.get_submodule(layer).gradient_checkpointing == (option != "eager")
    assert_same_training(eager, model)


def test_hf_default_checkpoint_also_matches_here():
    # The negative control's other half: these models have no state, so torch's checkpoint
    # (HF's default, use_reentrant=False) is exact on them too.
    model = build("llama")
    eager = copy.deepcopy(model)
    model.activation_checkpointing_enable()
    assert_same_training(eager, model)


def test_a_later_hf_enable_keeps_ours_and_disable_undoes_it():
    model = build("gpt2")
    hf.enable(model)
    # what Trainer(args=TrainingArguments(activation_checkpointing=True)) calls in train():
    model.activation_checkpointing_enable(activation_checkpointing_kwargs=None, every_n_layers=1, offload=False)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # the older name
    layers = [m for m in model.modules() if isinstance(m, transformers.modeling_layers.GradientCheckpointingLayer)]
    assert all(m._gradient_checkpointing_func is hf._checkpoint_layer and m.gradient_checkpointing for m in layers)
    with pytest.raises(ValueError, match="use_reentrant=True.*Tip: drop them"):
        model.activation_checkpointing_enable({"use_reentrant": True})
    with pytest.raises(ValueError, match="every_n_layers=2"):
        model.activation_checkpointing_enable(every_n_layers=2)
    hf.disable(model)
    assert not any(m.gradient_checkpointing for m in layers)
    model.activation_checkpointing_enable()  # HF's own again
    assert all(m._gradient_checkpointing_func is not hf._checkpoint_layer for m in layers)


def test_enable_refuses_a_model_without_hf_checkpointing():
    with pytest.raises(ValueError, match="no Hugging Face gradient checkpointing.*stateaware.auto.wrap"):
        hf.enable(torch.nn.Linear(2, 2))


class _Call(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, **fixed: object) -> None:
        super().__init__()
        self.m, self.fixed = model, fixed

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=ids, labels=ids, **self.fixed).loss


@pytest.mark.parametrize("name, layers", [("gpt2", "m.transformer.h"), ("llama", "m.model.layers")])
def test_profiling_refuses_the_default_cache_and_works_without_it(name, layers):
    ids = batch(0)["input_ids"]
    segments = [f"{layers}.0", f"{layers}.1"]
    with pytest.raises(ValueError, match=r"receives .*DynamicCache.*use_cache=False.*integrations\.transformers"):
        profile(_Call(build(name)), (ids,), segments=segments, repeats=1)
    if name == "gpt2":
        return  # profiling both is slow on a shared 2-core box: Llama's measured run stands for them
    card = profile(_Call(build(name), use_cache=False), (ids,), segments=segments, repeats=1)
    assert card.provenance["auto"]["segments"] == segments


@pytest.mark.parametrize(
    "how", [{"example_inputs": batch(0)}, {"state": []}, {"state": ["bert.encoder.layer.0.attention"]}]
)
def test_discovery_without_a_budget_and_explicit_state_train_bit_identically(how):
    # example_inputs alone: one traced forward discovers each layer's state (BERT's: none), every
    # layer checkpointed; state=[...]: declared by every checkpointed layer, names resolved.
    model = build("bert")
    eager = copy.deepcopy(model)
    enabled = hf.enable(model, **how)
    assert enabled.plan is None and enabled.options == ("whole", "whole")
    assert_same_training(eager, model)
