"""stateaware.torch_replay.checkpoint as a drop-in for torch's non-reentrant checkpoint.

What callers of ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` rely on
besides the replay itself: ``context_fn`` (selective activation checkpointing), ``debug``
and the global switches, ``GraphExecGroup``, backward inside a segment through a nested
checkpoint, the curried form, ``CheckpointError`` — and that our own keywords never take
the function's. Each program's eager run is the reference; float64 and exact equality.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.utils.checkpoint as tuc
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointError, CheckpointPolicy, create_selective_checkpoint_contexts

from stateaware.torch_replay import ReplayError, UndeclaredStateError, checkpoint, transaction

F64 = torch.float64


class _CountOps(TorchDispatchMode):
    """Counts the aten ops that run under it, by overload."""

    def __init__(self):
        super().__init__()
        self.counts: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func] = self.counts.get(func, 0) + 1
        return func(*args, **(kwargs or {}))


def _leaves(*shape, n=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, dtype=F64, generator=g).requires_grad_() for _ in range(n)]


class Memory(torch.nn.Module):
    """A segment that reads a buffer, then updates it (declared state)."""

    def __init__(self, n: int):
        super().__init__()
        self.register_buffer("mem", torch.linspace(-1, 1, n, dtype=F64).repeat(n, 1))

    def forward(self, x, w):
        h = torch.tanh(torch.mm(x, w) + self.mem)
        with torch.no_grad():
            self.mem.mul_(0.5).add_(h * 0.25)
        return torch.mm(h, w).sin()


# --------------------------------------------------------------------------- context_fn / SAC


def test_selective_policy_saves_listed_ops_and_replay_still_governs_declared_state():
    def program(how):
        torch.manual_seed(0)
        m = Memory(6)
        x, w = _leaves(6, 6)
        saved = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])
        with _CountOps() as ops:
            if how == "eager":
                out = m(x, w)
            else:
                out = checkpoint(m, x, w, state=[m], context_fn=saved)
            forward_mm = ops.counts.get(torch.ops.aten.mm.default, 0)
            forward_tanh = ops.counts.get(torch.ops.aten.tanh.default, 0)
            with torch.no_grad():
                m.mem.add_(100.0)  # a later writer: the replay must still see the forward's mem
            gx, gw = torch.autograd.grad(out.sum(), (x, w))
        replay_tanh = ops.counts.get(torch.ops.aten.tanh.default, 0) - forward_tanh
        return gx, gw, m.mem.clone(), forward_mm, replay_tanh

    ref, ours = program("eager"), program("ours")
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    assert torch.equal(ours[2], ref[2])  # the segment's write happened once
    assert ours[3] == ref[3] == 2
    assert ours[4] == 1  # tanh (not in the list) is recomputed; mm comes from the cache


def test_selective_policy_function_decides_per_op():
    x, y = _leaves(4, 4)

    def fn(x, y):
        return torch.sigmoid(torch.mm(torch.mm(x, y), y)) * y

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.sigmoid.default else CheckpointPolicy.PREFER_RECOMPUTE

    ref = torch.autograd.grad(fn(x, y).sum(), (x, y))
    out = checkpoint(fn, x, y, context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
    with _CountOps() as ops:
        got = torch.autograd.grad(out.sum(), (x, y))
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    assert ops.counts.get(torch.ops.aten.sigmoid.default, 0) == 0  # cached, not recomputed
    assert ops.counts[torch.ops.aten.mm.default] == 2 + 4  # replayed forward mms + backward mms


def test_torch_keywords_never_reach_the_function():
    seen = {}

    def fn(x, **kwargs):
        seen.update(kwargs)
        return x.sin()

    (x,) = _leaves(3, n=1)
    out = checkpoint(
        fn,
        x,
        use_reentrant=False,
        context_fn=tuc.noop_context_fn,
        debug=False,
        determinism_check="default",
        early_stop=True,
        respect_saved_tensors_hooks=None,
        scale=2,
    )
    out.sum().backward()
    assert seen == {"scale": 2}
    assert torch.equal(x.grad, x.detach().cos())


def test_debug_and_context_fn_together_are_refused_like_torch():
    (x,) = _leaves(3, n=1)
    with pytest.raises(ValueError, match="debug=True is incompatible with non-default context_fn"):
        checkpoint(torch.sin, x, debug=True, context_fn=functools.partial(create_selective_checkpoint_contexts, []))


def _grows_on_replay():
    calls = [0]

    def fn(x):
        calls[0] += 1
        return x.sin() if calls[0] == 1 else x.repeat(2).sin()

    return fn


@pytest.mark.parametrize("how", ["argument", "global switch"])
def test_debug_mode_reports_torch_operator_logs(how):
    (x,) = _leaves(3, n=1)
    if how == "argument":
        out = checkpoint(_grows_on_replay(), x, debug=True)
    else:
        with tuc.set_checkpoint_debug_enabled(True):
            out = checkpoint(_grows_on_replay(), x)
    with pytest.raises(CheckpointError, match="Operations executed during the original forward") as err:
        out.sum().backward()
    assert "aten.repeat" in str(err.value)  # the replay's log names the op that differs


def test_global_debug_switch_off_overrides_the_argument():
    (x,) = _leaves(3, n=1)
    with tuc.set_checkpoint_debug_enabled(False):
        out = checkpoint(_grows_on_replay(), x, debug=True)
    with pytest.raises(ReplayError) as err:
        out.sum().backward()
    assert "Operations executed" not in str(err.value)
    assert "Recomputed values for the following tensors have different metadata" in str(err.value)


# --------------------------------------------------------------------------- global early stop


def _runs_past_its_last_save(log):
    def fn(x):
        y = x.sin()  # saves x: the only tensor the segment saves
        log.append("after")
        return y

    return fn


@pytest.mark.parametrize("switch,replay_reaches_the_end", [(None, False), (False, True), (True, False)])
def test_global_early_stop_switch_overrides_the_argument(switch, replay_reaches_the_end):
    (x,) = _leaves(3, n=1)
    log = []
    if switch is None:
        out = checkpoint(_runs_past_its_last_save(log), x)
    else:
        with tuc.set_checkpoint_early_stop(switch):
            out = checkpoint(_runs_past_its_last_save(log), x, early_stop=not switch)
    out.sum().backward()  # outside the switch: it applies at the forward, as in torch
    assert log == ["after", "after"] if replay_reaches_the_end else log == ["after"]
    assert torch.equal(x.grad, x.detach().cos())


# --------------------------------------------------------------------------- GraphExecGroup


def test_graph_exec_group_replays_once_for_several_backward_calls():
    a, b = _leaves(4, 4)
    calls = [0]

    def fn(a, b):
        calls[0] += 1
        return a.sin() * 2, b.cos() * 3

    oa, ob = checkpoint(fn, a, b)
    with tuc.GraphExecGroup():
        (ga,) = torch.autograd.grad(oa.sum(), a)
        (gb,) = torch.autograd.grad(ob.sum(), b)
    assert calls[0] == 2  # the forward and one replay (three without the group)
    assert torch.equal(ga, a.detach().cos() * 2) and torch.equal(gb, -b.detach().sin() * 3)
    # without it, each backward call has its own replay
    oa, ob = checkpoint(fn, a, b)
    torch.autograd.grad(oa.sum(), a)
    torch.autograd.grad(ob.sum(), b)
    assert calls[0] == 5


def test_graph_exec_group_overlapping_backward_calls_get_torch_message():
    (a,) = _leaves(4, n=1)
    out = checkpoint(lambda a: a.sin(), a)
    with tuc.GraphExecGroup():
        torch.autograd.grad(out.sum(), a, retain_graph=True)
        with pytest.raises(
            CheckpointError,
            match="Unpack is being triggered for a tensor that was already unpacked once.*GraphExecGroup",
        ):
            torch.autograd.grad(out.sum(), a)


# --------------------------------------------------------------------------- backward inside a segment


def _inner(x):
    return x.sin().exp().sin()


@pytest.mark.parametrize("create_graph", [False, True])
def test_autograd_grad_inside_a_segment_through_a_nested_checkpoint(create_graph):
    def segment(x, nested):
        y = checkpoint(_inner, x) if nested else _inner(x)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=create_graph)
        return x.cos() * g

    (x,) = _leaves(5, n=1)
    ref = torch.autograd.grad(segment(x, nested=False).sum(), x)[0]
    out = checkpoint(segment, x, True)
    got = torch.autograd.grad(out.sum(), x, retain_graph=True)[0]
    assert torch.equal(got, ref)
    assert torch.equal(torch.autograd.grad(out.sum(), x)[0], ref)  # a second replay, same answer


def test_nested_checkpoint_inside_replay_keeps_declared_state_with_inner_grad():
    # The outer replay re-runs the inner checkpoint, whose own replay (for the inner grad)
    # must see the inner module's buffer as the inner forward saw it.
    def program(how):
        torch.manual_seed(0)
        m = Memory(4)
        x, w = _leaves(4, 4)

        def segment(x):
            h = checkpoint(m, x, w, state=[m]) if how == "ours" else m(x, w)
            (g,) = torch.autograd.grad(h.sum(), x, create_graph=True)
            return (g * x).sum()

        out = checkpoint(segment, x, state=[m]) if how == "ours" else segment(x)
        with torch.no_grad():
            m.mem.mul_(-3.0)
        return torch.autograd.grad(out, (x, w)), m.mem.clone()

    ref, ours = program("eager"), program("ours")
    assert all(torch.equal(a, b) for a, b in zip(ours[0], ref[0], strict=True))
    assert torch.equal(ours[1], ref[1])


def test_backward_inside_the_forward_without_early_stop():
    def segment(x):
        y = x.sin()
        z = y.cos()
        (g,) = torch.autograd.grad(z.sum(), x, retain_graph=True)
        return y * g

    (x,) = _leaves(5, n=1)
    ref = torch.autograd.grad(segment(x).sum(), x)[0]
    for stop in (True, False):
        out = checkpoint(segment, x, early_stop=stop)
        assert torch.equal(torch.autograd.grad(out.sum(), x)[0], ref)


# --------------------------------------------------------------------------- errors


def test_replay_errors_are_checkpoint_errors_with_torch_wording():
    assert issubclass(ReplayError, CheckpointError) and issubclass(UndeclaredStateError, CheckpointError)
    calls = [0]

    def fewer_on_replay(x):
        calls[0] += 1
        return x.sin().cos() if calls[0] == 1 else x.sin() + 0

    (x,) = _leaves(3, n=1)
    out = checkpoint(fewer_on_replay, x, early_stop=False)
    with pytest.raises(
        CheckpointError,
        match="A different number of tensors was saved during the original "
        "forward and recomputation.\nNumber of tensors saved during "
        "forward: 2\nNumber of tensors saved during recomputation: 1",
    ):
        out.sum().backward()

    calls[0] = 0

    def more_on_replay(x):
        calls[0] += 1
        return x.sin() if calls[0] == 1 else x.sin().cos()

    out = checkpoint(more_on_replay, x, early_stop=False)
    with pytest.raises(
        CheckpointError, match="trying to save more tensors during recomputation than during the original forward pass"
    ):
        out.sum().backward()


def test_undeclared_write_is_a_checkpoint_error():
    buf = torch.zeros(3, dtype=F64)

    def writes(x):
        buf.add_(1)
        return x.sin()

    (x,) = _leaves(3, n=1)
    with pytest.raises(CheckpointError, match="wrote state it did not declare"):
        checkpoint(writes, x)


# --------------------------------------------------------------------------- curried form


def test_curried_form_as_decorator_and_method():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mem", torch.ones(3, dtype=F64))

        @checkpoint(use_reentrant=False, state=(), preserve="whole")
        def run(self, x):
            return (x * self.mem).sin()

    b = Block()
    (x,) = _leaves(3, n=1)
    calls = []
    decorated = checkpoint(use_reentrant=False)(lambda x: calls.append(1) or x.sin())
    decorated(x).sum().backward()
    assert len(calls) == 2 and torch.equal(x.grad, x.detach().cos())
    x.grad = None
    b.run(x).sum().backward()
    assert torch.equal(x.grad, x.detach().cos())
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(use_reentrant=False, scale=2)


# --------------------------------------------------------------------------- our keywords vs the user's


def _cell(x, state=None):
    """A recurrent cell with a keyword named like ours."""
    h = torch.zeros_like(x) if state is None else state[0]
    return torch.tanh(x + h)


def test_a_function_keyword_named_state_is_refused_not_stolen():
    x, h = _leaves(4, n=2)
    with pytest.raises(
        TypeError,
        match=r"checkpoint\(fn, \.\.\., state=\.\.\.\): fn \(_cell\) takes a parameter "
        r"named 'state'.*transaction\(fn, state=",
    ):
        checkpoint(_cell, x, state=(h,))


def test_a_function_taking_kwargs_is_refused_for_both_keywords():
    def fn(x, **kwargs):
        return x.sin()

    class Net(torch.nn.Module):
        def forward(self, x, **kwargs):
            return x.sin()

    (x,) = _leaves(4, n=1)
    with pytest.raises(TypeError, match=r"preserve=\.\.\.\): fn .* takes \*\*kwargs"):
        checkpoint(fn, x, preserve="whole")
    with pytest.raises(TypeError, match=r"state=\.\.\.\): fn \(Net\) takes \*\*kwargs"):
        checkpoint(Net(), x, state=[])


def test_transaction_passes_every_keyword_to_the_function_and_declares_its_own():
    x, h = _leaves(4, n=2)
    mem = torch.linspace(0, 1, 4, dtype=F64)

    def cell(x, state=None, preserve=1.0):
        out = torch.tanh(x + state[0] * preserve + mem)
        with torch.no_grad():
            mem.add_(1.0)
        return out

    ref_mem = mem.clone()
    ref = torch.autograd.grad(cell(x, state=(h,), preserve=2.0).sum(), (x, h))
    mem.copy_(ref_mem)
    out = checkpoint(transaction(cell, state=[mem]), x, state=(h,), preserve=2.0)
    with torch.no_grad():
        mem.mul_(5)  # changed before backward: the declared snapshot keeps the replay right
    got = torch.autograd.grad(out.sum(), (x, h))
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
    assert transaction(cell, state=[mem])(x, state=(h,)).shape == (4,)  # outside checkpoint: just fn


def test_state_keyword_still_declares_when_the_function_cannot_take_it():
    m = Memory(4)
    x, w = _leaves(4, 4)
    out = checkpoint(m, x, w, state=[m])
    with torch.no_grad():
        m.mem.zero_()
    out.sum().backward()  # would raise UndeclaredStateError if state= were not ours
    assert x.grad is not None


def test_replay_creates_tensors_on_the_forwards_default_device():
    devices = []

    def fn(x):
        devices.append(torch.empty(2).device.type)  # no device given: the context's
        return x.sin()

    (x,) = _leaves(3, n=1)
    with torch.device("meta"):
        out = checkpoint(fn, x)
    out.sum().backward()  # outside the block: the replay re-enters it
    assert devices == ["meta", "meta"]
    assert torch.equal(x.grad, x.detach().cos())


def test_a_state_parameter_filled_positionally_leaves_state_keyword_ours():
    # def f(shape, state, ...) called as checkpoint(f, shape, s, ..., state=[s]): Python
    # could not pass state= to f as well, so the keyword is unambiguously the declaration.
    def segment(scale, state, x):
        out = torch.tanh(x * scale + state)
        with torch.no_grad():
            state.add_(1.0)
        return out

    (x,) = _leaves(4, n=1)
    state = torch.linspace(0, 1, 4, dtype=F64)
    ref_state = state.clone()
    ref = torch.autograd.grad(segment(2.0, ref_state.clone(), x).sum(), x)[0]
    out = checkpoint(segment, 2.0, state, x, state=[state])
    with torch.no_grad():
        state.mul_(7)  # a later writer; the declaration keeps the replay right
    assert torch.equal(torch.autograd.grad(out.sum(), x)[0], ref)
    with pytest.raises(TypeError, match="takes a parameter named 'state'"):
        checkpoint(segment, 2.0, x=x, state=[state])  # now `state` is free: ambiguous


def test_a_closure_made_per_call_reads_its_signature_once(monkeypatch):
    # checkpoint(lambda t: block(t), x, state=[...]) in a loop: a new function object per
    # call with one code object; its parameters are read once, not once per call.
    import stateaware.torch_replay._transaction as keywords

    reads = []
    signature = keywords.inspect.signature
    monkeypatch.setattr(keywords.inspect, "signature", lambda f: reads.append(f) or signature(f))
    mem = torch.zeros(4, dtype=F64)
    (x,) = _leaves(4, n=1)
    for _ in range(3):
        checkpoint(lambda t: torch.tanh(t + mem), x, state=[mem]).sum().backward()
    assert len(reads) == 1
    # A wrapper whose signature is another function's (functools.wraps) is still read as such.

    def taking_state(x, state=None):
        return x.sin()

    @functools.wraps(taking_state)
    def wrapper(*args):
        return taking_state(*args)

    with pytest.raises(TypeError, match=r"takes a parameter named 'state'"):
        checkpoint(wrapper, x, state=[mem])
