"""stateaware.torch_replay.checkpoint: every requirement, each against the native checkpoint.

Each test builds a program whose eager (uncheckpointed) run is the reference, shows the
native ``torch.utils.checkpoint`` getting it wrong where it should, and ours getting it
right: gradients and declared-state bytes equal to eager's.
"""

from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as native

from stateaware.torch_replay import Region, ReplayError, UndeclaredStateError, checkpoint

N = 12


class Memory(torch.nn.Module):
    """A module whose buffer the segment reads and then updates (a running statistic)."""

    def __init__(self, n: int = N, dtype=torch.float64):
        super().__init__()
        self.register_buffer("mem", torch.linspace(-1, 1, n, dtype=dtype))

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        r = torch.tanh(x * w + self.mem)  # the gradient depends on the mem it read
        with torch.no_grad():
            self.mem.mul_(0.5).add_(r * 0.25)
        return torch.nn.functional.dropout(r, 0.3, training=True)


def _leaves(dtype=torch.float64):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N, dtype=dtype, generator=g).requires_grad_()
    w = torch.rand(N, dtype=dtype, generator=g).add_(0.5).requires_grad_()
    return x, w


def _run(how: str, backward_passes: int = 1, dtype=torch.float64):
    """Run the Memory segment once under ``how``; grads per pass, final mem, RNG after."""
    torch.manual_seed(3)
    m = Memory(dtype=dtype)
    x, w = _leaves(dtype)
    if how == "eager":
        out = m(x, w)
    elif how == "native":
        out = native.checkpoint(m, x, w, use_reentrant=False)
    else:
        out = checkpoint(m, x, w, state=[m])
    loss = (out * torch.arange(N, dtype=dtype)).sum()
    grads = []
    for k in range(backward_passes):
        x.grad = w.grad = None
        loss.backward(retain_graph=k + 1 < backward_passes)
        grads.append((x.grad.clone(), w.grad.clone()))
    return grads, m.mem.clone(), torch.get_rng_state(), m.mem._version


def test_hidden_buffer_grads_and_bytes_match_eager_where_native_diverges():
    ref, nat, ours = _run("eager", 2), _run("native", 2), _run("ours", 2)
    assert not torch.equal(nat[1], ref[1])  # native replays the buffer update
    assert not torch.allclose(nat[0][0][0], ref[0][0][0])  # and differentiates the updated buffer
    assert torch.equal(ours[1], ref[1])  # ours: bytes identical
    for k in range(2):  # both backward passes over one graph (retain_graph=True)
        for a, b in zip(ours[0][k], ref[0][k], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-15)
    assert torch.equal(ours[2], ref[2])  # the RNG outside is where eager left it
    assert ours[3] == ref[3]  # Rule 4: the replays left no trace in the version counter
    assert nat[3] > ref[3]


def test_autograd_grad_twice_matches_eager():
    def grads(how):
        torch.manual_seed(3)
        m = Memory()
        x, w = _leaves()
        if how == "eager":
            out = m(x, w)
        elif how == "native":
            out = native.checkpoint(m, x, w, use_reentrant=False)
        else:
            out = checkpoint(m, x, w, state=[m])
        loss = out.square().sum()
        first = torch.autograd.grad(loss, (x, w), retain_graph=True)
        second = torch.autograd.grad(loss, (w,))
        return first, second, m.mem.clone()

    ref, nat, ours = grads("eager"), grads("native"), grads("ours")
    assert not torch.allclose(nat[0][0], ref[0][0]) and not torch.equal(nat[2], ref[2])
    for a, b in zip(ours[0] + ours[1], ref[0] + ref[1], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-15)
    assert torch.equal(ours[2], ref[2])


