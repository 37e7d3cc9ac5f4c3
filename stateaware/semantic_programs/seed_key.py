"""One seed key of the semantic cohort: every family, precision, backend and method.

Per seed key: 5 families x 2 precisions x 7 Torch methods = 70 Torch records, and
5 x 2 x 4 JAX methods + 2 hidden-buffer families x 2 x 2 holder methods = 48 JAX
records: 118 per key, 5,900 over the paper's 50 keys. Each functional reference is
judged against the float64 oracle (with the same recorded dropout mask); every other
method against its backend's functional reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stateaware.semantic_programs.families import (
    FAMILIES,
    HIDDEN_FAMILIES,
    JAX_HOLDER_METHODS,
    JAX_METHODS,
    PRECISIONS,
    TORCH_METHODS,
    N,
    condition_inputs,
    condition_seed,
)
from stateaware.semantic_programs.jax_programs import jax_keep, run_jax
from stateaware.semantic_programs.observe import TOLERANCE, Observation, Verdict, judge
from stateaware.semantic_programs.oracle import oracle

__all__ = ["CHECK", "records_per_seed", "run_seed"]

#: The ``check`` column of every row this cohort writes.
CHECK = "table2"
_MESSAGE_CHARS = 2000  # exception messages are kept, bounded (JAX's run to many lines)


def records_per_seed() -> dict[str, int]:
    """How many records one seed key yields per backend, from the family/method tables."""
    jax_plain = [m for m in JAX_METHODS if m not in JAX_HOLDER_METHODS]
    return {
        "torch": len(FAMILIES) * len(PRECISIONS) * len(TORCH_METHODS),
        "jax": len(FAMILIES) * len(PRECISIONS) * len(jax_plain)
        + len(HIDDEN_FAMILIES) * len(PRECISIONS) * len(JAX_HOLDER_METHODS),
    }


def run_seed(seed: int, backends: tuple[str, ...] = ("torch", "jax")) -> list[dict[str, Any]]:
    """Every record of seed key ``seed`` (see the module docstring for the count)."""
    rows: list[dict[str, Any]] = []
    for family in FAMILIES:
        for precision in PRECISIONS:
            inputs = condition_inputs(seed, family, precision)
            rng_seed = condition_seed(seed, family, precision)
            if "torch" in backends:
                rows += _torch_condition(seed, family, precision, inputs, rng_seed)
            if "jax" in backends:
                rows += _jax_condition(seed, family, precision, inputs, rng_seed)
    return rows


def _torch_condition(seed, family, precision, inputs, rng_seed):
    # lazy: each backend only for its own keys: the JAX half runs without torch
    import torch

    from stateaware.semantic_programs.torch_programs import run_torch, torch_keep  # lazy: it imports torch

    ref = run_torch(family, precision, "functional", inputs, rng_seed)
    generator = torch.Generator().manual_seed(rng_seed)
    keep = torch_keep(torch.float32 if precision == "fp32" else torch.float64, generator).double().numpy()
    rows = [
        _row(
            seed,
            family,
            precision,
            "torch",
            "functional",
            ref,
            judge(ref, _oracle_observation(family, inputs, keep), precision),
            "vs float64 oracle",
        )
    ]
    for method in TORCH_METHODS[1:]:
        obs = run_torch(family, precision, method, inputs, rng_seed)
        rows.append(_row(seed, family, precision, "torch", method, obs, judge(obs, ref, precision)))
    return rows


def _jax_condition(seed, family, precision, inputs, rng_seed):
    import jax  # lazy: JAX is an optional extra; the torch half runs without it

    ref = run_jax(family, precision, "functional", inputs, rng_seed)
    with jax.enable_x64(precision == "fp64"):
        dtype = np.float64 if precision == "fp64" else np.float32
        keep = np.asarray(jax_keep(jax.random.key(rng_seed), dtype), dtype=np.float64)
    rows = [
        _row(
            seed,
            family,
            precision,
            "jax",
            "functional",
            ref,
            judge(ref, _oracle_observation(family, inputs, keep), precision),
            "vs float64 oracle",
        )
    ]
    for method in JAX_METHODS[1:]:
        if method in JAX_HOLDER_METHODS and family not in HIDDEN_FAMILIES:
            continue
        obs = run_jax(family, precision, method, inputs, rng_seed)
        rows.append(_row(seed, family, precision, "jax", method, obs, judge(obs, ref, precision)))
    return rows


def _oracle_observation(family: str, inputs: dict[str, np.ndarray], keep: np.ndarray) -> Observation:
    o = oracle(family, inputs["x"], inputs["w"], inputs["mem"], inputs["c"], keep)
    return Observation(out=o.out, grads=[(o.grad_x, o.grad_w)] * 2, mem=o.mem)


def _row(
    seed: int,
    family: str,
    precision: str,
    backend: str,
    method: str,
    obs: Observation,
    verdict: Verdict,
    against: str | None = None,
) -> dict[str, Any]:
    detail = "; ".join(filter(None, [against, verdict.detail])) or None
    message = obs.exception_message
    return {
        "backend": backend,
        "method": method,
        "family": family,
        "precision": precision,
        "seed": seed,
        "outcome": verdict.outcome,
        "check_name": CHECK,
        "phase": verdict.phase,
        "exception_type": obs.exception_type,
        "exception_message": message[:_MESSAGE_CHARS] if message is not None else None,
        "max_error": verdict.max_error,
        "tolerance": TOLERANCE[precision],
        "forward_calls": obs.forward_calls,
        "backward_calls": obs.backward_calls,
        # Python-level re-executions of the segment; JAX rematerialises inside the traced
        # program, so its count stays 0 even under jax.checkpoint.
        "recompute_calls": max(obs.forward_calls - 1, 0),
        "dimension": N,
        "detail": detail,
    }
