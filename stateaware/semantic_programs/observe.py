"""One execution's observation, and how it is judged against a reference.

An observation records what a method produced at each phase — forward output, the
gradients of two backward passes over the same graph, the state read back afterwards —
or the phase at which the framework raised. ``judge`` turns it into the paper's
outcome (Table 2): ``reject`` when the framework raised, ``diverge`` at the first phase
whose values leave the dtype's tolerance, ``match`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["PHASES", "TOLERANCE", "Observation", "Verdict", "judge"]

#: The phases of one execution, in the order they run.
PHASES = ("forward", "backward1", "backward2", "state_readback")

#: Largest accepted ``max|a - b| / max(1, max|b|)`` per precision. The references and the
#: methods run the same operations in the same dtype, so real agreement is at rounding
#: level (the FP32 figure leaves room for tanh's FP32 error against the float64 oracle);
#: a stale buffer or a redrawn mask moves values by O(0.1).
TOLERANCE = {"fp32": 1e-5, "fp64": 1e-12}


@dataclass
class Observation:
    """What one method did on one condition. Arrays are float64 copies."""

    out: np.ndarray | None = None
    grads: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    mem: np.ndarray | None = None
    rng: bytes | None = None  # the framework's global RNG state after the run (Torch)
    failed_phase: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    forward_calls: int = 0
    backward_calls: int = 0


@dataclass(frozen=True)
class Verdict:
    outcome: str  # match | reject | diverge
    phase: str | None
    max_error: float | None
    detail: str | None = None


def _err(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
    return float(np.max(np.abs(a - b))) / scale if a.size else 0.0


def judge(obs: Observation, ref: Observation, precision: str) -> Verdict:
    """Compare ``obs`` with ``ref`` phase by phase; see the module docstring."""
    tol = TOLERANCE[precision]
    errors: dict[str, float] = {}
    if obs.out is not None and ref.out is not None:
        errors["forward"] = _err(obs.out, ref.out)
    for k, name in enumerate(("backward1", "backward2")):
        if k < len(obs.grads) and k < len(ref.grads):
            errors[name] = max(_err(a, b) for a, b in zip(obs.grads[k], ref.grads[k], strict=True))
    rng_differs = False
    if obs.failed_phase is None:
        state = []
        if obs.mem is not None and ref.mem is not None:
            state.append(_err(obs.mem, ref.mem))
        errors["state_readback"] = max(state, default=0.0)
        rng_differs = obs.rng is not None and ref.rng is not None and obs.rng != ref.rng
    max_error = max(errors.values()) if errors else None
    if obs.failed_phase is not None:
        return Verdict("reject", obs.failed_phase, max_error)
    for phase in PHASES:
        if errors.get(phase, 0.0) > tol:
            return Verdict("diverge", phase, max_error)
    if rng_differs:
        return Verdict("diverge", "state_readback", max_error, "RNG state after the run differs")
    return Verdict("match", None, max_error)