@pytest.mark.parametrize("preserve", ["whole", "region"])
def test_buffer_changed_between_forward_and_backward(preserve):
    # The segment only reads `mem` and *saves it for backward* (x * mem saves mem); then
    # the "next step" overwrites rows of mem before this backward runs. Replay must see
    # the old rows, and must not hand autograd the live storage the redo will overwrite.
    def program(how):
        mem = torch.linspace(-1, 1, N, dtype=torch.float64)
        x, w = _leaves()
        rows = torch.tensor([1, 4, 5])

        def seg(x, w):
            return torch.tanh(x * w) * mem

        if how == "eager":
            out = seg(x, w)
        elif how == "native":
            out = native.checkpoint(seg, x, w, use_reentrant=False)
        else:
            state = [Region(mem, rows)] if preserve == "region" else [mem]
            out = checkpoint(seg, x, w, state=state, preserve=preserve)
        loss = (out * torch.arange(N, dtype=torch.float64)).sum()
        if how == "eager":  # eager would refuse the write below; take its gradient first
            loss.backward()
            return x.grad.clone(), w.grad.clone()
        with torch.no_grad():
            mem[rows] = torch.tensor([9.0, -9.0, 4.0], dtype=torch.float64)  # the later writer
        loss.backward()
        assert mem[1].item() == 9.0  # the live buffer keeps the later write
        return x.grad.clone(), w.grad.clone()

    ref, nat, ours = program("eager"), program("native"), program("ours")
    assert not torch.allclose(nat[0], ref[0])
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-15)


def _two_segments(how: str, journal_rows: str = "union"):
    """Two segments over one queue: each reads the whole queue, then writes its own rows."""
    queue = torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.3
    x, w = (
        torch.randn(4, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_(),
        torch.ones(4, dtype=torch.float64, requires_grad=True),
    )
    rows1, rows2 = torch.tensor([0, 1]), torch.tensor([5, 6, 7])

    def seg(h, rows):
        r = torch.tanh(h * w + queue.mean(0))  # reads every row; tanh saves r
        with torch.no_grad():
            queue[rows] = r.detach() * 0.5
        return r

    def run(h, rows, later):
        if how == "eager":
            return seg(h, rows)
        if how == "native":
            return native.checkpoint(seg, h, rows, use_reentrant=False)
        covered = torch.cat([rows, later]) if journal_rows == "union" else rows
        return checkpoint(seg, h, rows, state=[Region(queue, covered)], preserve="region")

    h1 = run(x, rows1, rows2)
    h2 = run(h1 * 2, rows2, torch.tensor([], dtype=torch.int64))
    h2.sum().backward()
    return x.grad.clone(), w.grad.clone(), queue.clone()


def test_region_journal_covers_later_destroying_writes():
    ref, nat, ours = _two_segments("eager"), _two_segments("native"), _two_segments("ours")
    assert (nat[0] - ref[0]).abs().max() > 1e-3
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-15)
    # Paper §3.1: journaling only the segment's own rows is insufficient once a later
    # segment overwrites rows the first one read.
    own_only = _two_segments("ours", journal_rows="own")
    assert (own_only[0] - ref[0]).abs().max() > 1e-3


def test_nested_checkpoints_with_state():
    def program(how):
        torch.manual_seed(5)
        outer_m, inner_m = Memory(), Memory()
        x, w = _leaves()

        def inner(h):
            return inner_m(h, w)

        def outer(x):
            h = outer_m(x, w)
            if how == "eager":
                return inner(h) * 2
            if how == "native":
                return native.checkpoint(inner, h, use_reentrant=False) * 2
            return checkpoint(inner, h, state=[inner_m]) * 2

        # The outer segment writes inner_m too (through the inner segment), so it declares
        # it: its replay re-runs the inner segment's forward.
        if how == "eager":
            out = outer(x)
        elif how == "native":
            out = native.checkpoint(outer, x, use_reentrant=False)
        else:
            out = checkpoint(outer, x, state=[outer_m, inner_m])
        out.sum().backward(retain_graph=True)
        g1 = (x.grad.clone(), w.grad.clone())
        x.grad = w.grad = None
        out.sum().backward()
        return g1, (x.grad.clone(), w.grad.clone()), outer_m.mem.clone(), inner_m.mem.clone()

    ref, nat, ours = program("eager"), program("native"), program("ours")
    assert not torch.equal(nat[2], ref[2]) and not torch.equal(nat[3], ref[3])
    assert not torch.allclose(nat[0][0], ref[0][0])
    for k in range(2):
        for a, b in zip(ours[k], ref[k], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-15)
    assert torch.equal(ours[2], ref[2]) and torch.equal(ours[3], ref[3])


