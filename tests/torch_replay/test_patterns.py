"""Patterns current models use, replayed exactly: MoE routers that write their own top-k
weights in place, container arguments a caller changes after the call, fast weights under
``torch.func.functional_call``, optional attributes, sparse state and spectral norm.

Each test compares against eager (bit for bit) and, where torch's own checkpoint goes
wrong the same way, shows that it does (the control that the test can see the problem).
"""

from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from stateaware.torch_replay import UndeclaredStateError, checkpoint

# --------------------------------------------------------------------------- MoE routers


def _topk_div(logits: torch.Tensor) -> torch.Tensor:  # Mixtral's router
    weights, _ = torch.topk(logits.softmax(-1), 2, dim=-1)
    weights /= weights.sum(dim=-1, keepdim=True)
    return weights


def _method_topk_values(logits: torch.Tensor) -> torch.Tensor:
    result = logits.topk(2)
    result.values.mul_(3)
    return result.values


def _max_dim_values(logits: torch.Tensor) -> torch.Tensor:
    top = logits.max(dim=1).values
    top.add_(1)
    return top


def _unpacked_max(logits: torch.Tensor) -> torch.Tensor:
    value, index = torch.max(logits, 1)
    value.mul_(index.float() + 1)
    return value


def _sort_row(logits: torch.Tensor) -> torch.Tensor:
    ordered, _ = torch.sort(logits, dim=-1, descending=True)
    ordered[:, 0] = 0.0
    return ordered


def _sort_view(logits: torch.Tensor) -> torch.Tensor:
    view = torch.sort(logits, dim=-1).values[:, :2]
    view.mul_(2)
    return view


def _chunk_of_fresh(logits: torch.Tensor) -> torch.Tensor:  # a mask built in pieces
    mask = torch.zeros_like(logits)
    left, right = mask.chunk(2, dim=-1)
    left.fill_(1.0)
    right.add_(0.5)
    return logits * mask


def _unbind_of_fresh(logits: torch.Tensor) -> torch.Tensor:
    scale = torch.ones_like(logits)
    for i, row in enumerate(scale.unbind(0)):
        row.mul_(i + 1)
    return logits * scale


def _kthvalue_aminmax(logits: torch.Tensor) -> torch.Tensor:
    kth = torch.kthvalue(logits, 2, dim=1)
    low_high = torch.aminmax(logits, dim=1)
    kth.values.sub_(low_high.min)
    return kth.values * low_high.max


ROUTERS = [
    _topk_div,
    _method_topk_values,
    _max_dim_values,
    _unpacked_max,
    _sort_row,
    _sort_view,
    _chunk_of_fresh,
    _unbind_of_fresh,
    _kthvalue_aminmax,
]


class _Router(nn.Module):
    def __init__(self, route) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 6)
        self.route = route

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.route(self.gate(x)).tanh()


@pytest.mark.parametrize("route", ROUTERS, ids=lambda f: f.__name__.strip("_"))
@given(rows=st.integers(1, 5), seed=st.integers(0, 2**16))
@settings(max_examples=3, deadline=None)
def test_a_segment_writing_its_own_fresh_tensors_in_place_replays_exactly(route, rows, seed):
    torch.manual_seed(seed)
    router = _Router(route)
    x = torch.randn(rows, 8, requires_grad=True)
    router(x).sum().backward()  # eager
    eager = [x.grad.clone(), *(p.grad.clone() for p in router.parameters())]
    x.grad = None
    router.zero_grad(set_to_none=True)
    checkpoint(router, x).sum().backward()
    ours = [x.grad, *(p.grad for p in router.parameters())]
    for a, b in zip(eager, ours, strict=True):
        assert torch.equal(a, b)


class _CountingRouter(nn.Module):
    """A router that also counts expert use in a buffer: real state, written in place."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 4)
        self.register_buffer("load", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = torch.topk(self.gate(x), 2, dim=-1)
        weights /= weights.sum(-1, keepdim=True)  # the segment's own: fine
        self.load.index_add_(0, chosen.flatten(), torch.ones(chosen.numel()))  # state
        return weights


def test_real_state_written_next_to_a_router_is_still_refused():
    router = _CountingRouter()
    x = torch.randn(3, 8, requires_grad=True)
    with pytest.raises(UndeclaredStateError, match=r"load"):
        checkpoint(router, x)
    checkpoint(router, x, state=[router]).sum().backward()  # declared: accepted
    assert router.load.sum().item() == 2 * 6  # two forwards wrote it, the replay did not


def test_out_tuples_into_pre_existing_tensors_are_writes():
    values, indices = torch.zeros(3, 2), torch.zeros(3, 2, dtype=torch.long)
    gate = nn.Linear(8, 4)

    def route(x):
        torch.topk(gate(x).detach(), 2, out=(values, indices))
        return gate(x).tanh()

    with pytest.raises(UndeclaredStateError, match=r"values .*version 0 -> 1"):
        checkpoint(route, torch.randn(3, 8, requires_grad=True))


# --------------------------------------------------------------------------- containers


class _DenseLayer(nn.Module):
    """Reads every feature map so far, as torchvision's DenseNet layer does."""

    def __init__(self, spelling: str) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.spelling = spelling

    def forward(self, features):
        if self.spelling == "list":
            h = features[-1] + sum(features)
        elif self.spelling == "nested":
            h = features["maps"][-1] + features["maps"][0][0]
        else:  # a tuple holding the caller's list
            h = features[0][-1] * features[1]
        return self.lin(h).tanh()


