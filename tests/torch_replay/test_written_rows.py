"""preserve="rows": the journal of exactly the rows the forward writes, learned as it writes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.torch_replay import ReplayError, checkpoint
from stateaware.torch_replay.written_rows import engine

ROWS, WIDTH = 16, 3


def _write(how: str, buf: torch.Tensor, rows: list[int], value: torch.Tensor) -> None:
    """Write ``value`` (one row per index) into ``buf``'s ``rows`` the way ``how`` says."""
    idx = torch.tensor(rows, dtype=torch.int64)
    if how == "index_copy_":
        buf.index_copy_(0, idx, value)
    elif how == "index_put_":
        buf[idx] = value
    elif how == "negative_index_put_":
        buf[idx - ROWS] = value
    elif how == "scatter_":
        buf.scatter_(0, idx[:, None].expand(-1, WIDTH), value)
    elif how == "index_add_":
        buf.index_add_(0, idx, value)
    elif how == "slice":
        buf[rows[0] : rows[0] + len(rows)] = value
    elif how == "column":  # every row, partly: the journal keeps all rows
        buf[:, 1] = value[0, 0]
    else:
        raise AssertionError(how)


HOWS = ("index_copy_", "index_put_", "negative_index_put_", "scatter_", "index_add_", "slice", "column")


def _program(mode: str, how: str, rows: list[int], seed: int):
    g = torch.Generator().manual_seed(seed)
    buf = torch.randn(ROWS, WIDTH, dtype=torch.float64, generator=g)
    x = torch.randn(len(rows), WIDTH, dtype=torch.float64, generator=g, requires_grad=True)

    def seg(x):
        r = torch.tanh(x * buf.mean(0) + buf[0])  # reads every row; tanh saves r
        with torch.no_grad():
            _write(how, buf, rows, r.detach() * 2.0)
        return r * buf.sum(0)  # reads the rows it just wrote (mul saves the sum)

    out = seg(x) if mode == "eager" else checkpoint(seg, x, state=[buf], preserve=mode)
    (out * torch.arange(1, WIDTH + 1, dtype=torch.float64)).sum().backward()
    return x.grad.clone(), buf.clone(), buf._version


@settings(max_examples=20, deadline=None)
@given(
    how=st.sampled_from(HOWS),
    start=st.integers(0, ROWS - 4),
    n=st.integers(1, 4),
    scattered=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_rows_matches_eager_for_every_kind_of_row_write(how, start, n, scattered, seed):
    rows = list(range(start, start + n))
    if scattered and how not in ("slice", "scatter_", "index_copy_"):
        rows = sorted({(start * 7 + 5 * i) % ROWS for i in range(n)})
    ref = _program("eager", how, rows, seed)
    got = _program("rows", how, rows, seed)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]) and got[2] == ref[2]


@pytest.mark.parametrize(
    "how,expected",
    [
        ("index_copy_", [3, 9]),
        ("index_put_", [3, 9]),
        ("negative_index_put_", [3, 9]),
        ("scatter_", [3, 9]),
        ("index_add_", [3, 9]),
        ("slice", [3, 4]),
        ("column", list(range(ROWS))),
    ],
)
def test_the_journal_keeps_exactly_the_rows_written(how, expected):
    buf = torch.randn(ROWS, WIDTH)
    before = buf.clone()
    journal = engine(buf, "buf")
    rows = [3, 4] if how == "slice" else [3, 9]
    with journal.recording():
        _write(how, buf, rows, torch.ones(2, WIDTH))
    kept = torch.cat([r for r, _ in journal.records])
    assert sorted(set(kept.tolist())) == expected
    assert journal.retained_bytes == kept.numel() * (WIDTH * 4 + 8)
    for r, old in journal.records:
        assert torch.equal(old, before[r])


def test_a_ring_queue_keeps_only_the_rows_it_overwrites():
    queue = torch.randn(1024, 64)
    journal = engine(queue, "queue")
    with journal.recording():
        queue[128:160] = 0.0
    assert journal.retained_bytes == 32 * 64 * 4 + 32 * 8  # not the 256 KiB queue


def test_a_write_after_the_forward_is_refused_at_the_replay():
    buf = torch.randn(ROWS, WIDTH)
    x = torch.randn(WIDTH, requires_grad=True)

    def seg(x):
        r = torch.tanh(x + buf.clone().sum(0))
        with torch.no_grad():
            buf[2] = r.detach()
        return r

    out = checkpoint(seg, x, state=[buf], preserve="rows")
    with torch.no_grad():
        buf[5] = 0.0  # a row the journal never saw
    with pytest.raises(ReplayError, match="written after the forward"):
        out.sum().backward()


def test_rows_needs_a_tensor_with_rows():
    with pytest.raises(ValueError, match="0-d"):
        engine(torch.tensor(1.0), "scalar")
