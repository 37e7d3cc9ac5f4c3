"""JAX admission: functional code is checkpointed; in-place and impure code is rejected.

JAX has no mutable arrays, so the replay contract holds by construction for functional
code under ``jax.checkpoint``. What must not happen is a stateful program that *looks*
admitted: an in-place item assignment (``x[i] = v``) raises ``TypeError`` in the
framework itself, but an impure holder (a Python object whose array is reassigned inside
a transformed function) runs to completion and leaves a leaked tracer in the holder. That
leak only shows when the state is used the way the next step would use it, so
``admit`` reads every holder back — ``jnp.asarray(value) + 0`` and a fresh ``jax.jit`` —
after the backward passes, and records the framework's own error as a rejection.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# NOTE [ Lazy imports ]
#
# JAX is an optional extra: the library imports with torch and numpy alone, so every
# function here imports JAX itself (tagged ``# lazy``), only when a JAX function is admitted.

__all__ = ["PHASES", "Admission", "admit", "read_back"]

#: Phases of one admission, in order; a rejection names the one that raised.
PHASES = ("forward", "backward1", "backward2", "state_readback")


@dataclass(frozen=True)
class Admission:
    """The outcome of running one program through ``jax.vjp`` (optionally checkpointed).

    ``admitted`` is False when JAX raised; ``phase``, ``exception_type`` and
    ``exception_message`` then hold the framework's own report. ``grads`` has one entry
    per completed backward pass; ``state`` the read-back value of every holder.
    """

    admitted: bool
    phase: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    out: Any = None
    aux: Any = None
    grads: list = field(default_factory=list)
    state: tuple = ()


def read_back(value: Any) -> Any:
    """``value`` used as the next step would use it: in an eager op and in a new ``jit``.

    Raises JAX's ``UnexpectedTracerError`` for a tracer that escaped a transformation.
    """
    import jax  # lazy
    import jax.numpy as jnp  # lazy

    eager = jnp.asarray(value) + 0
    staged = _plus_zero()(value)
    jax.block_until_ready((eager, staged))
    return eager


@functools.lru_cache(maxsize=1)
def _plus_zero():
    # One jitted function for every read-back: a fresh lambda per call would recompile.
    import jax  # lazy

    return jax.jit(lambda v: v + 0)


def admit(
    fn: Callable[..., Any],
    primals: Sequence[Any],
    cotangent: Any,
    *,
    checkpoint: bool = False,
    has_aux: bool = False,
    holders: Sequence[Any] = (),
    attribute: str = "value",
    backward_passes: int = 2,
) -> Admission:
    """Differentiate ``fn`` at ``primals`` ``backward_passes`` times through one ``jax.vjp``.

    With ``checkpoint=True`` the function runs under ``jax.checkpoint`` (rematerialised in
    the backward). After the backward passes, each object in ``holders`` has its
    ``attribute`` read back with ``read_back``. Any exception JAX raises is returned
    as a rejection at the phase that raised (a wrong ``attribute`` name would be reported
    the same way, as a state_readback rejection, so name it right).

    Limits: admission observes, it does not prove purity — a holder written with a
    concrete value under a transformation that leaves it concrete is admitted, because
    the next step can read it; hidden state that no holder names is not read back.
    """
    import jax  # lazy

    f = jax.checkpoint(fn) if checkpoint else fn
    phase = "forward"
    out = aux = None
    grads: list = []
    try:
        if has_aux:
            out, pullback, aux = jax.vjp(f, *primals, has_aux=True)
        else:
            out, pullback = jax.vjp(f, *primals)
        jax.block_until_ready(out)
        for k in range(backward_passes):
            phase = f"backward{k + 1}"
            g = pullback(cotangent)
            jax.block_until_ready(g)
            grads.append(g)
        phase = "state_readback"
        state = tuple(read_back(getattr(h, attribute)) for h in holders)
    except Exception as exc:  # the framework's refusal is the observation
        return Admission(False, phase, type(exc).__name__, str(exc), out, aux, grads)
    return Admission(True, None, None, None, out, aux, grads, state)