def _dense_block(spelling: str, checkpointer) -> list[torch.Tensor]:
    torch.manual_seed(0)
    layers = [_DenseLayer(spelling) for _ in range(3)]
    x = torch.randn(2, 4, requires_grad=True)
    maps = [x]
    for layer in layers:
        if spelling == "list":
            argument = maps
        elif spelling == "nested":
            argument = {"maps": maps}
        else:
            argument = (maps, 2.0)
        out = checkpointer(layer, argument) if checkpointer is not None else layer(argument)
        maps.append(out)  # the caller grows its list after the call
    torch.stack(maps).pow(2).sum().backward()
    return [x.grad, *(p.grad for layer in layers for p in layer.parameters())]


@pytest.mark.parametrize("spelling", ["list", "nested", "tuple"])
def test_the_replay_sees_container_arguments_as_they_were_at_the_call(spelling):
    eager = _dense_block(spelling, None)
    ours = _dense_block(spelling, lambda f, a: checkpoint(f, a, state=[f]))
    for a, b in zip(eager, ours, strict=True):
        assert torch.equal(a, b)
    # The control: torch's checkpoint replays with the longer list and gets other gradients.
    theirs = _dense_block(spelling, lambda f, a: torch_checkpoint.checkpoint(f, a, use_reentrant=False))
    assert not all(torch.equal(a, b) for a, b in zip(eager, theirs, strict=True))


def test_container_keyword_arguments_are_kept_too():
    lin = nn.Linear(4, 4)

    def segment(x, *, extra):
        return lin(x * extra[-1]).tanh()

    x = torch.randn(2, 4, requires_grad=True)
    extra = [torch.full((4,), 2.0)]
    (lin(x * extra[-1]).tanh()).sum().backward()
    eager = x.grad.clone()
    x.grad = None
    y = checkpoint(segment, x, extra=extra)
    extra.append(torch.full((4,), 5.0))
    y.sum().backward()
    assert torch.equal(eager, x.grad)


# --------------------------------------------------------------------------- fast weights


class _Learner(nn.Module):
    def __init__(self, declare: bool) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
        self.declare = declare

    def forward(self, x):
        state = [self.body] if self.declare else []
        return checkpoint(self.body, x, state=state) if self.declare else checkpoint(self.body, x)


@pytest.mark.parametrize("declare", [False, True], ids=["undeclared", "declared"])
def test_the_replay_runs_under_the_fast_weights_functional_call_bound(declare):
    from torch.func import functional_call

    torch.manual_seed(0)
    learner = _Learner(declare)
    x, target = torch.randn(3, 4), torch.randn(3, 4)

    def outer_gradients(model_call) -> list[torch.Tensor]:
        params = dict(learner.named_parameters())
        inner = (model_call(params) - target).pow(2).sum()
        grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
        fast = {k: v - 0.1 * g for (k, v), g in zip(params.items(), grads, strict=True)}
        (model_call(fast) - target).pow(2).sum().backward()
        out = [p.grad.clone() for p in learner.parameters()]
        learner.zero_grad(set_to_none=True)
        return out

    eager = outer_gradients(lambda p: functional_call(learner.body, {k[5:]: v for k, v in p.items()}, (x,)))
    ours = outer_gradients(lambda p: functional_call(learner, p, (x,)))
    for a, b in zip(eager, ours, strict=True):
        assert torch.equal(a, b)
    assert all(p.grad is None for p in learner.parameters())  # nothing bound is left behind


