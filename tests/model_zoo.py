"""The model matrix: real architectures at toy sizes, for the tests and ``bench/bench_models.py``.

Every model is built from a config with random init and a fixed seed (nothing is
downloaded), in train mode, with a batch generator of its own so that the global RNG
state is what training compares. One ``Case`` per model says how to build it, what a
training batch is, how the loss is taken and which block class its segments are.

``train`` runs SGD steps and returns everything training can change (losses, the last
step's gradients, every ``state_dict`` entry, the RNG state); ``assert_identical``
compares two such results with ``torch.equal``. ``CI_CASES`` are the models the test
suite trains; ``CASES`` adds the rest of the matrix, which the bench runs.
"""

from __future__ import annotations

import functools
import importlib
import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
from torch import nn

Batch = tuple[tuple[Any, ...], dict[str, Any]]

SIDE, CLASSES, VOCAB, SEQ, BATCH = 32, 10, 64, 8, 2


@dataclass(frozen=True)
class Case:
    """One model of the matrix.

    ``build()`` returns the model (seeded, train mode); ``batch(step)`` the positional and
    keyword arguments of step ``step`` with the loss's target inside ``kwargs`` under
    ``"target"`` when the loss needs one; ``loss(model, batch)`` the scalar loss; ``block``
    where its segments are found: ``(module, class name)`` of the block class (imported
    by ``block_of`` only when used) or a ``segments=`` string such as ``"repeated"``.
    """

    name: str
    build: Callable[[], nn.Module]
    batch: Callable[[int], Batch]
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    block: tuple[str, str] | str

    @property
    def hugging_face(self) -> bool:
        """A transformers model: planned through ``stateaware.integrations.transformers``."""
        return self.loss is _hf_loss

    def example(self) -> Batch:
        """The inputs ``auto.profile`` is given: step 0's, without the target."""
        args, kwargs = self.batch(0)
        return args, {k: v for k, v in kwargs.items() if k != "target"}


def _generator(step: int) -> torch.Generator:
    return torch.Generator().manual_seed(100 + step)


def _images(step: int) -> Batch:
    g = _generator(step)
    x = torch.randn(BATCH, 3, SIDE, SIDE, generator=g)
    return (x,), {"target": torch.randint(0, CLASSES, (BATCH,), generator=g)}


def _classify(model: nn.Module, batch: Batch) -> torch.Tensor:
    (x,), kwargs = batch
    return F.cross_entropy(model(x), kwargs["target"])


def tokens(step: int) -> Batch:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=_generator(step))
    return (), {"input_ids": ids, "labels": ids}


def _hf_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    _, kwargs = batch
    return model(**kwargs).loss


def _seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return make().train()

    return build


def _resnet18() -> nn.Module:
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=CLASSES)


def _efficientnet_b0() -> nn.Module:
    import torchvision

    return torchvision.models.efficientnet_b0(weights=None, num_classes=CLASSES)


def _mobilenet_v3_small() -> nn.Module:
    import torchvision

    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=CLASSES)


def _convnext_tiny() -> nn.Module:
    import torchvision

    return torchvision.models.convnext_tiny(weights=None, num_classes=CLASSES)


def _swin_t() -> nn.Module:
    import torchvision

    return torchvision.models.swin_t(weights=None, num_classes=CLASSES)


def _swin() -> nn.Module:
    # swin_t's blocks (relative-position buffers that view a table) at a toy size.
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
        stochastic_depth_prob=0.1, num_classes=CLASSES,
    )  # fmt: skip


def _torchvision_vit() -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        image_size=SIDE, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        dropout=0.1, num_classes=CLASSES,
    )  # fmt: skip


def _timm(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)

    return make


def _gpt2() -> nn.Module:
    import transformers

    cfg = transformers.GPT2Config(
        n_embd=16, n_layer=2, n_head=2, vocab_size=VOCAB, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(cfg)


def _llama() -> nn.Module:
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=16,
        attention_dropout=0.1,  # Llama's default is 0: some randomness for the RNG to matter
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg)


def _bert() -> nn.Module:
    import transformers

    cfg = transformers.BertConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, vocab_size=VOCAB,
        max_position_embeddings=16,
    )  # fmt: skip
    return transformers.BertForMaskedLM(cfg)


