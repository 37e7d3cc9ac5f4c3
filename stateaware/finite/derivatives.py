"""Derivatives of finite float programs, computed three independent ways.

- ``reverse_versions`` — reverse accumulation over the version graph (paper eq. 1):
  ``adj[v_p] += adj[v_k] * f_k'(v_p)``, with ``f_k'`` evaluated at the *historical*
  operand versions. ``operands="final"`` is the deliberate control that evaluates
  ``f_k'`` at the final storage instead (what a replay that ignores mutation sees).
- ``forward_jacobian`` — a forward sweep that carries ``d cells / d cells0`` row by
  row through the buffer positions; it never consults version ids.
- ``complex_step`` — ``Im f(x + i h e_j) / h`` per input coordinate, executing the
  program itself on complex128 cells; it needs no derivative formula at all.

Plus ``reverse_trace``, the address-level reverse pass that engines use to
reconstruct gradients from the operand values they recovered (stored traces).

All derivatives are with respect to the initial float cells ``cells0`` of the scalar
output ``sum(weights * cells_T)``; integer slots are constants (a supported program never
writes them; see ``stateaware.finite.admission``). Random inputs are the recorded
draws of the forward execution: reusing them is what makes the derivative that of the
executed program rather than of a fresh sample.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stateaware.finite.admission import require_gradient_support
from stateaware.finite.interpret import Draws, Storage, Trace, _dot, activate_grad, apply, float_value
from stateaware.finite.program import Program, op_cells, op_cells_from

__all__ = [
    "COMPLEX_STEP",
    "GRADIENT_RTOL",
    "complex_step",
    "forward_jacobian",
    "gradient_tolerance",
    "graph_output",
    "local_grads",
    "reverse_trace",
    "reverse_versions",
]

#: Two gradients agree when ``max|g - g_ref| <= GRADIENT_RTOL * max(1, max|g_ref|)``.
#: Differently ordered float64 accumulations of the same arithmetic differ by a few ulps
#: per operation (~1e-16 relative); 1e-12 leaves orders of magnitude of margin for 16
#: operations, while evaluating a derivative at a wrong operand value moves it by far more.
GRADIENT_RTOL = 1e-12

#: Complex-step size. The method has no subtractive cancellation, so h can be far below
#: sqrt(eps); at 1e-20 the truncation error (O(h^2)) is below float64 resolution.
COMPLEX_STEP = 1e-20


def gradient_tolerance(reference: np.ndarray) -> float:
    """The absolute tolerance for a gradient compared with ``reference`` (see GRADIENT_RTOL)."""
    return GRADIENT_RTOL * max(1.0, float(np.max(np.abs(reference))) if reference.size else 1.0)


def local_grads(op, u: np.ndarray, w: np.ndarray, draws: Draws) -> tuple[np.ndarray, np.ndarray]:
    """(dy/du, dy/dw) elementwise for float op ``op`` at operands ``u``, ``w``."""
    z, _ = float_value(op, u, w, draws)
    d = activate_grad(op.act, z)
    if draws.mask is not None:
        d = d * draws.mask
    if op.kind == "mul":
        return d * op.a * w, d * op.a * u
    return d * op.a, d * op.b


def graph_output(trace: Trace) -> float:
    """The scalar output re-evaluated from the version graph alone (leaves, then nodes)."""
    g, program = trace.graph, trace.program
    values = [program.cells0.astype(np.float64)]
    offset = program.n
    table = np.empty(g.size)
    table[: program.n] = values[0]
    for k, op in enumerate(program.ops):
        if g.nodes[k].size == 0:
            continue
        _, y = float_value(op, table[g.parents0[k]], table[g.parents1[k]], trace.events[k].draws)
        table[offset : offset + y.size] = y
        offset += y.size
    return _dot(program.weights, table[g.final])


def reverse_versions(trace: Trace, operands: str = "historical") -> np.ndarray:
    """Gradient by reverse accumulation over the version graph (eq. 1).

    ``operands="historical"`` evaluates each local derivative at the operand versions the
    operation read; ``"final"`` is the control that reads the final storage at the same
    addresses instead. Only the operand values differ between the two.
    """
    if operands not in ("historical", "final"):
        raise ValueError(f"operands {operands!r}; allowed values are: historical, final")
    require_gradient_support(trace.program)
    g, program = trace.graph, trace.program
    table = g.value_table()
    adj = np.zeros(g.size)
    adj[g.final] += program.weights  # final versions are distinct, one per cell
    for k in range(len(program.ops) - 1, -1, -1):
        nodes = g.nodes[k]
        if nodes.size == 0:
            continue
        event = trace.events[k]
        if operands == "historical":
            u, w = table[g.parents0[k]], table[g.parents1[k]]
        else:
            u, w = trace.final_cells[event.src0], trace.final_cells[event.src1]
        du, dw = local_grads(program.ops[k], u, w, event.draws)
        gy = adj[nodes]
        np.add.at(adj, g.parents0[k], gy * du)
        np.add.at(adj, g.parents1[k], gy * dw)
    return adj[: program.n].copy()


def forward_jacobian(program: Program, draws: Sequence[Draws]) -> tuple[float, np.ndarray]:
    """(output, gradient) by forward propagation of the Jacobian over buffer positions."""
    require_gradient_support(program)
    x = program.cells0.astype(np.float64).copy()
    slots = program.slots0.copy()
    jac = np.eye(program.n)
    for k, op in enumerate(program.ops):
        dst, s0, s1 = op_cells(op, slots)
        u, w = x[s0].copy(), x[s1].copy()
        du, dw = local_grads(op, u, w, draws[k])
        rows = du[:, None] * jac[s0] + dw[:, None] * jac[s1]
        _, y = float_value(op, u, w, draws[k])
        x[dst] = y
        jac[dst] = rows
    return _dot(program.weights, x), program.weights @ jac


def reverse_trace(program: Program, reads: Sequence) -> np.ndarray:
    """Gradient from stored per-operation reads (address-level reverse mode).

    ``reads[k]`` carries op ``k``'s integer reads ``slot_values``, operands ``u``, ``w``
    and ``draws``, as an engine recovered them. The adjoint of a destination is consumed
    and cleared before its sources receive theirs, because the sources were read before
    the write (interpret Rule 2).
    """
    require_gradient_support(program)
    adj = program.weights.astype(np.float64).copy()
    for k in range(len(program.ops) - 1, -1, -1):
        op, r = program.ops[k], reads[k]
        dst, s0, s1 = op_cells_from(op, r.slot_values)
        du, dw = local_grads(op, r.u, r.w, r.draws)
        gy = adj[dst].copy()
        adj[dst] = 0.0
        np.add.at(adj, s0, gy * du)
        np.add.at(adj, s1, gy * dw)
    return adj


def complex_step(
    program: Program, draws: Sequence[Draws], coordinates: Sequence[int] | None = None, h: float = COMPLEX_STEP
) -> np.ndarray:
    """d output / d cells0[j] for each ``j`` in ``coordinates`` (default: all) by complex step."""
    require_gradient_support(program)
    coords = range(program.n) if coordinates is None else coordinates
    out = np.empty(len(coords))
    for i, j in enumerate(coords):
        cells = program.cells0.astype(np.complex128).copy()
        cells[j] += 1j * h
        storage = Storage(cells=cells, slots=program.slots0.copy())
        for k, op in enumerate(program.ops):
            apply(k, op, storage, recorded=draws[k])
        out[i] = _dot(program.weights, storage.cells).imag / h
    return out
