"""Admission: which programs may be differentiated, decided before execution.

The finite float domain supports gradients of programs whose every write is a float
operation. An integer write (``int_write``: an integer-typed alias written with XOR)
mutates bytes that later integer reads or float cells depend on; its derivative is not
defined by this domain, so a program that has one and asks for a float gradient is
``unsupported``. No gradient is produced for it — not zeros, not a partial result.
Byte-level replay (eq. 2) makes no differentiability claim and admits every program.
"""

from __future__ import annotations

from dataclasses import dataclass

from stateaware.finite.program import Program

__all__ = ["SUPPORTED", "UNSUPPORTED", "Admission", "UnsupportedProgram", "admit", "require_gradient_support"]

SUPPORTED = "supported"
UNSUPPORTED = "unsupported"


class UnsupportedProgram(ValueError):
    """A float gradient was requested for a program outside the supported domain."""


@dataclass(frozen=True)
class Admission:
    """The admission decision and, when unsupported, the reason naming the operation."""

    outcome: str  # SUPPORTED | UNSUPPORTED
    reason: str = ""

    @property
    def supported(self) -> bool:
        return self.outcome == SUPPORTED


def admit(program: Program, gradient: bool = True) -> Admission:
    """Classify ``program`` for a float gradient (``gradient=True``) or byte replay only."""
    if not gradient:
        return Admission(SUPPORTED)
    for k, op in enumerate(program.ops):
        if op.kind == "int_write":
            return Admission(
                UNSUPPORTED,
                f"operation {k} writes {op.dst.dtype} bytes at offset {op.dst.offset} (integer write); a float "
                f"gradient through integer writes is outside the finite domain. Tip: byte replay (gradient=False) "
                f"admits it.",
            )
    return Admission(SUPPORTED)


def require_gradient_support(program: Program) -> None:
    """Raise ``UnsupportedProgram`` unless ``program`` admits a float gradient."""
    decision = admit(program, gradient=True)
    if not decision.supported:
        raise UnsupportedProgram(f"{program.name} (seed {program.seed}): {decision.reason}")
