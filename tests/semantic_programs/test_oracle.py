"""The float64 oracle and the families' functional meaning (NumPy only)."""

from __future__ import annotations

import numpy as np
import pytest

from stateaware.semantic_programs.families import FAMILIES, N, condition_inputs, condition_seed, program
from stateaware.semantic_programs.oracle import _NumpyOps, oracle


@pytest.mark.parametrize("family", FAMILIES)
def test_complex_step_gradient_matches_central_differences(family):
    inp = condition_inputs(420007, family, "fp64")
    keep = (np.random.default_rng(condition_seed(420007, family, "fp64")).random(N) >= 0.25) / 0.75
    o = oracle(family, inp["x"], inp["w"], inp["mem"], inp["c"], keep)

    def loss(x, w):
        out, _ = program(
            _NumpyOps, family, x.astype(complex), w.astype(complex), inp["mem"].astype(complex), keep.astype(complex)
        )
        return float(np.real(np.sum(out * inp["c"])))

    h = 1e-6
    for k in range(N):
        e = np.eye(N)[k] * h
        fd_x = (loss(inp["x"] + e, inp["w"]) - loss(inp["x"] - e, inp["w"])) / (2 * h)
        fd_w = (loss(inp["x"], inp["w"] + e) - loss(inp["x"], inp["w"] - e)) / (2 * h)
        assert abs(fd_x - o.grad_x[k]) < 1e-7 and abs(fd_w - o.grad_w[k]) < 1e-7


def test_reads_precede_writes():
    ops = _NumpyOps()
    x, w, mem, keep = np.arange(1.0, N + 1), np.ones(N), np.zeros(N), np.ones(N)
    # raw copy: h[1:] = h[:-1] reads the old h, a shift by one
    out, _ = program(ops, "raw_copy", x, w, mem, keep)
    np.testing.assert_allclose(out, np.tanh(np.concatenate([[1.0], np.arange(1.0, N)])))
    # hidden views: the second write reads mem[:-1] *after* the first write halved mem[1:]
    mem = np.arange(N, dtype=float)
    _, new = program(ops, "hidden_views", *(a.astype(complex) for a in (np.zeros(N), np.zeros(N), mem, keep)))
    new = np.real(new)
    r = np.tanh(mem)
    half = mem.copy()
    half[1:] *= 0.5
    expected = half.copy()
    expected[1:] = half[1:] + half[:-1] * 0.25 + r[1:] * 0.1
    np.testing.assert_allclose(new, expected, rtol=0, atol=1e-15)


def test_invalid_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="valid families are: local_strided"):
        condition_seed(1, "strided", "fp32")
    with pytest.raises(ValueError, match="valid precisions are: fp32, fp64"):
        condition_seed(1, "raw_copy", "bf16")
