"""The semantic programs in PyTorch, and one runner per Torch method (paper §5, Table 2).

The in-place programs are written as a PyTorch user writes them: writes through strided
slices and overlapping views of a local tensor, a hidden buffer registered on a module
that the segment reads and then updates, and a raw ``copy_`` between overlapping views.
The functional reference runs ``families.program`` with out-of-place operations
(``slice_scatter``). Each method differentiates the same forward graph twice
(``backward(retain_graph=True)``, then ``backward()``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch

from stateaware.semantic_programs.families import DROP_P, EVEN, HIDDEN_FAMILIES, ODD, TORCH_METHODS, N, program
from stateaware.semantic_programs.observe import Observation
from stateaware.torch_replay import checkpoint as transactional_checkpoint

__all__ = ["run_torch", "torch_keep"]

_DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


class _TorchOps:
    @staticmethod
    def tanh(a: torch.Tensor) -> torch.Tensor:
        return torch.tanh(a)

    @staticmethod
    def write(a: torch.Tensor, index: slice, value: torch.Tensor) -> torch.Tensor:
        start, stop, step = index.indices(a.shape[0])
        return torch.slice_scatter(a, value, dim=0, start=start, end=stop, step=step)

    @staticmethod
    def stop(a: torch.Tensor) -> torch.Tensor:
        return a.detach()


class _Hidden(torch.nn.Module):
    """The module whose buffer ``mem`` is the hidden state of the hidden-buffer families."""

    def __init__(self, mem: torch.Tensor):
        super().__init__()
        self.register_buffer("mem", mem)


def torch_keep(dtype: torch.dtype, generator: torch.Generator | None = None) -> torch.Tensor:
    """The scaled dropout mask, drawn from ``generator`` (default: the global CPU RNG)."""
    return (torch.rand(N, dtype=dtype, generator=generator) >= DROP_P).to(dtype) / (1 - DROP_P)


def _inplace_segment(family: str, x: torch.Tensor, w: torch.Tensor, hidden: _Hidden | None) -> torch.Tensor:
    keep = torch_keep(x.dtype)
    h = x * w
    if family == "local_strided":
        h[EVEN] = torch.tanh(h[ODD]) + h[EVEN] * 2.0
        return torch.tanh(h) * keep
    if family == "local_views":
        a, b = h[0 : N - 2], h[2:N]  # overlapping views of one local storage
        a.add_(torch.tanh(b) * 0.5)
        b.mul_(1.5)
        return torch.tanh(h) * keep
    if family == "raw_copy":
        h[1:].copy_(h[:-1])  # source and destination overlap in the same storage
        return torch.tanh(h) * keep
    mem = hidden.mem
    r = torch.tanh(h + mem)
    if family == "hidden_strided":
        mem[EVEN] = mem[EVEN] * 0.5 + r[EVEN].detach()
    else:
        hi, lo = mem[1:], mem[:-1]  # overlapping views of the hidden buffer
        hi.mul_(0.5)
        hi.add_(lo * 0.25 + r[1:].detach() * 0.1)
    return r * keep


def run_torch(family: str, precision: str, method: str, inputs: dict[str, np.ndarray], rng_seed: int) -> Observation:
    """Run ``method`` on one condition; never raises for a framework error (it is recorded)."""
    if method not in TORCH_METHODS:
        raise ValueError(f"torch method {method!r}; valid methods are: {', '.join(TORCH_METHODS)}")
    dtype = _DTYPES[precision]
    obs = Observation()
    hidden = _Hidden(torch.tensor(inputs["mem"], dtype=dtype)) if family in HIDDEN_FAMILIES else None
    x = torch.tensor(inputs["x"], dtype=dtype, requires_grad=True)
    w = torch.tensor(inputs["w"], dtype=dtype, requires_grad=True)
    c = torch.tensor(inputs["c"], dtype=dtype)
    new_mem: list[torch.Tensor] = []

    def segment(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        obs.forward_calls += 1
        if method == "functional":
            mem = torch.tensor(inputs["mem"], dtype=dtype)
            out, updated = program(_TorchOps, family, x, w, mem, torch_keep(dtype))
            new_mem.append(updated.detach())
            return out
        return _inplace_segment(family, x, w, hidden)

    phase = "forward"
    torch.manual_seed(rng_seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = _METHODS[method](segment, x, w, hidden)
            obs.out = _np(out)
            loss = (out * c).sum()
            for k in (1, 2):
                phase = f"backward{k}"
                x.grad = w.grad = None
                loss.backward(retain_graph=(k == 1))
                obs.backward_calls += 1
                obs.grads.append((_np(x.grad), _np(w.grad)))
            phase = "state_readback"
            if method == "functional":
                obs.mem = _np(new_mem[0])
            else:
                obs.mem = _np(hidden.mem) if hidden is not None else inputs["mem"].copy()
            obs.rng = torch.get_rng_state().numpy().tobytes()
    except Exception as exc:  # the framework's refusal is the observation
        obs.failed_phase, obs.exception_type, obs.exception_message = phase, type(exc).__name__, str(exc)
    return obs


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy().copy()


def _native(reentrant: bool, rng: bool) -> Callable:
    def run(segment, x, w, hidden):
        return torch.utils.checkpoint.checkpoint(segment, x, w, use_reentrant=reentrant, preserve_rng_state=rng)

    return run


_METHODS: dict[str, Callable] = {
    "functional": lambda segment, x, w, hidden: segment(x, w),
    "eager": lambda segment, x, w, hidden: segment(x, w),
    "reentrant": _native(True, True),
    "nonreentrant": _native(False, True),
    "reentrant_norng": _native(True, False),
    "nonreentrant_norng": _native(False, False),
    "transactional": lambda segment, x, w, hidden: transactional_checkpoint(
        segment, x, w, state=[hidden] if hidden is not None else ()
    ),
}
