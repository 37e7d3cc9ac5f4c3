"""Region journals vs whole snapshots: random sparse writes, later destroying writes, bytes kept."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.torch_replay import Region, checkpoint
from stateaware.torch_replay.preserve import _Journal, _Whole

ROWS, WIDTH = 16, 3


def _program(how: str, own: list[int], later: list[int], seed: int):
    """A segment reads the whole buffer and writes rows `own`; then a later writer writes
    rows `later` before backward. Gradients, final bytes and the buffer's version."""
    g = torch.Generator().manual_seed(seed)
    buf = torch.randn(ROWS, WIDTH, dtype=torch.float64, generator=g)
    x = torch.randn(WIDTH, dtype=torch.float64, generator=g, requires_grad=True)
    own_t, later_t = torch.tensor(own, dtype=torch.int64), torch.tensor(later, dtype=torch.int64)

    def seg(x):
        r = torch.tanh(x * buf.mean(0) + buf[0])  # reads every row; tanh saves r
        with torch.no_grad():
            buf[own_t] = r.detach() * 2.0
        return r * buf.sum(0)  # reads the rows it just wrote (mul saves the sum)

    if how == "eager":
        out = seg(x)
    elif how == "whole":
        out = checkpoint(seg, x, state=[buf])
    else:
        out = checkpoint(seg, x, state=[Region(buf, torch.cat([own_t, later_t]))], preserve="region")
    loss = (out * torch.arange(1, WIDTH + 1, dtype=torch.float64)).sum()
    if how == "eager":
        loss.backward()  # eager keeps what it needs; the later write cannot affect it
    with torch.no_grad():
        buf[later_t] = -7.0
    if how != "eager":
        loss.backward()
    return x.grad.clone(), buf.clone(), buf._version


@settings(max_examples=25, deadline=None)
@given(
    own=st.lists(st.integers(0, ROWS - 1), min_size=1, max_size=6),
    later=st.lists(st.integers(0, ROWS - 1), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_whole_and_region_match_eager(own, later, seed):
    ref = _program("eager", own, later, seed)
    for how in ("whole", "region"):
        got = _program(how, own, later, seed)
        assert torch.equal(got[0], ref[0]), how
        assert torch.equal(got[1], ref[1]), how
        assert got[2] == ref[2], how  # replays are invisible to the version counter (Rule 4)


def test_region_without_the_later_rows_is_wrong():
    # Row 0 is read by the segment and overwritten by the later writer only: a journal of
    # the segment's own writes cannot restore it (paper §3.1).
    ref = _program("eager", [3], [0], 1)

    g = torch.Generator().manual_seed(1)
    buf = torch.randn(ROWS, WIDTH, dtype=torch.float64, generator=g)
    x = torch.randn(WIDTH, dtype=torch.float64, generator=g, requires_grad=True)

    def seg(x):
        r = torch.tanh(x * buf.mean(0) + buf[0])
        with torch.no_grad():
            buf[torch.tensor([3])] = r.detach() * 2.0
        return r * buf.sum(0)

    out = checkpoint(seg, x, state=[Region(buf, torch.tensor([3]))], preserve="region")
    with torch.no_grad():
        buf[torch.tensor([0])] = -7.0
    (out * torch.arange(1, WIDTH + 1, dtype=torch.float64)).sum().backward()
    assert (x.grad - ref[0]).abs().max() > 1e-3


def test_retained_bytes_whole_vs_region():
    buf = torch.zeros(1024, 64)  # 256 KiB
    rows = torch.arange(0, 1024, 100)  # 11 rows
    assert _Whole(buf, "buf").retained_bytes == 1024 * 64 * 4
    assert _Journal(buf, "buf", rows).retained_bytes == 11 * 64 * 4 + 11 * 8