def test_autocast_replay_uses_forward_precision():
    def program(how):
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 8)
        bn = torch.nn.BatchNorm1d(8)
        x = torch.randn(16, 8, requires_grad=True)
        seg = torch.nn.Sequential(lin, bn)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if how == "eager":
                out = seg(x)
            elif how == "native":
                out = native.checkpoint(seg, x, use_reentrant=False)
            else:
                out = checkpoint(seg, x, state=[bn])
        out.float().square().sum().backward()
        return x.grad.clone(), lin.weight.grad.clone(), bn.running_mean.clone(), out.dtype

    ref, nat, ours = program("eager"), program("native"), program("ours")
    assert not torch.equal(nat[2], ref[2])  # native updates the running mean twice
    assert ours[3] == ref[3] == torch.bfloat16
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    assert torch.equal(ours[2], ref[2])


def test_nested_segment_state_must_be_declared_by_the_enclosing_segment():
    outer_m, inner_m = Memory(), Memory()
    x, w = _leaves()

    def outer(x):
        return checkpoint(inner_m, outer_m(x, w), w, state=[inner_m])

    with pytest.raises(UndeclaredStateError, match=r"inner_m\.mem \(Memory\)"):
        checkpoint(outer, x, state=[outer_m])


def test_undeclared_write_raises_and_names_the_buffer():
    m = Memory()
    x, w = _leaves()
    with pytest.raises(UndeclaredStateError) as info:
        checkpoint(m, x, w)
    text = str(info.value)
    assert "Memory.mem (Memory)" in text and "shape (12,)" in text and "torch.float64" in text
    assert "state=[" in text
    # The native checkpoint accepts it silently and differentiates the updated buffer
    # (see test_hidden_buffer_grads_and_bytes_match_eager_where_native_diverges).


def test_undeclared_closure_tensor_write_raises():
    counter = torch.zeros(())
    x, w = _leaves()

    def seg(x):
        counter.add_(1)
        return x * w

    with pytest.raises(UndeclaredStateError, match=r"counter \(shape \(\), torch.float32"):
        checkpoint(seg, x)


def test_saved_undeclared_tensor_modified_before_replay_raises():
    scale = torch.linspace(1, 2, N, dtype=torch.float64)
    x, _ = _leaves()

    def seg(x):
        return torch.sin(x) * scale  # mul saves `scale`

    out = checkpoint(seg, x)
    scale.mul_(3)  # native would differentiate the tripled scale silently
    with pytest.raises(UndeclaredStateError, match="modified in place before the replay"):
        out.sum().backward()

    out = native.checkpoint(seg, x, use_reentrant=False)
    scale.mul_(3)
    out.sum().backward()  # no error: silently wrong
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * scale)


def test_saved_tensor_modified_during_segment_raises_at_replay():
    x, w = _leaves()

    def seg(x):
        h = x * w
        y = torch.sigmoid(h)  # sigmoid saves its output y
        y.mul_(2)  # ... which is then modified: eager autograd refuses this program
        return y * torch.exp(h)  # a later save, so an early-stopped replay passes the write

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        seg(x).sum().backward()
    out = checkpoint(seg, x)
    with pytest.raises(ReplayError, match="modified in place after it was saved"):
        out.sum().backward()


def test_rng_preserved_and_outside_state_restored():
    def program(how):
        torch.manual_seed(11)
        x = torch.randn(64, dtype=torch.float64, requires_grad=True)

        def seg(x):
            return torch.nn.functional.dropout(x, 0.5) * x

        out = seg(x) if how == "eager" else checkpoint(seg, x, preserve_rng_state=how == "ours")
        out.sum().backward()
        return x.grad.clone(), torch.get_rng_state()

    ref, ours, off = program("eager"), program("ours"), program("off")
    assert torch.equal(ours[0], ref[0]) and torch.equal(ours[1], ref[1])
    assert not torch.equal(off[0], ref[0])


def test_no_declared_state_is_a_drop_in_for_native():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.GELU(), torch.nn.Linear(6, 3))
    x = torch.randn(5, 6, requires_grad=True)
    native.checkpoint(net, x, use_reentrant=False).sum().backward()
    expected = [p.grad.clone() for p in net.parameters()] + [x.grad.clone()]
    net.zero_grad()
    x.grad = None
    checkpoint(net, x).sum().backward()
    for a, b in zip([p.grad for p in net.parameters()] + [x.grad], expected, strict=True):
        assert torch.equal(a, b)


