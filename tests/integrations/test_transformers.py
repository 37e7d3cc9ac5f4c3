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

from stateaware.auto.discover import trace  # noqa: E402
from stateaware.auto.profiler import check_arguments, profile  # noqa: E402
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


def _t5() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
        decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return transformers.T5ForConditionalGeneration(config).train()


def test_the_cache_tip_holds_for_t5_whose_decoder_keeps_its_own_config():
    # T5's decoder stack holds a copy of the config: model.config.use_cache = False leaves its cache on.
    model = _t5()
    model.config.use_cache = False
    ids = batch(0)["input_ids"]
    segments = ["m.decoder.block.1"]
    with pytest.raises(ValueError, match=r"EncoderDecoderCache") as refused:
        profile(_Call(model), (ids,), segments=segments, repeats=1)
    tip = str(refused.value)
    assert "pass use_cache=False in the call" in tip and "T5's decoder" in tip
    # What the tip says: the step that refused (the traced arguments of every segment) now passes;
    # the measurement after it is profile's as for any model (Llama's is measured above).
    found = trace(_Call(model, use_cache=False), (ids,), segments)
    for segment, (args, kwargs) in zip(found.names, found.inputs, strict=True):
        check_arguments(segment, args, kwargs)
    assert found.names == segments
    enabled = hf.enable(_t5(), example_inputs={"input_ids": ids, "labels": ids})  # the tip's other way
    assert {"decoder.block.0", "decoder.block.1"} <= set(enabled.checkpointed)


def test_enable_on_ddp_points_to_its_module_and_that_trains_bit_identically():
    import dataclasses
    import socket

    from torch.nn.parallel import DistributedDataParallel

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available in this build")
    case = zoo.CASES["gpt2"]
    eager = zoo.train(case, case.build())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.distributed.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    try:
        model = case.build()
        ddp = DistributedDataParallel(model)
        with pytest.raises(ValueError, match=r"wraps the GPT2LMHeadModel.*enable\(DistributedDataParallel\.module"):
            hf.enable(ddp)
        enabled = hf.enable(ddp.module)  # what the tip says; training goes through DDP as before
        assert enabled.checkpointed == ("transformer.h.0", "transformer.h.1")
        model.config.use_cache = False  # as zoo.train does for the eager run
        through_ddp = dataclasses.replace(case, loss=lambda m, b: zoo._hf_loss(m, b))
        ours = zoo.train(through_ddp, ddp)
    finally:
        torch.distributed.destroy_process_group()
    unwrapped = {k: {n.removeprefix("module."): v for n, v in ours[k].items()} for k in ("grads", "state")}
    zoo.assert_identical(eager, {**ours, **unwrapped})