def _mixtral() -> nn.Module:
    """Mixtral with its router's jitter on and the auxiliary (load-balancing) loss recorded
    through Hugging Face's output-capturing hooks."""
    import transformers

    cfg = transformers.MixtralConfig(
        hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=VOCAB, max_position_embeddings=16, num_local_experts=4, num_experts_per_tok=2,
        router_jitter_noise=0.1, output_router_logits=True, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.MixtralForCausalLM(cfg)


def _qwen2_moe() -> nn.Module:
    """Qwen2-MoE (a shared expert beside the routed ones), its router logits recorded."""
    import transformers

    cfg = transformers.Qwen2MoeConfig(
        hidden_size=16, intermediate_size=16, moe_intermediate_size=8, shared_expert_intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, vocab_size=VOCAB,
        max_position_embeddings=16, num_experts=4, num_experts_per_tok=2, output_router_logits=True,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.Qwen2MoeForCausalLM(cfg)


def _densenet() -> nn.Module:
    """A small DenseNet: each ``_DenseBlock`` passes its growing feature list to its layers."""
    import torchvision

    return torchvision.models.DenseNet(
        growth_rate=4, block_config=(2, 2), num_init_features=8, bn_size=2, num_classes=CLASSES
    )


class RecurrentStep(nn.Module):
    """One time step of an RNN whose steps all share one cell (shared parameters across
    segments) and count the steps taken in a buffer."""

    def __init__(self, cell: nn.Module, counter: torch.Tensor) -> None:
        super().__init__()
        self.cell = cell
        self.counter = counter

    def forward(self, h: torch.Tensor, xs: torch.Tensor, t: int) -> torch.Tensor:
        self.counter.add_(1)
        return torch.tanh(self.cell(torch.cat([xs[:, t], h], dim=1)))


class SharedCellRnn(nn.Module):
    """``steps`` steps of one shared cell over a sequence, then a classifier."""

    def __init__(self, width: int = 64, steps: int = 16) -> None:
        super().__init__()
        self.cell = nn.Linear(2 * width, width)
        self.register_buffer("steps_taken", torch.zeros((), dtype=torch.int64))
        self.steps = nn.ModuleList(RecurrentStep(self.cell, self.steps_taken) for _ in range(steps))
        self.head = nn.Linear(width, CLASSES)
        self.width = width

    def forward(self, xs: torch.Tensor) -> torch.Tensor:
        h = xs.new_zeros(xs.shape[0], self.width)
        for t, step in enumerate(self.steps):
            h = step(h, xs, t)
        return self.head(h)


def _sequence(step: int) -> Batch:
    g = _generator(step)
    xs = torch.randn(64, 16, 64, generator=g)  # activations outweigh the shared cell's gradient
    return (xs,), {"target": torch.randint(0, CLASSES, (64,), generator=g)}


def _cases() -> dict[str, Case]:
    tv = "torchvision.models"
    vision = [
        ("resnet18", _resnet18, (f"{tv}.resnet", "BasicBlock")),
        ("efficientnet_b0", _efficientnet_b0, "repeated"),
        ("swin", _swin, (f"{tv}.swin_transformer", "SwinTransformerBlock")),
        ("swin_t", _swin_t, (f"{tv}.swin_transformer", "SwinTransformerBlock")),
        ("timm_vit", _timm("vit_tiny_patch16_224", img_size=SIDE, patch_size=8, depth=2, embed_dim=32,
                           num_heads=2, drop_path_rate=0.1),
         ("timm.models.vision_transformer", "Block")),
        ("mobilenet_v3_small", _mobilenet_v3_small, "repeated"),
        ("convnext_tiny", _convnext_tiny, (f"{tv}.convnext", "CNBlock")),
        ("torchvision_vit", _torchvision_vit, (f"{tv}.vision_transformer", "EncoderBlock")),
        ("timm_resnet", _timm("resnet18", drop_path_rate=0.1), ("timm.models.resnet", "BasicBlock")),
        ("timm_efficientnet", _timm("efficientnet_b0", drop_path_rate=0.1), "repeated"),
        ("densenet", _densenet, (f"{tv}.densenet", "_DenseLayer")),
    ]  # fmt: skip
    text = [
        ("gpt2", _gpt2, ("transformers.models.gpt2.modeling_gpt2", "GPT2Block")),
        ("llama", _llama, ("transformers.models.llama.modeling_llama", "LlamaDecoderLayer")),
        ("bert", _bert, ("transformers.models.bert.modeling_bert", "BertLayer")),
        ("mixtral", _mixtral, ("transformers.models.mixtral.modeling_mixtral", "MixtralDecoderLayer")),
        ("qwen2_moe", _qwen2_moe, ("transformers.models.qwen2_moe.modeling_qwen2_moe", "Qwen2MoeDecoderLayer")),
    ]
    cases = [Case(n, _seeded(m), _images, _classify, b) for n, m, b in vision]
    cases += [Case(n, _seeded(m), tokens, _hf_loss, b) for n, m, b in text]
    cases.append(Case("shared_cell_rnn", _seeded(SharedCellRnn), _sequence, _classify, (__name__, "RecurrentStep")))
    return {c.name: c for c in cases}


CASES = _cases()
#: The models the test suite trains (the rest run in ``bench/bench_models.py``).
CI_CASES = (
    "resnet18", "efficientnet_b0", "swin_t", "timm_vit", "gpt2", "llama", "bert", "shared_cell_rnn",
    "mixtral", "qwen2_moe", "densenet",
)  # fmt: skip


def block_of(case: Case) -> Any:
    """``case.block`` as ``segments=`` takes it: the class (imported now) or the string."""
    if isinstance(case.block, tuple):
        module, name = case.block
        return getattr(importlib.import_module(module), name)
    return case.block


def train(case: Case, model: nn.Module, steps: int = 2) -> dict[str, Any]:
    """``steps`` SGD steps in train mode; everything training can change, after them.

    A Hugging Face model trains without its key/value cache (``config.use_cache = False``):
    HF's checkpointed layers run without it whoever checkpoints them, and with it eager
    attention reads keys from the cache's concatenated copy, whose other layout changes the
    last bits of the projections' gradients on some CPUs (AMD EPYC: GPT-2's ``c_attn``,
    Llama's ``q/k/v_proj``). Eager without the cache is what any checkpoint of those
    layers can equal byte for byte.
    """
    model.train()
    if case.hugging_face:
        model.config.use_cache = False
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1234)
    losses, grads = [], {}
    for step in range(steps):
        optimizer.zero_grad(set_to_none=False)
        loss = case.loss(model, case.batch(step))
        loss.backward()
        losses.append(loss.detach().clone())
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
    return {
        "losses": losses,
        "grads": grads,
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "rng": torch.get_rng_state(),
    }


def assert_identical(eager: dict[str, Any], ours: dict[str, Any]) -> None:
    """Two ``train`` results equal byte for byte: losses, gradients, weights, buffers, RNG."""
    for a, b in zip(eager["losses"], ours["losses"], strict=True):
        assert torch.equal(a, b), (a, b)
    assert eager["grads"].keys() == ours["grads"].keys() and eager["grads"]
    for name in eager["grads"]:
        assert torch.equal(eager["grads"][name], ours["grads"][name]), name
    assert eager["state"].keys() == ours["state"].keys()
    for name in eager["state"]:  # weights and buffers: running stats and counters included
        a, b = eager["state"][name], ours["state"][name]
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert torch.equal(eager["rng"], ours["rng"])


def checkpoint_blocks(case: Case, *, declare: bool) -> nn.Module:
    """``case``'s model with our checkpoint around every block, the block itself declared
    as its state when ``declare`` (else nothing declared). A Hugging Face model goes
    through ``stateaware.integrations.transformers.enable`` (``state=`` its layers, or ``[]``)."""
    from stateaware.auto.segment import select_segments
    from stateaware.torch_replay import checkpoint

    model = case.build()
    if case.hugging_face:
        from stateaware.integrations import transformers as hf

        blocks = [model.get_submodule(n) for n in select_segments(model, block_of(case))]
        hf.enable(model, state=blocks if declare else [])
        return model
    for name in select_segments(model, block_of(case)):
        module = model.get_submodule(name)
        forward = types.MethodType(type(module).forward, module)
        state = [module] if declare else []
        module.forward = functools.partial(checkpoint, forward, state=state)
    return model


def automatic(case: Case, budget: str = "50%", repeats: int = 3) -> tuple[nn.Module, Any]:
    """``case``'s model planned and applied by stateaware's automatic path at ``budget``:
    ``stateaware.auto.wrap`` with segments by block type, or for a Hugging Face model
    ``stateaware.integrations.transformers.enable``; ``(model, plan)``."""
    model = case.build()
    args, kwargs = case.example()
    if case.hugging_face:
        from stateaware.integrations import transformers as hf

        return model, hf.enable(model, budget=budget, example_inputs=kwargs, repeats=repeats).plan
    import stateaware.auto as auto

    return auto.wrap(model, args, budget=budget, segments=block_of(case), repeats=repeats)
