"""The five program families of the semantic cohort (paper §5), written once functionally.

Every family is one small segment over a vector of ``N`` elements: ``h = x * w``, a
dropout mask drawn *inside* the segment (so replay must reproduce the random state),
the family's writes, and an output. Two families keep their writes local; two write a
hidden buffer ``mem`` that the segment also reads; one performs a raw overlapping copy:

=================  ==========================================================================
``local_strided``  even elements of a local ``h`` overwritten from the odd ones (a strided write)
``local_views``    two overlapping views of a local ``h``: one written from the other, then the other
``hidden_strided`` the segment reads ``mem``, then overwrites its even elements (strided)
``hidden_views``   the segment reads ``mem``, then writes ``mem[1:]`` from the overlapping ``mem[:-1]``
``raw_copy``       ``h[1:] = h[:-1]`` as one copy between overlapping views of the same storage
=================  ==========================================================================

Semantics follow paper §3: every operation reads the versions current before its writes,
so the functional form below *is* the meaning of each in-place program. The in-place
programs (Torch, JAX) and the float64 oracle live in their own modules and must agree
with this one; ``program`` is written against a tiny ``ops`` adapter so that the Torch
functional reference, the JAX functional reference and the NumPy oracle share it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "FAMILIES",
    "HIDDEN_FAMILIES",
    "PRECISIONS",
    "TORCH_METHODS",
    "JAX_METHODS",
    "JAX_HOLDER_METHODS",
    "N",
    "DROP_P",
    "EVEN",
    "ODD",
    "program",
    "condition_inputs",
    "condition_seed",
]

FAMILIES = ("local_strided", "local_views", "hidden_strided", "hidden_views", "raw_copy")
#: Families whose segment reads and writes a buffer that outlives the segment.
HIDDEN_FAMILIES = ("hidden_strided", "hidden_views")
PRECISIONS = ("fp32", "fp64")
TORCH_METHODS = (
    "functional",
    "eager",
    "reentrant",
    "nonreentrant",
    "reentrant_norng",
    "nonreentrant_norng",
    "transactional",
)
JAX_METHODS = ("functional", "checkpoint", "inplace_eager", "inplace_checkpoint", "holder_eager", "holder_checkpoint")
#: JAX methods that exist only where there is hidden state to hold.
JAX_HOLDER_METHODS = ("holder_eager", "holder_checkpoint")

#: Vector length: semantics need no size, and small keeps the cohort at minutes on 2 cores.
N = 16
#: Dropout probability of the in-segment mask.
DROP_P = 0.25
EVEN = slice(0, None, 2)
ODD = slice(1, None, 2)


def program(ops: Any, family: str, x: Any, w: Any, mem: Any, keep: Any) -> tuple[Any, Any]:
    """The family's segment, functionally: ``(out, new_mem)``.

    ``ops`` supplies ``tanh(a)``, ``write(a, index, value) -> new array`` (no mutation of
    ``a``) and ``stop(a)`` (no derivative flows through). ``keep`` is the scaled dropout
    mask (``mask / (1 - DROP_P)``), drawn by the caller inside the segment. Local
    families return ``mem`` unchanged.
    """
    n = N
    h = x * w
    if family == "local_strided":
        h = ops.write(h, EVEN, ops.tanh(h[ODD]) + h[EVEN] * 2.0)
        return ops.tanh(h) * keep, mem
    if family == "local_views":
        h = ops.write(h, slice(0, n - 2), h[0 : n - 2] + ops.tanh(h[2:n]) * 0.5)
        h = ops.write(h, slice(2, n), h[2:n] * 1.5)
        return ops.tanh(h) * keep, mem
    if family == "raw_copy":
        h = ops.write(h, slice(1, n), h[0 : n - 1])
        return ops.tanh(h) * keep, mem
    if family not in HIDDEN_FAMILIES:
        raise ValueError(f"family {family!r}; valid families are: {', '.join(FAMILIES)}")
    r = ops.tanh(h + mem)
    if family == "hidden_strided":
        mem = ops.write(mem, EVEN, mem[EVEN] * 0.5 + ops.stop(r[EVEN]))
    else:
        mem = ops.write(mem, slice(1, n), mem[1:n] * 0.5)
        mem = ops.write(mem, slice(1, n), mem[1:n] + (mem[0 : n - 1] * 0.25 + ops.stop(r[1:n]) * 0.1))
    return r * keep, mem


def condition_seed(seed: int, family: str, precision: str) -> int:
    """One integer per (seed key, family, precision): the data and RNG seed of a condition."""
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}; valid families are: {', '.join(FAMILIES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}; valid precisions are: {', '.join(PRECISIONS)}")
    return int(
        np.random.SeedSequence([seed, FAMILIES.index(family), PRECISIONS.index(precision)]).generate_state(
            1, dtype=np.uint32
        )[0]
    )


def condition_inputs(seed: int, family: str, precision: str) -> dict[str, np.ndarray]:
    """The condition's inputs as float64 arrays: ``x``, ``w``, ``mem`` and loss weights ``c``.

    Values are rounded to the condition's precision first, so the float64 oracle and the
    FP32 programs start from the same numbers.
    """
    rng = np.random.default_rng(condition_seed(seed, family, precision))
    dtype = np.float32 if precision == "fp32" else np.float64
    arrays = {
        "x": rng.standard_normal(N),
        "w": rng.uniform(0.5, 1.5, N),
        "mem": rng.standard_normal(N) * 0.5,
        "c": rng.standard_normal(N),
    }
    return {k: v.astype(dtype).astype(np.float64) for k, v in arrays.items()}
