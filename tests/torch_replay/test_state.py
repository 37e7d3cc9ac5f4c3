"""stateaware.torch_replay.checkpoint at the contract's edge: read-only state,
generators, non-leaf in-place writes, module state beyond buffer bytes, wrapper subclasses,
per-call cost on deep models, shared snapshots. Eager (uncheckpointed) runs are the reference."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

from stateaware.torch_replay import Region, UndeclaredStateError, checkpoint
from stateaware.torch_replay import preserve as preserve_module

D = torch.float64


def _x(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, dtype=D, generator=g).requires_grad_()


# --------------------------------------------------------------------------- 1. read-only state


@pytest.mark.parametrize("how", ["closure", "keyword", "positional", "module"])
def test_undeclared_read_only_tensor_changed_before_backward_raises(how):
    mem = torch.linspace(-1, 1, 6, dtype=D)
    x = _x()
    if how == "keyword":
        out = checkpoint(lambda x, m: torch.tanh(x + m), x, m=mem)  # tanh saves only its output
    elif how == "positional":
        out = checkpoint(lambda x, m: torch.tanh(x + m), x, mem)
    elif how == "module":
        holder = torch.nn.Module()
        holder.register_buffer("mem", mem)
        out = checkpoint(lambda x: torch.tanh(x + holder.mem), x)
    else:
        out = checkpoint(lambda x: torch.tanh(x + mem), x)
    mem.mul_(3)  # the "next step" changes what the forward read
    want = {
        "closure": r"mem \(shape \(6,\)",
        "keyword": r"keyword argument 'm' \(shape",
        "positional": r"argument 1 \(shape",
        "module": r"holder\.mem \(Module\)",
    }[how]
    with pytest.raises(UndeclaredStateError, match=want) as info:
        out.sum().backward()
    assert "modified in place before the replay" in str(info.value)


def test_read_only_change_that_eager_ignores_is_wrong_in_native_checkpoint():
    # The reason for the error above: native differentiates the changed value silently.
    mem = torch.linspace(-1, 1, 6, dtype=D)
    x = _x()
    eager = torch.autograd.grad(torch.tanh(x + mem).sum(), x)[0]
    out = torch.utils.checkpoint.checkpoint(lambda x, m: torch.tanh(x + m), x, m=mem, use_reentrant=False)
    mem.mul_(3)
    assert not torch.allclose(torch.autograd.grad(out.sum(), x)[0], eager)


def test_state_other_segments_write_is_not_reported_for_segments_that_do_not_read_it():
    # Per-layer checkpointing through a bound method reaches every layer's BatchNorm; each
    # segment declares only its own, and the later layers' writes are not this one's reads.
    def run(how):
        torch.manual_seed(0)
        net = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)) for _ in range(3)
        ).double()
        x = torch.randn(8, 4, dtype=D, requires_grad=True)

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def layer(self, i, h):
                return torch.tanh(self.net[i](h))

        model = Model()
        h = x
        for i in range(3):
            h = model.layer(i, h) if how == "eager" else checkpoint(model.layer, i, h, state=[net[i]])
        h.square().sum().backward()
        return [x.grad] + [p.grad for p in net.parameters()] + [b.clone() for b in net.buffers()]

    for a, b in zip(run("ours"), run("eager"), strict=True):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- 2. generators


def _noisy(how, declare=True):
    g = torch.Generator().manual_seed(5)
    x = _x()

    def seg(x):
        return torch.tanh(x * torch.rand(6, dtype=D, generator=g))

    if how == "eager":
        out = seg(x)
    else:
        out = checkpoint(seg, x, state=[g] if declare else [])
    out.square().sum().backward(retain_graph=True)
    g1 = x.grad.clone()
    x.grad = None
    out.square().sum().backward()
    return g1, x.grad.clone(), g.get_state(), torch.rand(3, generator=g)


def test_declared_generator_replays_its_draws_and_advances_once():
    ref, ours = _noisy("eager"), _noisy("ours")
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(a, b)


def test_undeclared_generator_drawn_from_raises_and_names_it():
    with pytest.raises(UndeclaredStateError, match=r"\n  g: its state moved"):
        _noisy("ours", declare=False)


# --------------------------------------------------------------------------- 3. non-leaf in place


def _nonleaf(how, preserve="whole"):
    x = _x()
    h = _x(seed=2)
    a = x * 2  # non-leaf, requires grad

    def seg(h):
        a.add_(h)  # in place, with grad enabled: autograd history on `a` (the replay runs it too)
        return torch.tanh(h + a)  # add saves nothing; tanh saves its output

    y = (
        seg(h)
        if how == "eager"
        else checkpoint(
            seg, h, state=[Region(a, torch.tensor([0]))] if preserve == "region" else [a], preserve=preserve
        )
    )
    fn, version = a.grad_fn, a._version
    y.sum().backward(retain_graph=True)
    assert a.grad_fn is fn and a._version == version  # the replay left a's history as it was
    first = (x.grad.clone(), h.grad.clone())
    (a * 3).sum().backward()  # a later backward through a's history
    return first + (x.grad.clone(), h.grad.clone(), a.detach().clone())


@pytest.mark.parametrize("preserve", ["whole", "region"])
def test_declared_non_leaf_written_in_place_keeps_eager_history(preserve):
    ref, ours = _nonleaf("eager"), _nonleaf("ours", preserve)
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- 4. module state


class Ring(torch.nn.Module):
    """A ring queue with a Python-int pointer: reads the queue, writes one row, moves on."""

    def __init__(self):
        super().__init__()
        self.register_buffer("queue", torch.linspace(-1, 1, 12, dtype=D).reshape(4, 3).clone())
        self.ptr = 0

    def forward(self, x):
        r = torch.tanh(x + self.queue[self.ptr] * self.queue.mean(0))
        with torch.no_grad():
            self.queue[self.ptr] = r.detach()
        self.ptr = (self.ptr + 1) % 4
        return r


class Rebinder(torch.nn.Module):
    """Shifts its memory by rebinding the buffer (nn.Module.__setattr__ -> _buffers)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mem", torch.linspace(0.5, 1.5, 3, dtype=D))

    def forward(self, x):
        r = torch.sin(x * self.mem)
        self.mem = torch.cat([self.mem[1:], r.detach()[:1]])
        return r


