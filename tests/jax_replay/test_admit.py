"""stateaware.jax_replay.admit: functional code admitted; in-place and impure holders rejected."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from stateaware.jax_replay import admit, read_back


class Holder:
    def __init__(self, value):
        self.value = value


def _f(x, w):
    return jnp.tanh(x * w)


def test_functional_is_admitted_with_and_without_checkpoint():
    x, w = jnp.linspace(-1, 1, 6), jnp.ones(6) * 0.5
    plain = admit(_f, (x, w), jnp.ones(6))
    ckpt = admit(_f, (x, w), jnp.ones(6), checkpoint=True)
    assert plain.admitted and ckpt.admitted
    assert len(plain.grads) == len(ckpt.grads) == 2
    np.testing.assert_allclose(np.asarray(ckpt.grads[1][0]), np.asarray(plain.grads[0][0]), rtol=0, atol=1e-6)


def test_item_assignment_is_rejected_with_jax_error_at_forward():
    def inplace(x):
        h = x * 2
        h[0] = 1.0
        return h

    for checkpoint in (False, True):
        result = admit(inplace, (jnp.ones(3),), jnp.ones(3), checkpoint=checkpoint)
        assert not result.admitted
        assert result.phase == "forward" and result.exception_type == "TypeError"
        assert "immutable" in result.exception_message


def test_impure_holder_leaks_a_tracer_only_under_checkpoint_and_readback_finds_it():
    def impure(holder):
        def f(x):
            out = jnp.tanh(x + holder.value)
            holder.value = holder.value * 0.5 + jax.lax.stop_gradient(out)
            return out

        return f

    x = jnp.linspace(-1, 1, 5)
    eager_holder = Holder(jnp.zeros(5))
    eager = admit(impure(eager_holder), (x,), jnp.ones(5), holders=[eager_holder])
    assert eager.admitted
    np.testing.assert_allclose(np.asarray(eager.state[0]), np.tanh(np.asarray(x)) * 1.0, rtol=1e-6)

    ckpt_holder = Holder(jnp.zeros(5))
    ckpt = admit(impure(ckpt_holder), (x,), jnp.ones(5), checkpoint=True, holders=[ckpt_holder])
    assert not ckpt.admitted
    assert ckpt.phase == "state_readback" and ckpt.exception_type == "UnexpectedTracerError"
    # Outputs and both gradients agree with eager: comparing them alone would admit it.
    np.testing.assert_allclose(np.asarray(ckpt.out), np.asarray(eager.out), rtol=1e-6)
    assert len(ckpt.grads) == 2
    np.testing.assert_allclose(np.asarray(ckpt.grads[1][0]), np.asarray(eager.grads[1][0]), rtol=1e-6)


def test_read_back_of_a_concrete_array_is_the_array():
    value = jnp.arange(4.0)
    np.testing.assert_array_equal(np.asarray(read_back(value)), np.arange(4.0))
