"""``stateaware.auto`` with ``compile=``: each segment compiled regionally, our replay running it.

The reference is the same model with each segment compiled by ``nn.Module.compile`` and
no recomputation: the same graphs, so the same kernels; on one thread the gradients must
be bitwise equal, and the BatchNorm statistics updated once per step. CI compiles with
``aot_eager``; one tiny inductor smoke test needs a C++ compiler.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
import torch._dynamo
from torch._dynamo.backends.registry import lookup_backend, register_backend
from torch._dynamo.utils import counters

import stateaware.auto as auto
from stateaware.auto.compiled import compile_options, compiled_forward, random_op
from stateaware.auto.segment import run_segment
from stateaware.auto.wrapper import apply_policy
from stateaware.torch_replay import UndeclaredStateError

#: aot_eager that counts each run of a compiled graph (its name is JSON, as a card needs).
COUNTED = "stateaware_test_counted_aot_eager"
RUNS = [0]


@register_backend(name=COUNTED)
def _counted(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
    compiled = lookup_backend("aot_eager")(gm, example_inputs)

    def run(*args):
        RUNS[0] += 1
        return compiled(*args)

    return run


AOT = {"backend": COUNTED}
#: The options that replay a compiled segment (on a CPU offload costs what whole costs).
REPLAYS = ("whole", "region", "offload")


class Block(torch.nn.Module):
    """Wide inside, narrow outside (recomputing pays), with BatchNorm and dropout."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.up, self.bn, self.down = torch.nn.Linear(d, 4 * d), torch.nn.BatchNorm1d(4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.bn(self.up(x)))
        return x + torch.nn.functional.dropout(self.down(h), 0.1)


class Counting(torch.nn.Module):
    """Writes a buffer it does not declare."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return torch.tanh(self.lin(x))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise: one thread's reduction order on both sides
    yield
    torch.set_num_threads(threads)
    torch._dynamo.reset()


def _models(blocks: int = 3, d: int = 16) -> tuple[torch.nn.Sequential, torch.nn.Sequential]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(d) for _ in range(blocks)])
    reference = copy.deepcopy(model)
    return model, reference


def _step(model: torch.nn.Module, x: torch.Tensor, seed: int) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    model.zero_grad()
    model(x).square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def _same_training(model, reference, x, steps: int) -> list[int]:
    """Train both ``steps`` steps, asserting bitwise gradients and buffers; the graph counts."""
    graphs = []
    for seed in range(steps):
        want, got = _step(reference, x, seed), _step(model, x, seed)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), f"step {seed}: gradients differ"
        assert all(torch.equal(a, b) for a, b in zip(model.buffers(), reference.buffers(), strict=True))
        graphs.append(counters["stats"]["unique_graphs"])
    return graphs


def test_wrap_compiled_replays_the_compiled_segments_bitwise_with_batchnorm_updated_once():
    model, reference = _models()
    keys = list(model.state_dict())
    x = torch.randn(32, 16)
    model, plan = auto.wrap(model, (x,), budget="0%", compile=AOT, repeats=1)
    assert plan.card.provenance["auto"]["compile"] == AOT  # the card records it; apply compiles from it
    assert any(option in REPLAYS for option in plan.policy)  # the replay runs the compiled segment
    assert list(model.state_dict()) == keys  # compiled in place
    assert all(int(b.bn.num_batches_tracked) == 0 for b in model)  # profiling and the loop left no trace
    assert counters["stats"]["unique_graphs"] >= 1
    for block in reference:
        block.compile(backend="aot_eager")
    RUNS[0] = 0
    graphs = _same_training(model, reference, x, steps=3)
    # Every call of a segment runs its compiled graph: the forward, and the replay of each
    # recomputed segment (none falls back to eager, e.g. under our read recorder).
    assert RUNS[0] == 3 * (len(model) + sum(option in REPLAYS for option in plan.policy))
    assert graphs[0] == graphs[-1]  # no recompilation after the first step (the reference's included)
    _step(model, x, 3)  # compiled once: the graphs profiling and the budget loop compiled serve training
    assert counters["stats"]["unique_graphs"] == graphs[-1]
    assert _breaks_only_at_segments()  # each segment one graph: the recorder and our hooks stay outside
    assert all(int(b.bn.num_batches_tracked) == 4 for b in model)  # updated once per step, not in the replay

    auto.remove(model)  # undoes the plan and the compilation: the class's own forward again
    assert all("forward" not in vars(b) for b in [model, *model])
    eager, _ = _models()
    eager.load_state_dict(model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(_step(model, x, 7), _step(eager, x, 7), strict=True))


def _breaks_only_at_segments() -> bool:
    """Every graph break Dynamo took is at a segment's call, which ours keeps out of the
    model's compiled graph: nothing inside a segment broke its own graph."""
    return all("_planned_forward" in reason or "_disable_dynamo" in reason for reason in counters["graph_break"])