@pytest.mark.parametrize("cls", [Ring, Rebinder])
def test_declared_module_pointer_and_rebound_buffer_are_written_once(cls):
    def run(how):
        m = cls()
        x = torch.tensor([0.3, -0.2, 0.7], dtype=D, requires_grad=True)
        outs = []
        for _ in range(2):  # two segments before one backward: the second changes the state again
            outs.append(m(x) if how == "eager" else checkpoint(m, x, state=[m]))
        sum(o.square().sum() for o in outs).backward()
        state = (m.ptr,) if cls is Ring else ()
        return (x.grad.clone(), *[b.clone() for b in m.buffers()], *state)

    ref, ours = run("eager"), run("ours")
    assert len(ref) == len(ours)
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))


def test_undeclared_module_buffer_rebinding_raises_at_forward():
    m = Rebinder()
    with pytest.raises(UndeclaredStateError, match="Rebinder: buffer 'mem' was \\(re\\)bound"):
        checkpoint(m, torch.ones(3, dtype=D, requires_grad=True))


def test_param_data_write_raises_unless_the_parameter_is_declared():
    def make():
        torch.manual_seed(0)
        return torch.nn.Linear(3, 3).double()

    def seg(lin, x):
        y = torch.tanh(lin(x))
        lin.weight.data.mul_(0.5)  # a weight decay hidden in the forward
        return y

    lin = make()
    x = torch.ones(2, 3, dtype=D, requires_grad=True)
    with pytest.raises(UndeclaredStateError, match=r"weight \(Linear\).*written through its \.data alias"):
        checkpoint(seg, lin, x, state=[lin])

    def run(how):
        lin = make()
        x = torch.ones(2, 3, dtype=D, requires_grad=True)
        # Eager differentiates the weight as the `.data` write left it (autograd cannot see
        # the write); the replay reproduces that only when it runs to the end.
        y = seg(lin, x) if how == "eager" else checkpoint(seg, lin, x, state=[lin.weight], early_stop=False)
        y.sum().backward()
        return x.grad, lin.weight.grad, lin.bias.grad, lin.weight.detach().clone()

    for a, b in zip(run("ours"), run("eager"), strict=True):
        assert torch.equal(a, b)


class CustomNorm(torch.nn.Module):
    """Running statistics kept as plain attributes (not registered buffers)."""

    def __init__(self):
        super().__init__()
        self.rm = torch.zeros(3, dtype=D)
        self.rv = torch.ones(3, dtype=D)

    def forward(self, x):
        return torch.tanh(F.batch_norm(x, self.rm, self.rv, training=True, momentum=0.5))