def test_torch_checkpoint_under_functional_call_recomputes_with_the_module_weights():
    """The control: the same program through torch's checkpoint differentiates the wrong weights."""
    from torch.func import functional_call

    torch.manual_seed(0)
    body = nn.Linear(4, 4)
    x = torch.randn(3, 4)

    def fast() -> dict[str, torch.Tensor]:
        return {k: v * 1.5 for k, v in body.named_parameters()}

    class Theirs(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, x):
            return torch_checkpoint.checkpoint(lambda t: self.body(t).tanh(), x, use_reentrant=False)

    class Ours(Theirs):
        def forward(self, x):
            return checkpoint(lambda t: self.body(t).tanh(), x)

    def grad(module: nn.Module) -> torch.Tensor:
        out = functional_call(module, {f"body.{k}": v for k, v in fast().items()}, (x,))
        out.sum().backward()
        g = body.weight.grad.clone()
        body.zero_grad(set_to_none=True)
        return g

    functional_call(body, fast(), (x,)).tanh().sum().backward()  # eager
    eager = body.weight.grad.clone()
    body.zero_grad(set_to_none=True)
    assert torch.equal(grad(Ours()), eager)
    assert not torch.equal(grad(Theirs()), eager)


# --------------------------------------------------------------------------- smaller defects


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = None

    def forward(self, x):
        y = self.lin(x)
        return (y * self.scale).tanh() if self.scale is not None else y.tanh()


@pytest.mark.parametrize(("at_forward", "later"), [(None, 2.0), (3.0, None), (None, [1, 2])])
def test_an_optional_attribute_is_replayed_as_the_forward_saw_it_and_left_as_set(at_forward, later):
    module = _Scaled()
    module.scale = at_forward
    x = torch.randn(3, 4, requires_grad=True)
    module(x).sum().backward()
    eager = x.grad.clone()
    x.grad = None
    y = checkpoint(module, x, state=[module])
    module.scale = later
    y.sum().backward()
    assert torch.equal(eager, x.grad)
    assert module.scale == later and type(module.scale) is type(later)


def test_a_declared_sparse_tensor_and_a_sparse_buffer_replay():
    adjacency = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.tensor([1.0, 2.0, 3.0]), (3, 3))

    class Graph(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("adjacency", adjacency.clone())

        def forward(self, x):
            return torch.sparse.mm(self.adjacency, self.lin(x)).tanh()

    graph = Graph()
    x = torch.randn(3, 4, requires_grad=True)
    graph(x).sum().backward()
    eager = [x.grad.clone(), graph.lin.weight.grad.clone()]
    x.grad, graph.lin.weight.grad = None, None
    checkpoint(graph, x, state=[graph]).sum().backward()
    assert torch.equal(eager[0], x.grad) and torch.equal(eager[1], graph.lin.weight.grad)
    x.grad = None
    torch.sparse.mm(adjacency, x).tanh().sum().backward()
    eager = x.grad.clone()
    x.grad = None
    checkpoint(lambda t: torch.sparse.mm(adjacency, t).tanh(), x, state=[adjacency]).sum().backward()
    assert torch.equal(eager, x.grad)


def test_rebinding_a_buffer_to_the_tensor_it_holds_is_not_a_rebinding():
    """spectral_norm's power iteration does ``self._u = normalize(..., out=self._u)``."""
    from torch.nn.utils.parametrizations import spectral_norm

    torch.manual_seed(0)
    layer = spectral_norm(nn.Linear(4, 4))
    norm = layer.parametrizations.weight[0]
    x = torch.randn(3, 4, requires_grad=True)
    # Undeclared: the in-place write through out= is still refused, naming the buffer's write,
    # not a rebinding.
    with pytest.raises(UndeclaredStateError) as refused:
        checkpoint(layer, x)
    assert "_u" in str(refused.value) and "(re)bound" not in str(refused.value)
    # Declaring the buffers as tensors (what auto declares) is enough, and the replay is exact.
    torch.manual_seed(0)
    layer = spectral_norm(nn.Linear(4, 4))
    norm = layer.parametrizations.weight[0]
    torch.manual_seed(0)
    twin = spectral_norm(nn.Linear(4, 4))
    twin(x).sum().backward()
    eager = x.grad.clone()
    x.grad = None
    checkpoint(layer, x, state=[norm._u, norm._v]).sum().backward()
    assert torch.equal(eager, x.grad)
    assert torch.equal(norm._u, twin.parametrizations.weight[0]._u)


def test_the_replay_runs_under_the_tensor_attributes_a_hypernetwork_bound():
    """A hypernetwork binds generated weights as plain attributes and the next ones before backward."""
    layer = nn.Linear(4, 4)
    del layer.weight
    source = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(3, 4)

    def gradient(run) -> torch.Tensor:
        layer.weight = source * 1.0
        y = run(lambda t: layer(t).tanh(), x)
        layer.weight = source * 2.0  # the next step's weights, bound before this backward
        y.sum().backward()
        grad = source.grad.clone()
        source.grad = None
        return grad

    eager = gradient(lambda f, t: f(t))
    assert torch.equal(gradient(checkpoint), eager)
    assert not torch.equal(gradient(lambda f, t: torch_checkpoint.checkpoint(f, t, use_reentrant=False)), eager)
