"""An independent float64 oracle for the semantic programs: NumPy and the complex step.

The functional references (Torch, JAX) are checked against this. It shares no code path
with either framework: the forward is NumPy on complex128 arrays, and each derivative
coordinate ``d loss / d x_k`` is ``Im(loss(x + i*h*e_k)) / h`` (the complex-step
derivative, exact to rounding for analytic programs: no subtraction, so ``h`` can be
tiny). ``stop`` takes the real part, which is how a stop-gradient reads in complex-step
arithmetic. The dropout mask is an input: the oracle reuses the recorded noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stateaware.semantic_programs.families import program

__all__ = ["Oracle", "oracle"]

#: Complex-step size: far below float64 resolution of the values, so the first-order
#: term is exact to rounding and the O(h^2) truncation error is below 1e-300.
_H = 1e-150


class _NumpyOps:
    @staticmethod
    def tanh(a: np.ndarray) -> np.ndarray:
        return np.tanh(a)

    @staticmethod
    def write(a: np.ndarray, index: slice, value: np.ndarray) -> np.ndarray:
        out = a.copy()
        out[index] = value  # NumPy evaluates `value` before this line: reads precede the write
        return out

    @staticmethod
    def stop(a: np.ndarray) -> np.ndarray:
        return np.real(a).astype(np.complex128)


@dataclass(frozen=True)
class Oracle:
    """The oracle's observation of one condition (all float64)."""

    out: np.ndarray
    mem: np.ndarray
    grad_x: np.ndarray
    grad_w: np.ndarray


def oracle(family: str, x: np.ndarray, w: np.ndarray, mem: np.ndarray, c: np.ndarray, keep: np.ndarray) -> Oracle:
    """Outputs, final buffer and ``d sum(out * c) / d (x, w)`` of ``family``, in float64."""
    ops = _NumpyOps()
    xc, wc, mc, kc = (np.asarray(a, dtype=np.complex128) for a in (x, w, mem, keep))
    out, new_mem = program(ops, family, xc, wc, mc, kc)

    def loss_imag(dx: np.ndarray, dw: np.ndarray) -> float:
        o, _ = program(ops, family, xc + 1j * _H * dx, wc + 1j * _H * dw, mc, kc)
        return float(np.imag(np.sum(o * c))) / _H

    eye = np.eye(len(x))
    zero = np.zeros(len(x))
    grad_x = np.array([loss_imag(eye[k], zero) for k in range(len(x))])
    grad_w = np.array([loss_imag(zero, eye[k]) for k in range(len(x))])
    return Oracle(np.real(out), np.real(new_mem), grad_x, grad_w)