class Headed(torch.nn.Module):
    """Blocks, then a head and a log-softmax outside them: code between the segments."""

    def __init__(self, d: int = 16, classes: int = 64) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(d), Block(d))
        self.head = torch.nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)).log_softmax(-1)


def test_the_code_between_the_segments_is_compiled_too():
    torch.manual_seed(0)
    model = Headed()
    reference = copy.deepcopy(model)
    keys = list(model.state_dict())
    x = torch.randn(32, 16)
    model, plan = auto.wrap(model, (x,), budget="0%", compile=AOT, repeats=1)
    # The least peak recomputes the first block; aot_eager has no min-cut partitioner, so the
    # last block's selective (compiled at a memory budget) is its eager.
    assert plan.policy[0] in REPLAYS and plan.policy[1] in ("eager", "selective")
    assert list(model.state_dict()) == keys and "forward" in vars(model)
    for block in reference.blocks:
        block.compile(backend="aot_eager")
    reference.head.compile(backend="aot_eager")
    RUNS[0] = 0
    graphs = _same_training(model, reference, x, steps=3)
    # Per step: the two blocks, the replay of the recomputed one, and the model's own code
    # after the blocks (the head and the log-softmax) as one graph of the model's forward.
    assert RUNS[0] == 3 * (2 + 1 + 1)
    assert graphs[0] == graphs[-1] and _breaks_only_at_segments()

    clone = copy.deepcopy(model)  # a deep copy runs compiled too: the options are data on it
    RUNS[0] = 0
    _step(clone, x, 0)
    assert RUNS[0] == 4

    auto.apply(model, auto.plan(auto.profile(Headed(), (x,), repeats=1), "0%"))  # an eager plan replaces it
    assert "forward" not in vars(model)
    auto.remove(clone)
    assert all("forward" not in vars(m) for m in clone.modules())


