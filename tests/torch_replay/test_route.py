"""stateaware.torch_replay.route(): other libraries' non-reentrant checkpoints run on ours.

Models are tiny and built from configs with random init (``tests/model_zoo.py``; nothing is
downloaded). Each library sets its checkpointing up *before* the route opens — the case a
reassignment of ``torch.utils.checkpoint.checkpoint`` does not reach — and trains two
steps: losses, gradients, weights, buffers and RNG must equal eager's byte for byte, and
the route's ``calls`` must equal the number of checkpointed calls (counted by forward
hooks that skip replays). The controls run the same without the route: torch's
checkpoint counts BatchNorm twice.
"""

from __future__ import annotations

import copy
import os
import re
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import torch.utils.checkpoint as tuc
from torch import nn

from stateaware.torch_replay import ROUTE_STATES, UndeclaredStateError, is_replaying, route
from tests import model_zoo as zoo


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin, self.bn, self.drop = nn.Linear(width, width), nn.BatchNorm1d(width), nn.Dropout(0.25)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.bn(self.lin(x)))) + x


def _bn_net(blocks: int = 3, width: int = 6) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[_Block(width) for _ in range(blocks)], nn.Linear(width, 1))


def _train(model: nn.Module, step_loss, steps: int = 2) -> dict:
    """``steps`` SGD steps; everything training changes (as ``model_zoo.train``)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1234)
    losses, grads = [], {}
    for step in range(steps):
        optimizer.zero_grad(set_to_none=False)
        loss = step_loss(model, step)
        loss.backward()
        losses.append(loss.detach().clone())
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {"losses": losses, "grads": grads, "state": state, "rng": torch.get_rng_state()}


def _vector_loss(model: nn.Module, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    return model(torch.randn(8, 6, generator=g)).square().mean()


def _forward_calls(model: nn.Module, kind: type) -> list[int]:
    """A counter of ``kind`` modules' forward calls outside replays (the calls a checkpoint wraps)."""
    count = [0]

    def hook(*_: object) -> None:
        if not is_replaying():
            count[0] += 1

    for m in model.modules():
        if isinstance(m, kind):
            m.register_forward_hook(hook)
    return count


def _assert_same_values(eager: dict, ours: dict) -> None:
    for a, b in zip(eager["losses"], ours["losses"], strict=True):
        assert torch.equal(a, b)
    for key in ("grads", "state"):
        assert len(eager[key]) == len(ours[key]) > 0
        for a, b in zip(eager[key].values(), ours[key].values(), strict=True):
            assert torch.equal(a, b)
    assert torch.equal(eager["rng"], ours["rng"])


def _bn_buffers_differ(a: dict, b: dict) -> bool:
    pairs = [(v, w) for (k, v), w in zip(a["state"].items(), b["state"].values(), strict=True) if "running" in k]
    assert pairs
    return any(not torch.equal(v, w) for v, w in pairs)


def test_timm_resnet_set_grad_checkpointing_trains_as_eager_under_route() -> None:
    pytest.importorskip("timm")
    from timm.models.resnet import BasicBlock

    # a narrow one-block-per-stage resnet18: BatchNorm, drop_path on every block
    make = zoo._timm("resnet18", layers=(1, 1, 1, 1), channels=(8, 16, 32, 64), drop_path_rate=0.2)
    case = zoo.Case("timm_resnet", zoo._seeded(make), zoo._images, zoo._classify, "repeated")
    eager = zoo.train(case, case.build())
    model = case.build()
    model.set_grad_checkpointing()
    blocks = _forward_calls(model, BasicBlock)
    with route() as routed:
        ours = zoo.train(case, model)
    zoo.assert_identical(eager, ours)
    assert routed.calls == blocks[0] == 2 * sum(isinstance(m, BasicBlock) for m in model.modules())

    control = case.build()  # torch's checkpoint: BatchNorm statistics updated by the replay too
    control.set_grad_checkpointing()
    assert _bn_buffers_differ(eager, zoo.train(case, control))