def test_no_grad_runs_the_function_without_a_transaction():
    m = Memory()
    x, w = _leaves()
    with torch.no_grad():
        checkpoint(m, x, w)  # undeclared, but nothing will ever be replayed
    assert m.mem._version == 2  # mul_ and add_, once each


def test_invalid_arguments_list_the_valid_choices():
    x, _ = _leaves()
    with pytest.raises(ValueError, match="use_reentrant=False only"):
        checkpoint(torch.sin, x, use_reentrant=True)
    with pytest.raises(ValueError, match="valid values are: whole, region"):
        checkpoint(torch.sin, x, preserve="journal")
    with pytest.raises(ValueError, match="valid values are: default, none"):
        checkpoint(torch.sin, x, determinism_check="strict")
    with pytest.raises(TypeError, match="valid items are"):
        checkpoint(torch.sin, x, state=[3])
    with pytest.raises(ValueError, match="is a view"):
        checkpoint(torch.sin, x, state=[torch.zeros(4)[1:]])
    with pytest.raises(ValueError, match="declare it as Region"):
        buf = torch.zeros(4)
        checkpoint(torch.sin, x, state=[buf], preserve={buf: "region"})
    with pytest.raises(ValueError, match="1-D"):
        Region(torch.zeros(4, 2), torch.zeros(2, 2, dtype=torch.int64))


def test_preserve_mapping_chooses_per_tensor():
    a = torch.arange(6, dtype=torch.float64)
    b = torch.arange(6, dtype=torch.float64)
    x = torch.ones(6, dtype=torch.float64, requires_grad=True)
    rows = torch.tensor([2])

    def seg(x):
        out = torch.tanh(x * a * b)
        with torch.no_grad():
            a[2] += 1.0
            b[2] += 1.0
        return out

    region_a = Region(a, rows)
    out = checkpoint(seg, x, state=[region_a, b], preserve={region_a: "region", b: "whole"})
    out.sum().backward()
    expected = (1 - torch.tanh(torch.arange(6.0, dtype=torch.float64) ** 2) ** 2) * torch.arange(6.0) ** 2
    torch.testing.assert_close(x.grad, expected.double(), rtol=0, atol=1e-15)
    assert a[2].item() == 3.0 and b[2].item() == 3.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("preserve", ["whole", "region"])
def test_cuda_hidden_buffer_and_rng(preserve):
    dev = torch.device("cuda")

    def program(how):
        torch.manual_seed(2)
        mem = torch.linspace(-1, 1, 256, device=dev)
        x = torch.randn(256, device=dev, requires_grad=True)

        def seg(x):
            r = torch.tanh(torch.nn.functional.dropout(x, 0.2) + mem)
            with torch.no_grad():
                mem[::3] = r[::3].detach()
            return r

        state = [Region(mem, torch.arange(0, 256, 3, device=dev))] if preserve == "region" else [mem]
        out = seg(x) if how == "eager" else checkpoint(seg, x, state=state, preserve=preserve)
        out.square().sum().backward(retain_graph=True)
        g1 = x.grad.clone()
        x.grad = None
        out.square().sum().backward()
        return g1, x.grad.clone(), mem.clone(), torch.cuda.get_rng_state()

    ref, ours = program("eager"), program("ours")
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(a, b)


def test_replay_graphs_are_freed_when_ops_save_their_outputs():
    # tanh and relu save their outputs; a replay that handed autograd the tensor itself
    # left a C++ reference cycle (output -> grad_fn -> saved output) per step, invisible to
    # Python's collector. Every tensor the segment made, in forward and replay, must die.
    import gc
    import weakref

    made = []
    w = torch.randn(8, 8, requires_grad=True)
    buf = torch.zeros(8)

    def segment(x):
        h = torch.tanh(x @ w)
        made.append(weakref.ref(h))
        return torch.relu(h).sum(0) + buf

    for _ in range(3):
        x = torch.randn(4, 8, requires_grad=True)
        checkpoint(segment, x, state=[buf]).sum().backward()
    gc.collect()
    assert len(made) == 6  # three forwards, three replays
    assert [r() is None for r in made] == [True] * 6