class Steady(Block):
    """``Block`` without its dropout: nothing in it draws random numbers."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.bn(self.up(x))))


#: A backend with the min-cut partitioner, which reads the activation-memory budget.
DECOMPOSED = {"backend": "aot_eager_decomp_partition"}


class LanguageModelLoss(torch.nn.Module):
    """A Hugging Face GPT-2 whose forward returns the next-token loss, as a training step
    computes it: the head and the cross-entropy lie outside the blocks."""

    def __init__(self) -> None:
        super().__init__()
        transformers = pytest.importorskip("transformers")
        config = transformers.GPT2Config(
            n_layer=2, n_embd=32, n_head=4, n_positions=16, vocab_size=64, use_cache=False,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        )  # fmt: skip
        self.lm = transformers.GPT2LMHeadModel(config)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.lm(ids).logits[:, :-1]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def test_a_hugging_face_model_compiled_between_its_blocks_trains_as_eager():
    torch.manual_seed(0)
    model = LanguageModelLoss()
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    model, plan = auto.wrap(model, (ids,), budget="0%", compile=AOT, repeats=1)
    assert plan.policy[0] in REPLAYS
    RUNS[0] = 0
    for seed in range(2):  # aot_eager runs eager's kernels: the same bits
        got, want = _step_loss(model, ids, seed), _step_loss(reference, ids, seed)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), f"step {seed}: gradients differ"
    blocks = 2 + sum(option in REPLAYS for option in plan.policy)  # calls and replays
    assert RUNS[0] > 2 * blocks  # graphs of the model's own code ran too: the embedding, the head, the loss
    assert _breaks_only_at_segments()
    auto.remove(model)
    assert all("forward" not in vars(m) for m in model.modules())


def _step_loss(model: torch.nn.Module, ids: torch.Tensor, seed: int) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    model.zero_grad()
    model(ids).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_a_compiled_segments_selective_is_its_partitioners_choice_at_a_memory_budget():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Steady(), Steady())
    reference = copy.deepcopy(model)
    x = torch.randn(32, 16)
    card = auto.profile(model, (x,), compile=DECOMPOSED, repeats=1)
    # It keeps less than the segment compiled by default keeps, and preserves nothing.
    for costs in card.segments:
        assert 0 < costs["selective"].retained_bytes < costs["eager"].retained_bytes
        assert costs["selective"].state_retained_bytes == 0
    apply_policy(model, card, ("selective", "selective"))
    for block in reference:
        block.compile(**DECOMPOSED)
    _same_training(model, reference, x, steps=2)  # recomputed in its compiled backward: the same bits
    assert all(int(b.bn.num_batches_tracked) == 2 for b in model)  # updated once per step


def test_a_compiled_segment_that_draws_random_numbers_gets_no_selective():
    model, _ = _models(blocks=2)  # dropout in every block
    card = auto.profile(model, (torch.randn(32, 16),), compile=DECOMPOSED, repeats=1)
    assert all("selective" not in costs and "whole" in costs for costs in card.segments)
    refused = card.provenance["auto"]["selective_refused"]
    assert sorted(refused) == ["0", "1"] and all("bernoulli" in why for why in refused.values())


def test_random_op_names_an_op_that_draws_and_no_op_that_draws_nothing():
    x = torch.randn(2, 4, 8, 16)
    F = torch.nn.functional
    assert random_op(lambda: F.scaled_dot_product_attention(x, x, x)) is None  # tagged, but no dropout
    assert random_op(lambda: F.dropout(x, 0.0)) is None
    assert random_op(lambda: F.gelu(x)) is None
    assert "bernoulli" in str(random_op(lambda: F.dropout(x, 0.1)))
    generator = torch.Generator().manual_seed(0)  # its own generator, not the default one
    state = torch.get_rng_state()
    assert "rand" in str(random_op(lambda: torch.rand(3, generator=generator)))
    assert torch.equal(state, torch.get_rng_state())


def test_undeclared_buffer_write_inside_a_compiled_segment_is_refused():
    module, x = Counting(), torch.randn(3, 4)
    forward = compiled_forward(module, AOT)
    with pytest.raises(UndeclaredStateError, match="calls"):
        run_segment(module, forward, "whole", (), (x,), {})
    assert not counters["graph_break"]  # refused from the compiled code's version bump, not an eager fallback
    with pytest.raises(UndeclaredStateError, match="calls"):  # and profiling refuses it before compiling
        auto.profile(torch.nn.Sequential(Counting()), (x,), state=[], compile=AOT, repeats=1)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ({"backend": "aot_eager", "fullgraf": True}, ValueError, "'fullgraf'; valid keys are: backend"),
        ({"backend": lambda gm, inputs: gm}, ValueError, "not JSON data"),
        ("inductor", TypeError, "compile is a str"),
    ],
)
def test_compile_argument_is_checked(value, error, match):
    with pytest.raises(error, match=match):
        compile_options(value)
    assert compile_options(True) == {} and compile_options(False) is None


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++") or shutil.which("cc")),
    reason="inductor on CPU needs a C++ compiler (g++, c++ or cc on PATH); none is installed",
)
def test_inductor_smoke():
    model, reference = _models(blocks=2, d=8)
    x = torch.randn(16, 8)
    model, plan = auto.wrap(model, (x,), budget="0%", compile={"backend": "inductor"}, repeats=1)
    for block in reference:
        block.compile(backend="inductor")
    graphs = _same_training(model, reference, x, steps=2)
    assert graphs[0] == graphs[-1] and _breaks_only_at_segments()
    assert all(int(b.bn.num_batches_tracked) == 2 for b in model)
