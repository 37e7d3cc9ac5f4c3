"""Rule 6 learned on a segment's first call and re-checked by version counter after
(``stateaware.torch_replay._learned_reads``): the same errors as recording every call,
without a Python call per torch op on the calls after the first."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.torch_replay import READ_RECORDING, UndeclaredStateError, _reads, checkpoint, set_read_recording

D = torch.float64


@pytest.fixture(autouse=True)
def _fresh_profiles():
    set_read_recording("first_call")  # also forgets every learned profile
    yield
    set_read_recording("first_call")


@pytest.fixture
def recorded_ops(monkeypatch):
    """How many torch calls went through the per-op recorder."""
    calls = []
    original = _reads.Touched.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        calls.append(func)
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(_reads.Touched, "__torch_function__", counting)
    return calls


def _x(seed=1):
    return torch.randn(6, dtype=D, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def test_calls_after_the_first_do_not_record_ops_and_still_catch_a_closure_change(recorded_ops):
    mem = torch.linspace(-1, 1, 6, dtype=D)

    def segment(x):
        return torch.tanh(x + mem)  # tanh saves only its output: mem is read, not saved

    checkpoint(segment, _x()).sum().backward()
    first = len(recorded_ops)
    assert first > 0
    out = checkpoint(segment, _x(2))
    assert len(recorded_ops) == first  # the second call ran on the learned profile
    mem.mul_(3)
    with pytest.raises(UndeclaredStateError, match=r"mem \(shape \(6,\)"):
        out.sum().backward()


@pytest.mark.parametrize("how", ["keyword", "positional", "module"])
def test_new_argument_objects_each_call_are_watched_by_position(how, recorded_ops):
    holder = torch.nn.Module()
    holder.register_buffer("mem", torch.zeros(6, dtype=D))

    def call(mem):
        if how == "keyword":
            return checkpoint(lambda x, m: torch.tanh(x + m), x, m=mem)
        if how == "positional":
            return checkpoint(lambda x, m: torch.tanh(x + m), x, mem)
        holder.mem.copy_(mem)
        return checkpoint(lambda x: torch.tanh(x + holder.mem), x)

    x = _x()
    call(torch.ones(6, dtype=D)).sum().backward()
    # A lambda made per call is a new function object with the same code: one profile.
    recorded = len(recorded_ops)
    fresh = torch.full((6,), 2.0, dtype=D)
    out = call(fresh)
    assert len(recorded_ops) == recorded
    (holder.mem if how == "module" else fresh).mul_(3)
    want = {
        "keyword": r"keyword argument 'm'",
        "positional": r"argument 1 \(shape",
        "module": r"holder\.mem \(Module\)",
    }[how]
    with pytest.raises(UndeclaredStateError, match=want):
        out.sum().backward()


def test_an_index_argument_picks_what_is_read():
    # Per-layer checkpointing through a bound method: call i reads layer i's parameters.
    class Deep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4).double() for _ in range(3))

        def layer(self, i, h):
            return torch.tanh(self.layers[i](h))

    model = Deep()
    h = torch.randn(2, 4, dtype=D, requires_grad=True)
    checkpoint(model.layer, 0, h).sum().backward()
    out = checkpoint(model.layer, 1, h)
    with torch.no_grad():
        model.layers[1].bias.add_(1)  # what call 1 read, not what call 0 read
    with pytest.raises(UndeclaredStateError, match=r"layers\.1\.bias"):
        out.sum().backward()


@pytest.mark.parametrize("switched", ["the called module", "a norm inside it"])
def test_a_norm_switched_to_training_after_the_first_call_is_still_caught(switched):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3)).double()
    model.eval() if switched == "the called module" else model[1].eval()  # BN frozen: reads, writes nothing
    x = torch.randn(4, 3, dtype=D, requires_grad=True)
    checkpoint(model, x).sum().backward()
    model.train()  # now the same call writes running statistics silently: a new key, recorded
    with pytest.raises(UndeclaredStateError, match="running statistic"):
        checkpoint(model, x)


def test_a_rebound_plain_attribute_is_learned_again():
    m = torch.nn.Module()
    m.scale = torch.full((6,), 2.0, dtype=D)  # a plain tensor attribute: no registration hook
    segment = lambda x: torch.tanh(x * m.scale)  # noqa: E731
    checkpoint(segment, _x()).sum().backward()
    m.scale = torch.full((6,), 3.0, dtype=D)  # the learned tensor dies: the next call records again
    out = checkpoint(segment, _x())
    m.scale.add_(1)
    with pytest.raises(UndeclaredStateError, match="modified in place before the replay"):
        out.sum().backward()


def test_every_call_records_each_call(recorded_ops):
    set_read_recording("every_call")
    mem = torch.ones(6, dtype=D)
    segment = lambda x: torch.tanh(x + mem)  # noqa: E731
    checkpoint(segment, _x()).sum().backward()
    first = len(recorded_ops)
    checkpoint(segment, _x()).sum().backward()
    assert len(recorded_ops) == 2 * first


def test_unknown_mode_names_the_allowed_values():
    with pytest.raises(ValueError, match="allowed values are: first_call, every_call"):
        set_read_recording("sometimes")
    for mode in READ_RECORDING:  # every value the error names is accepted
        set_read_recording(mode)


def _run(mode: str, program: list[tuple[int, int, int]], reads: tuple[bool, bool, bool, bool]):
    """Calls of one segment over closure tensors a, b and a positional c, and (with the
    fourth flag) the closure tensor an index argument picks; after each call's forward,
    tensor ``changed`` (0..3, 3 = none) is written in place; returns per call the error
    (type and first line) or the gradient."""
    set_read_recording(mode)
    a, b = torch.linspace(0, 1, 6, dtype=D), torch.linspace(1, 2, 6, dtype=D)
    use_a, use_b, use_c, use_pick = reads

    def segment(x, c, pick):
        h = x
        if use_a:
            h = h + a
        if use_b:
            h = h * b
        if use_c:
            h = h - c
        if use_pick:
            h = h / (2 + (a, b)[pick])
        return torch.tanh(h)

    out = []
    for seed, changed, pick in program:
        c = torch.full((6,), 0.5, dtype=D)
        x = _x(seed)
        y = checkpoint(segment, x, c, pick)
        if changed < 3:
            (a, b, c)[changed].add_(0.25)
        try:
            out.append(torch.autograd.grad(y.sum(), x)[0])
        except (UndeclaredStateError, RuntimeError) as exc:  # c: autograd's own saved-input check
            out.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    return out


@settings(max_examples=20, deadline=None)
@given(
    program=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 1)), min_size=1, max_size=5),
    reads=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
)
def test_learned_profiles_raise_exactly_when_recording_every_call_does(program, reads):
    every, first = _run("every_call", program, reads), _run("first_call", program, reads)
    assert len(every) == len(first)
    for e, f in zip(every, first, strict=True):
        if isinstance(e, str):
            assert e == f
        else:
            assert isinstance(f, torch.Tensor) and torch.equal(e, f)


def test_a_shorter_list_argument_than_the_learned_call_is_learned_again():
    mem = torch.ones(6, dtype=D)

    def segment(x, extras):
        for e in extras:
            x = x + e
        return torch.tanh(x + mem)

    a, b = torch.zeros(6, dtype=D), torch.ones(6, dtype=D)
    checkpoint(segment, _x(), [a, b]).sum().backward()  # learns extras[0] and extras[1]
    out = checkpoint(segment, _x(), [a])  # one item: no extras[1] to watch, so recorded
    a.add_(1)
    with pytest.raises(UndeclaredStateError, match="modified in place before the replay"):
        out.sum().backward()


def _bn_block():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).double()


def test_a_declared_batchnorm_is_learned_once_and_trains_as_eager(recorded_ops):
    # Its running statistics are written without a version bump: declared, they need not
    # be watched, so the calls after the first run on the learned profile.
    model, eager = _bn_block(), _bn_block()
    recorded = []
    for step in range(3):
        x = torch.randn(5, 4, dtype=D, generator=torch.Generator().manual_seed(step), requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        checkpoint(model, x, state=[model]).square().sum().backward()
        eager(xe).square().sum().backward()
        assert torch.equal(x.grad, xe.grad)
        recorded.append(len(recorded_ops))
    assert recorded[0] > 0 and recorded[1] == recorded[2] == recorded[0]
    for (name, a), b in zip(model.state_dict().items(), eager.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_learned_calls_still_report_a_declared_silent_write_to_later_snapshots():
    # Two segments declare the same BatchNorm; the first writes its running mean without a
    # version bump, and the second multiplies by it: the second's snapshot must be taken
    # after the first's write on learned calls too (NOTE [ Shared snapshots ] in preserve).
    bn, bn_eager = torch.nn.BatchNorm1d(4).double(), torch.nn.BatchNorm1d(4).double()

    def segment(h, norm):
        return norm(h) * (1 + norm.running_mean)

    for step in range(3):
        x = torch.randn(5, 4, dtype=D, generator=torch.Generator().manual_seed(step), requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        h = checkpoint(segment, x, bn, state=[bn])
        checkpoint(segment, h, bn, state=[bn]).square().sum().backward()
        segment(segment(xe, bn_eager), bn_eager).square().sum().backward()
        assert torch.equal(x.grad, xe.grad), step
    assert torch.equal(bn.running_mean, bn_eager.running_mean)
