"""Which tensors a segment's modules held, and which containers its arguments were, at its forward.

A replay runs after its forward has returned, when the caller may have changed two things
the forward read through Python objects rather than through tensors:

* **the module's parameters, buffers and tensor attributes** — ``torch.func.functional_call``
  (MAML's fast weights) binds substituted tensors into ``_parameters``/``_buffers`` for the
  call and binds the module's own back when it returns, by direct dict writes that no hook
  sees; a hypernetwork sets generated weights as plain attributes (``m.weight = w`` after
  ``del m.weight``) and sets the next ones before backward. ``Bindings`` keeps, per
  module the segment reaches, the tensors its registries and ``__dict__`` held at the
  forward; a replay runs with them bound (only where they differ) and the outside ones are
  put back afterwards. A replay so computes with the weights the forward used, as eager
  differentiates them.
* **the contents of list, tuple and dict arguments** — a caller that appends to a list after
  passing it (torchvision DenseNet's ``_DenseBlock`` grows its feature list after every
  layer) would hand the replay the longer list. ``frozen`` copies the containers at the
  forward (the same tensors and objects, nested lists, tuples, named tuples and dicts
  copied); each replay gets a fresh copy of that, so a segment that mutates its own
  argument sees, on every replay, what the forward saw.

Limits: other mutable argument objects (a dataclass, a plain object whose attributes are
reassigned after the call) are passed as they are then; their tensors are still watched by
Rule 6b (NOTE [ Replay transaction ] in ``checkpoint``) when the forward read them.
"""

from __future__ import annotations

from typing import Any

import torch

from stateaware.torch_replay._state import _INTERNALS, _unchanged

__all__ = ["Bindings", "frozen", "has_containers"]

_CONTAINERS = (list, tuple, dict)


def has_containers(values: Any) -> bool:
    """Whether any of ``values`` is a list, tuple or dict (a cheap test: most calls pass tensors)."""
    return any(isinstance(v, _CONTAINERS) for v in values)


def frozen(value: Any) -> Any:
    """``value`` with every list, tuple and dict in it copied, nested; other objects as they are.

    Tuple subclasses are rebuilt as their type (named tuples by field); a tuple subclass that
    cannot be rebuilt so, and dict subclasses whose constructor takes other arguments, are
    kept as they are."""
    kind = type(value)
    if kind is list:
        return [frozen(v) for v in value]
    if kind is tuple:
        return tuple(frozen(v) for v in value)
    if kind is dict:
        return {k: frozen(v) for k, v in value.items()}
    if isinstance(value, tuple):
        items = [frozen(v) for v in value]
        try:
            return kind(*items) if hasattr(value, "_fields") else kind(items)
        except TypeError:
            return value
    if isinstance(value, dict):
        try:
            return kind((k, frozen(v)) for k, v in value.items())
        except TypeError:
            return value
    if isinstance(value, list):
        try:
            return kind(frozen(v) for v in value)
        except TypeError:
            return value
    return value


_Bound = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]  # parameters, buffers, __dict__


class Bindings:
    """The tensors bound in each reached module at the forward (module doc).

    The forward keeps three dict copies per module (made in C: no per-attribute Python
    work on the hot path); which plain attributes are tensors is looked at only when a
    replay runs."""

    __slots__ = ("modules", "forward", "outside")

    def __init__(self, modules: tuple[torch.nn.Module, ...]):
        self.modules = modules
        self.forward: list[_Bound] = [(m._parameters.copy(), m._buffers.copy(), m.__dict__.copy()) for m in modules]
        self.outside: list[tuple[torch.nn.Module, _Bound]] = []

    def enter(self) -> None:
        self.outside = []
        for m, (params, buffers, attrs) in zip(self.modules, self.forward, strict=True):
            if _unchanged(m._parameters, params) and _unchanged(m._buffers, buffers) and _unchanged(m.__dict__, attrs):
                continue  # the common case, checked in C (a flipped `training` flag fails it)
            then = (params, buffers, _tensors(attrs))
            now = _bound(m)
            if all(_same(a, b) for a, b in zip(now, then, strict=True)):
                continue
            self.outside.append((m, now))
            _bind(m, then, now)

    def exit(self) -> None:
        for m, now in reversed(self.outside):
            _bind(m, now, _bound(m))
        self.outside = []


def _tensors(d: dict[str, Any]) -> dict[str, Any]:
    """The plain tensor attributes in a module's ``__dict__`` (torch's own tables left out)."""
    return {k: v for k, v in d.items() if isinstance(v, torch.Tensor) and k not in _INTERNALS}


def _bound(m: torch.nn.Module) -> _Bound:
    return m._parameters.copy(), m._buffers.copy(), _tensors(m.__dict__)


def _same(now: dict[str, Any], then: dict[str, Any]) -> bool:
    if len(now) != len(then):
        return False
    for key, value in now.items():
        if then.get(key, now) is not value:
            return False
    return True


def _bind(m: torch.nn.Module, bound: _Bound, current: _Bound) -> None:
    # Direct dict writes, as functional_call makes them: no registration hook runs.
    params, buffers, attrs = bound
    m._parameters.clear()
    m._parameters.update(params)
    m._buffers.clear()
    m._buffers.update(buffers)
    d = m.__dict__
    for k in current[2].keys() - attrs.keys():
        del d[k]
    d.update(attrs)