def test_transformers_gradient_checkpointing_enabled_before_route_runs_on_ours() -> None:
    pytest.importorskip("transformers")
    from transformers.modeling_layers import GradientCheckpointingLayer

    case = zoo.CASES["gpt2"]  # dropout on
    eager = zoo.train(case, case.build())
    model = case.build()
    model.gradient_checkpointing_enable()  # binds partial(torch.utils.checkpoint.checkpoint, use_reentrant=False)
    layers = _forward_calls(model, GradientCheckpointingLayer)
    with route() as routed:
        ours = zoo.train(case, model)
    zoo.assert_identical(eager, ours)
    assert routed.calls == layers[0] == 2 * model.config.n_layer


def test_checkpoint_wrapper_built_before_route_keeps_batchnorm_exact() -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    def wrapped() -> nn.Module:
        model = _bn_net()
        apply_activation_checkpointing(model, checkpoint_wrapper, check_fn=lambda m: isinstance(m, _Block))
        return model

    eager = _train(_bn_net(), _vector_loss)
    model = wrapped()  # the wrappers hold partial(torch.utils.checkpoint.checkpoint, use_reentrant=False)
    blocks = _forward_calls(model, _Block)
    with route() as routed:
        ours = _train(model, _vector_loss)
    _assert_same_values(eager, ours)  # the wrapper renames parameters: compare in order
    assert routed.calls == blocks[0] == 2 * 3
    assert _bn_buffers_differ(eager, _train(wrapped(), _vector_loss))  # the control: torch's own