def test_batch_norm_on_plain_attribute_buffers():
    def run(how):
        m = CustomNorm()
        x = torch.linspace(-2, 3, 12, dtype=D).reshape(4, 3).requires_grad_()
        y = m(x) if how == "eager" else checkpoint(m, x, state=[m])
        y.sum().backward()
        return x.grad, m.rm.clone(), m.rv.clone()

    for a, b in zip(run("ours"), run("eager"), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(UndeclaredStateError, match=r"rm \(CustomNorm, plain attribute\).*running statistic"):
        checkpoint(CustomNorm(), torch.ones(4, 3, dtype=D, requires_grad=True))


# --------------------------------------------------------------------------- 5. wrapper subclasses


class Wrapped(torch.Tensor):
    """A minimal ``__torch_dispatch__`` wrapper (as DTensor and float8 tensors are)."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inners, ctx, size, stride):
        return Wrapped(inners["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, Wrapped) else t  # noqa: E731
        out = func(*pytree.tree_map(unwrap, args), **pytree.tree_map(unwrap, kwargs or {}))
        if func._schema.is_mutable:
            return args[0]
        if func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default):
            return Wrapped(out)
        return out


@pytest.mark.parametrize("preserve", ["whole", "region"])
def test_declared_wrapper_subclass_is_preserved_through_its_inner_tensor(preserve):
    def run(how):
        buf = Wrapped(torch.linspace(-1, 1, 6, dtype=D))
        x = _x()

        def seg(x):
            r = torch.tanh(x + buf)
            with torch.no_grad():
                buf.mul_(2)
            return r

        state = [Region(buf, torch.tensor([1, 2]))] if preserve == "region" else [buf]
        out = seg(x) if how == "eager" else checkpoint(seg, x, state=state, preserve=preserve)
        out.square().sum().backward()
        return x.grad, buf.inner.clone()

    ref, ours = run("eager"), run("ours")
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- 6. per-call cost


def test_per_layer_calls_do_not_walk_the_model(monkeypatch):
    class Deep(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

        def layer(self, i, h):
            return torch.tanh(self.layers[i](h))

    model = Deep(48)
    walks = []
    for name in ("modules", "named_modules", "parameters", "named_parameters", "buffers", "named_buffers"):
        original = getattr(torch.nn.Module, name)
        monkeypatch.setattr(
            torch.nn.Module, name, lambda self, *a, _o=original, _n=name, **k: (walks.append(_n), _o(self, *a, **k))[1]
        )
    h = checkpoint(model.layer, 0, torch.randn(2, 4, requires_grad=True))  # may fill the device cache
    walks.clear()
    for i in range(1, 48):
        h = checkpoint(model.layer, i, h)
    assert walks == []  # no call walks the model again
    h.sum().backward()


def test_buffer_rebound_after_the_cache_was_filled_is_still_caught():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mem", torch.zeros(4))

        def step(self, h):
            self.mem.add_(1)
            return h * 2

    net = Net()
    h = torch.ones(4, requires_grad=True)
    checkpoint(net.step, h, state=[net])  # fills every cache
    net.mem = torch.ones(4)  # rebinds the buffer
    with pytest.raises(UndeclaredStateError, match=r"Net\.mem \(Net\)"):
        checkpoint(net.step, h)


# --------------------------------------------------------------------------- 8. shared snapshots


@pytest.mark.parametrize("preserve", ["whole", "region"])
def test_one_snapshot_per_version_not_per_segment(preserve):
    gc.collect()
    before = len(preserve_module._shared)

    def run(how, write_between=False):
        buf = torch.linspace(-1, 1, 32, dtype=D).reshape(8, 4).clone()
        rows = torch.tensor([0, 3])
        x = torch.ones(4, dtype=D, requires_grad=True)
        h = x
        for k in range(4):
            state = [Region(buf, rows)] if preserve == "region" else [buf]
            h = (
                torch.tanh(h * buf.mean(0))
                if how == "eager"
                else checkpoint(lambda h: torch.tanh(h * buf.mean(0)), h, state=state, preserve=preserve)
            )
            if write_between and k == 1:
                with torch.no_grad():
                    buf[3] += 1
        copies = len(preserve_module._shared) - before
        h.sum().backward()
        return x.grad, copies

    (grad, copies), (ref, _) = run("ours"), run("eager")
    assert copies == 1 and torch.equal(grad, ref)
    assert run("ours", write_between=True)[1] == 2  # a new version gets its own copy
    gc.collect()
    assert len(preserve_module._shared) == before  # entries die with the graphs


def test_a_write_without_a_version_bump_inside_a_segment_is_not_shared_over():
    # seg1 writes buf through `.data` (no version bump); seg2 reads buf. A snapshot keyed by
    # version alone would hand seg2's replay seg1's pre-write copy.
    def run(how):
        buf = torch.linspace(-1, 1, 6, dtype=D)
        x = _x()

        def seg1(h):
            r = torch.tanh(h + buf)
            buf.data.add_(1.0)
            return r

        def seg2(h):
            return torch.tanh(h * buf)

        if how == "eager":
            out = seg2(seg1(x))
        else:
            out = checkpoint(seg2, checkpoint(seg1, x, state=[buf]), state=[buf])
        out.sum().backward()
        return x.grad, buf.clone()

    for a, b in zip(run("ours"), run("eager"), strict=True):
        assert torch.equal(a, b)


def test_declared_module_replays_in_the_training_mode_of_its_forward():
    # `training` is one of the module's Python numbers: eval() before backward must not
    # turn the replay's dropout off.
    def run(how):
        torch.manual_seed(4)
        m = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.5)).double()
        x = torch.randn(3, 6, dtype=D, requires_grad=True)
        out = m(x) if how == "eager" else checkpoint(m, x, state=[m])
        m.eval()
        out.sum().backward()
        return x.grad, m[0].weight.grad, m.training

    ref, ours = run("eager"), run("ours")
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1]) and ours[2] is ref[2] is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_declared_cuda_generator_replays_its_draws():
    def run(how):
        g = torch.Generator(device="cuda").manual_seed(9)
        x = torch.randn(64, device="cuda", requires_grad=True)

        def seg(x):
            return torch.tanh(x * torch.rand(64, device="cuda", generator=g))

        out = seg(x) if how == "eager" else checkpoint(seg, x, state=[g])
        out.square().sum().backward()
        return x.grad, g.get_state()

    for a, b in zip(run("ours"), run("eager"), strict=True):
        assert torch.equal(a, b)


def test_recomputed_shape_differs_from_the_forward_raises_replay_error():
    from stateaware.torch_replay import ReplayError

    n = [4]
    x = _x()
    out = checkpoint(lambda x: torch.tanh(x[: n[0]]).sum(), x)  # tanh saves its (n,) output
    n[0] = 3  # a Python value the segment reads changes before the replay
    with pytest.raises(
        ReplayError,
        match=r"(?s)different metadata.*position 0:\nsaved metadata: \{'shape': "
        r"torch.Size\(\[4\]\).*recomputed metadata: \{'shape': torch.Size\(\[3\]\)",
    ):
        out.backward()


# --------------------------------------------------------------------------- documented limits, pinned


def test_limit_an_undeclared_modules_python_pointer_is_not_watched():
    # Docstring, Limits: an undeclared module's Python attributes are not watched. The
    # forward moves only a Python int (no tensor write), so nothing is reported, and the
    # replay reads the moved pointer: a wrong gradient. Declaring the module fixes it.
    class Pointer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.linspace(1, 2, 4, dtype=D))
            self.ptr = 0

        def forward(self, x):
            r = torch.tanh(x * self.table[self.ptr])
            self.ptr += 1
            return r

    def run(how):
        m, x = Pointer(), _x()
        out = m(x) if how == "eager" else checkpoint(m, x, state=[m] if how == "declared" else [])
        out.sum().backward()
        return x.grad, m.ptr

    eager, undeclared, declared = run("eager"), run("undeclared"), run("declared")
    assert not torch.allclose(undeclared[0], eager[0]) and undeclared[1] == eager[1] == 1
    assert torch.equal(declared[0], eager[0]) and declared[1] == 1


def test_limit_a_data_write_outside_any_segment_is_not_seen_by_snapshot_sharing():
    # Docstring, Limits / NOTE [ Shared snapshots ]: sharing trusts version counters. A
    # `.data` write between two segments that declare the same tensor, outside both, does
    # not bump the version, so the second segment's replay reuses the first's copy.
    def run(how, bump):
        buf = torch.linspace(-1, 1, 6, dtype=D)
        x = _x()

        def seg(h):
            return torch.tanh(h + buf)  # add saves nothing; tanh saves its output

        h = seg(x) if how == "eager" else checkpoint(seg, x, state=[buf])
        if bump:
            buf.add_(1.0)  # an in-place write bumps the version: a new copy
        else:
            buf.data.add_(1.0)  # invisible to version counters
        out = seg(h) if how == "eager" else checkpoint(seg, h, state=[buf])
        out.sum().backward()
        return x.grad

    assert torch.equal(run("ours", bump=True), run("eager", bump=True))
    assert not torch.allclose(run("ours", bump=False), run("eager", bump=False))
