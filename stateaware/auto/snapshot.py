"""Put a module back exactly as it was: how profiling leaves no trace.

``ModelSnapshot(module)`` keeps, for the module's whole subtree, the bytes of every
parameter, buffer and plain tensor attribute (and of every parameter's ``.grad``), the
identity of each (a rebound buffer is rebound back), every other instance attribute
(Python numbers, strings, containers: deep copies where they copy, else the object), and,
with ``rng=True``, the global CPU and CUDA random-generator states. ``restore()`` writes
them all back through ``.data`` (no autograd-visible write); it can be called any number
of times.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["ModelSnapshot"]

_REGISTRIES = ("_parameters", "_buffers", "_modules")


class ModelSnapshot:
    """See the module docstring."""

    def __init__(self, module: torch.nn.Module, *, rng: bool = False) -> None:
        self.modules = list(module.modules())
        # Deep copies share the model's own modules and tensors (a hook list or a bound
        # method refers to them): only plain Python data is copied.
        self.memo: dict[int, Any] = {id(m): m for m in self.modules}
        self.memo.update({id(t): t for m in self.modules for t in vars(m).values() if isinstance(t, torch.Tensor)})
        self.memo.update({id(t): t for t in module.parameters()})
        self.memo.update({id(t): t for t in module.buffers()})
        self.tensors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.grads: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = []
        self.dicts: list[tuple[torch.nn.Module, dict[str, Any], dict[str, dict[str, Any]]]] = []
        for m in self.modules:
            attrs = {}
            for key, value in vars(m).items():
                if key in _REGISTRIES or key.startswith("_forward") or key.startswith("_backward"):
                    continue
                if isinstance(value, torch.Tensor):
                    self._keep(value)
                    attrs[key] = value
                elif isinstance(value, torch.nn.Module):
                    attrs[key] = value
                else:
                    attrs[key] = _copy(value, self.memo)
            registries = {name: dict(getattr(m, name)) for name in _REGISTRIES}
            for t in (*registries["_parameters"].values(), *registries["_buffers"].values()):
                if t is not None:
                    self._keep(t)
            self.dicts.append((m, attrs, registries))
        for p in {id(p): p for m in self.modules for p in m._parameters.values() if p is not None}.values():
            grad = p.grad
            self.grads.append((p, grad, None if grad is None else grad.detach().clone()))
        self.rng = _rng_state() if rng else None

    def _keep(self, t: torch.Tensor) -> None:
        if id(t) not in self.tensors:
            self.tensors[id(t)] = (t, t.detach().clone(memory_format=torch.preserve_format))

    def restore(self) -> None:
        """Write everything back (see the module docstring)."""
        for m, attrs, registries in self.dicts:
            for name, saved in registries.items():
                live = getattr(m, name)
                live.clear()
                live.update(saved)
            for key in [
                k
                for k in vars(m)
                if k not in attrs
                and k not in _REGISTRIES
                and not k.startswith("_forward")
                and not k.startswith("_backward")
            ]:
                del m.__dict__[key]
            for key, value in attrs.items():
                m.__dict__[key] = (
                    value if isinstance(value, (torch.Tensor, torch.nn.Module)) else _copy(value, self.memo)
                )
        with torch.no_grad():
            for t, saved in self.tensors.values():
                if t.data.shape != saved.shape or t.data.stride() != saved.stride():
                    t.data = saved.clone(memory_format=torch.preserve_format)
                else:
                    t.data.copy_(saved)
        for p, grad, saved in self.grads:
            p.grad = grad
            if grad is not None:
                grad.data.copy_(saved)
        if self.rng is not None:
            _set_rng_state(self.rng)


def _copy(value: Any, memo: dict[int, Any]) -> Any:
    if isinstance(value, (bool, int, float, complex, str, bytes, type(None))):
        return value
    try:
        return copy.deepcopy(value, dict(memo))
    except Exception:  # an object that refuses copying is kept by reference
        return value


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda:
        torch.cuda.set_rng_state_all(cuda)
