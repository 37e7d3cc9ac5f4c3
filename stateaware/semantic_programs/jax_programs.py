"""The semantic programs in JAX, and one runner per JAX method (paper §5, Table 2).

``functional`` and ``checkpoint`` run ``families.program`` with ``.at[].set`` and the
hidden buffer passed in and returned (state passing). ``inplace_*`` write the same
programs as a NumPy/PyTorch user would, with item assignment — JAX arrays refuse it.
``holder_*`` (hidden-buffer families only) keep the buffer in a Python object whose
``value`` the function reads and reassigns: the impure pattern that leaks a tracer when
the function is transformed by ``jax.checkpoint``. Every method goes through
``stateaware.jax_replay.admit`` (two backward passes over one ``jax.vjp``, then the
state read back as the next step would read it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stateaware.jax_replay import admit
from stateaware.semantic_programs.families import DROP_P, EVEN, HIDDEN_FAMILIES, JAX_METHODS, ODD, N, program
from stateaware.semantic_programs.observe import Observation

# NOTE [ Lazy imports ]
#
# JAX is an optional extra: the library imports with torch and numpy alone, so every
# function here imports JAX itself (tagged ``# lazy``), only when a JAX program runs.

__all__ = ["run_jax", "jax_keep"]


class _JaxOps:
    @staticmethod
    def tanh(a):
        import jax.numpy as jnp  # lazy

        return jnp.tanh(a)

    @staticmethod
    def write(a, index: slice, value):
        return a.at[index].set(value)

    @staticmethod
    def stop(a):
        import jax  # lazy

        return jax.lax.stop_gradient(a)


class _Holder:
    """An impure state holder: ``value`` is reassigned by the function that uses it."""

    def __init__(self, value: Any):
        self.value = value


def jax_keep(key: Any, dtype: Any) -> Any:
    """The scaled dropout mask drawn from ``key``."""
    import jax  # lazy

    return jax.random.bernoulli(key, 1 - DROP_P, (N,)).astype(dtype) / (1 - DROP_P)


def _inplace(family: str, x, w, mem, keep):
    import jax.numpy as jnp  # lazy

    h = x * w
    if family == "local_strided":
        h[EVEN] = jnp.tanh(h[ODD]) + h[EVEN] * 2.0
        return jnp.tanh(h) * keep, mem
    if family == "local_views":
        h[0 : N - 2] = h[0 : N - 2] + jnp.tanh(h[2:N]) * 0.5
        h[2:N] = h[2:N] * 1.5
        return jnp.tanh(h) * keep, mem
    if family == "raw_copy":
        h[1:] = h[:-1]
        return jnp.tanh(h) * keep, mem
    r = jnp.tanh(h + mem)
    if family == "hidden_strided":
        mem[EVEN] = mem[EVEN] * 0.5 + r[EVEN]
    else:
        mem[1:] = mem[1:] * 0.5
        mem[1:] = mem[1:] + mem[:-1] * 0.25 + r[1:] * 0.1
    return r * keep, mem


def run_jax(family: str, precision: str, method: str, inputs: dict[str, np.ndarray], rng_seed: int) -> Observation:
    """Run ``method`` on one condition; a JAX error is recorded, never raised."""
    import jax  # lazy
    import jax.numpy as jnp  # lazy

    if method not in JAX_METHODS:
        raise ValueError(f"jax method {method!r}; valid methods are: {', '.join(JAX_METHODS)}")
    if method.startswith("holder") and family not in HIDDEN_FAMILIES:
        raise ValueError(f"jax method {method!r} needs hidden state; valid families are: {', '.join(HIDDEN_FAMILIES)}")
    obs = Observation()
    with jax.enable_x64(precision == "fp64"):
        dtype = jnp.float64 if precision == "fp64" else jnp.float32
        x, w, mem0, c = (jnp.asarray(inputs[k], dtype=dtype) for k in ("x", "w", "mem", "c"))
        key = jax.random.key(rng_seed)
        holder = _Holder(mem0)

        def functional(x, w):
            obs.forward_calls += 1
            return program(_JaxOps, family, x, w, mem0, jax_keep(key, dtype))

        def inplace(x, w):
            obs.forward_calls += 1
            return _inplace(family, x, w, mem0, jax_keep(key, dtype))

        def impure(x, w):
            obs.forward_calls += 1
            out, holder.value = program(_JaxOps, family, x, w, holder.value, jax_keep(key, dtype))
            return out

        if method in ("functional", "checkpoint"):
            result = admit(functional, (x, w), c, checkpoint=method == "checkpoint", has_aux=True)
        elif method in ("inplace_eager", "inplace_checkpoint"):
            result = admit(inplace, (x, w), c, checkpoint=method == "inplace_checkpoint", has_aux=True)
        else:
            result = admit(impure, (x, w), c, checkpoint=method == "holder_checkpoint", holders=[holder])
        obs.backward_calls = len(result.grads)
        obs.grads = [(_np(gx), _np(gw)) for gx, gw in result.grads]
        if result.out is not None:
            obs.out = _np(result.out)
        if not result.admitted:
            obs.failed_phase = result.phase
            obs.exception_type, obs.exception_message = result.exception_type, result.exception_message
        elif method.startswith("holder"):
            obs.mem = _np(result.state[0])
        else:
            obs.mem = _np(result.aux)
    return obs


def _np(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).copy()