def test_diffusers_enable_gradient_checkpointing_runs_on_ours() -> None:
    diffusers = pytest.importorskip("diffusers")

    def build() -> nn.Module:
        torch.manual_seed(0)
        return diffusers.UNet2DModel(
            sample_size=8,
            in_channels=2,
            out_channels=2,
            block_out_channels=(8, 16),
            layers_per_block=1,
            norm_num_groups=4,
            down_block_types=("DownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "UpBlock2D"),
            dropout=0.2,
        ).train()

    def loss(model: nn.Module, step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(step)
        return model(torch.randn(2, 2, 8, 8, generator=g), step + 1).sample.square().mean()

    eager = _train(build(), loss)
    model = build()
    model.enable_gradient_checkpointing()
    with route() as routed:
        ours = _train(model, loss)
    zoo.assert_identical(eager, ours)
    assert routed.calls > 0


def test_decorator_form_and_checkpoint_sequential_are_routed() -> None:
    eager = _train(_bn_net(), _vector_loss)

    def sequential(model: nn.Module, step: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(step)
        out = tuc.checkpoint_sequential(model, 2, torch.randn(8, 6, generator=g), use_reentrant=False)
        return out.square().mean()

    with route() as routed:
        ours = _train(_bn_net(), sequential)
    zoo.assert_identical(eager, ours)
    assert routed.calls == 2  # one checkpointed chunk per step (the last chunk runs plainly)

    model = _bn_net()
    model[0].forward = tuc.checkpoint(use_reentrant=False)(model[0].forward)
    with route() as routed:
        ours = _train(model, _vector_loss)
    zoo.assert_identical(eager, ours)
    assert routed.calls == 2


@pytest.mark.parametrize("keywords", [{"use_reentrant": True}, {}], ids=["use_reentrant=True", "unspecified"])
def test_reentrant_calls_stay_torchs(keywords: dict) -> None:
    block = _bn_net()[0]
    x = torch.randn(8, 6, requires_grad=True)
    with route() as routed, pytest.warns(UserWarning) if not keywords else _nothing():
        tuc.checkpoint(block, x, **keywords).sum().backward()
    assert routed.calls == 0
    assert int(block.bn.num_batches_tracked) == 2  # torch's reentrant replay counted BatchNorm again


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_routes_nest_innermost_state_applies_and_torch_is_restored() -> None:
    torch_generator = tuc._checkpoint_without_reentrant_generator_impl
    block = _bn_net()[0]
    x = torch.randn(8, 6, requires_grad=True)
    with route() as outer:
        with route(state="none") as inner:
            with pytest.raises(UndeclaredStateError, match="running_mean"):
                tuc.checkpoint(block, x, use_reentrant=False)
        tuc.checkpoint(block, x, use_reentrant=False).sum().backward()
    assert (outer.calls, inner.calls) == (1, 1)
    assert int(block.bn.num_batches_tracked) == 2  # the refused forward's write, then one forward: no replay
    assert tuc._checkpoint_without_reentrant_generator_impl is torch_generator
    tuc.checkpoint(block, x, use_reentrant=False).sum().backward()  # torch's again: counted twice
    assert int(block.bn.num_batches_tracked) == 4


def test_handle_closed_out_of_order_raises() -> None:
    torch_generator = tuc._checkpoint_without_reentrant_generator_impl
    first, second = route(), route()
    with pytest.raises(RuntimeError, match="out of order.*1 route"):
        first.close()
    second.close()
    assert tuc._checkpoint_without_reentrant_generator_impl is not torch_generator  # `first` still routes
    first.close()
    first.close()  # twice: a no-op
    assert tuc._checkpoint_without_reentrant_generator_impl is torch_generator


@pytest.mark.parametrize("state", ["all", None, "auto"])
def test_bad_state_is_refused_naming_the_values(state: object) -> None:
    with pytest.raises(ValueError, match=r"route\(state=.*'reached', 'none'"):
        route(state=state)  # type: ignore[arg-type]
    assert ROUTE_STATES == ("reached", "none")


def test_route_is_process_wide_not_per_thread() -> None:
    block = _bn_net()[0]
    x = torch.randn(8, 6, requires_grad=True)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            tuc.checkpoint(block, x, use_reentrant=False).sum().backward()
        except BaseException as e:  # reported below
            errors.append(e)

    with route() as routed:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert not errors and routed.calls == 1
    assert int(block.bn.num_batches_tracked) == 1


def test_preserve_rng_state_false_and_context_fn_are_honoured() -> None:
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5), nn.Tanh())
    x = torch.randn(8, 6)

    def run(routed: bool, **keywords: object) -> tuple[torch.Tensor, torch.Tensor]:
        model = copy.deepcopy(net)
        torch.manual_seed(5)
        with route() if routed else _nothing() as handle:
            tuc.checkpoint(model, x, use_reentrant=False, **keywords).sum().backward()
        assert handle is None or handle.calls == 1
        return model[0].weight.grad, torch.get_rng_state()

    # Without the stash the replay draws fresh masks from the global generator, as torch's does.
    torch_grad, torch_rng = run(False, preserve_rng_state=False)
    ours_grad, ours_rng = run(True, preserve_rng_state=False)
    assert torch.equal(torch_grad, ours_grad) and torch.equal(torch_rng, ours_rng)
    assert not torch.equal(run(True)[0], ours_grad)  # the stash is what makes masks equal

    calls = [0]

    def policy(ctx, op, *args, **kwargs):  # save the matmul, recompute the rest
        if not ctx.is_recompute and op is torch.ops.aten.addmm.default:
            calls[0] += 1
        return CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.addmm.default else CheckpointPolicy.PREFER_RECOMPUTE

    sac = lambda: create_selective_checkpoint_contexts(policy)  # noqa: E731
    assert torch.equal(run(True, context_fn=sac)[0], run(False)[0])
    assert calls[0] == 1  # the policy ran in the routed forward


def test_is_replaying_marks_the_replay_and_hooks_can_observe_once() -> None:
    block = _bn_net()[0]
    seen: list[bool] = []
    features: list[torch.Tensor] = []

    def grab(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
        seen.append(is_replaying())
        if not is_replaying():
            features.append(output)

    block.lin.register_forward_hook(grab)
    counts = [0, 0]

    def count(module: nn.Module, inputs: object, output: object) -> None:
        counts[is_replaying()] += 1

    handle = nn.modules.module.register_module_forward_hook(count)
    try:
        x = torch.randn(8, 6, requires_grad=True)
        with route():
            y = tuc.checkpoint(block, x, use_reentrant=False)
        assert seen == [False] and not is_replaying()
        y.sum().backward()
    finally:
        handle.remove()
    assert seen == [False, True]  # the replay ran the hook again, flagged
    assert len(features) == 1
    # block, lin, bn, drop once each in the forward; the replay (stopped early once every saved
    # tensor is recomputed) runs lin and bn again, flagged
    assert counts == [4, 2]
    assert not is_replaying()


def test_checkpoint_captured_by_torch_compile_stays_torchs() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def step(x: torch.Tensor) -> torch.Tensor:
        return tuc.checkpoint(net, x, use_reentrant=False).sum()

    torch._dynamo.reset()
    compiled = torch.compile(step, backend="eager")  # runs the captured op through torch's checkpoint
    with route() as routed:
        compiled(torch.randn(8, 4)).backward()
    assert routed.calls == 0
    torch._dynamo.reset()


def test_torch_without_the_generator_is_refused_naming_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(tuc, "_checkpoint_without_reentrant_generator_impl")
    monkeypatch.delattr(tuc, "_checkpoint_without_reentrant_generator")
    version = re.escape(torch.__version__)
    with pytest.raises(RuntimeError, match=rf"torch {version} has no .*supported: torch 2\.4-2\.14"):
        route()


def test_pre_2_14_generator_signature_is_routed(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch 2.4-2.13 call _checkpoint_without_reentrant_generator(fn, preserve_rng_state,
    # context_fn, determinism_check, debug, *args, **kwargs) and run fn between two next()s.
    impl = tuc._checkpoint_without_reentrant_generator_impl

    def legacy(
        fn,
        preserve_rng_state=True,
        context_fn=tuc.noop_context_fn,
        determinism_check="default",
        debug=False,
        *args,
        **kwargs,
    ):  # noqa: E501
        yield from impl(fn, args, kwargs, preserve_rng_state=preserve_rng_state, context_fn=context_fn,
                        determinism_check=determinism_check, debug=debug)  # fmt: skip

    monkeypatch.delattr(tuc, "_checkpoint_without_reentrant_generator_impl")
    monkeypatch.setattr(tuc, "_checkpoint_without_reentrant_generator", legacy)
    block = _bn_net()[0]
    x = torch.randn(8, 6, requires_grad=True)
    with route() as routed:
        gen = tuc._checkpoint_without_reentrant_generator(block, True, tuc.noop_context_fn, "default", False, x)
        next(gen)
        out = block(x)
        assert next(gen, "closed") == "closed"
        out.sum().backward()
    assert tuc._checkpoint_without_reentrant_generator is legacy
    assert routed.calls == 1 and int(block.bn.num_batches_tracked) == 1


def test_composable_checkpoint_applied_before_route_is_routed() -> None:
    # torch.distributed._composable.checkpoint(module) imported torch's generator by name
    from torch.distributed._composable import checkpoint as checkpoint_module

    def marked() -> nn.Module:
        model = _bn_net()
        for block in model[:-1]:
            checkpoint_module(block)
        return model

    eager = _train(_bn_net(), _vector_loss)
    with route() as routed:
        ours = _train(marked(), _vector_loss)
    zoo.assert_identical(eager, ours)
    assert routed.calls == 2 * 3
    assert _bn_buffers_differ(eager, _train(marked(), _vector_loss))  # the control: torch's own


def test_keywords_reach_the_segment_also_state_and_preserve() -> None:
    # torch passes every keyword it does not know to the function; routed calls must too,
    # ours included (a routed call declares through route's state, never through keywords).
    torch.manual_seed(0)
    routed_block = nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6))
    eager_block = copy.deepcopy(routed_block)
    x = torch.randn(8, 6)
    h = torch.full((8, 6), 2.0)

    def cell(block: nn.Module, t: torch.Tensor, state: torch.Tensor, preserve: float = 1.0) -> torch.Tensor:
        return block(t) * state * preserve

    eager = cell(eager_block, x, h, 3.0)
    eager.sum().backward()
    with route() as routed:
        out = tuc.checkpoint(cell, routed_block, x, use_reentrant=False, state=h, preserve=3.0)
        out.sum().backward()
    assert routed.calls == 1
    assert torch.equal(out, eager)
    assert torch.equal(routed_block[0].weight.grad, eager_block[0].weight.grad)
    for a, b in zip(routed_block.buffers(), eager_block.buffers(), strict=True):
        assert torch.equal(a, b)
