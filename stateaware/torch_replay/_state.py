"""A declared module's state beyond its buffers' bytes: which tensors are its buffers, and
its plain Python numbers.

A module's forward can change its state without writing a tensor in place: rebinding a
buffer (``self.mem = torch.cat(...)``; ``nn.Module.__setattr__`` stores it in
``_buffers``), rebinding a plain tensor attribute, or moving a Python number used as a
pointer (``self.ptr = (self.ptr + k) % size``). For a *declared* module (and every
submodule) ``ModuleState`` captures, at the segment's forward, the identities in
``_buffers``, the plain tensor attributes and the ``int``/``float``/``bool`` values in
``__dict__`` (``training`` included); a replay runs with them reinstated, and the values
the module held just before the replay are put back afterwards, so the state is written
once — by the forward — as in eager (NOTE [ Replay transaction ], Rule 5).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from stateaware.torch_replay._reach import named_subtree, subtree

__all__ = ["ModuleState", "TrainingModes", "plain_tensors"]

_NUMBERS = (int, float, bool)


#: The attributes every ``nn.Module`` keeps for itself (registries, hook tables, flags
#: such as ``_is_full_backward_hook``): never state, and most of each ``__dict__``, so
#: skipping them keeps a declared module's capture cheap.
_INTERNALS = frozenset(vars(torch.nn.Module())) - {"training"}


def _own(d: dict[str, Any]) -> list[str]:
    """The keys of a module's ``__dict__`` that are not ``_INTERNALS``, in their order."""
    return [k for k in d if k not in _INTERNALS]


def plain_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(path, tensor)`` for tensors stored as plain attributes (not registered) in the subtree;
    views and tensors that require grad are left out (they are not state a replay restores)."""
    out = []
    for path, mod in named_subtree(module):
        d = vars(mod)
        for attr in _own(d):
            value = d[attr]
            if isinstance(value, torch.Tensor) and value._base is None and not value.requires_grad:
                out.append((f"{path}.{attr}" if path else attr, value))
    return out


def _is_state(key: str, value: Any) -> bool:
    # ``None`` is a value like a number: an optional scale or step that is ``None`` at one
    # capture and a number (or tensor) at the other must be put back as ``None``, not dropped.
    return value is None or type(value) in _NUMBERS or (isinstance(value, torch.Tensor) and not key.startswith("_"))


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    """The attributes of a module's ``__dict__`` (or a copy of it) that are state."""
    return {k: d[k] for k in _own(d) if _is_state(k, d[k])}


def _capture(mod: torch.nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    return dict(mod._buffers), _plain(vars(mod))


def _unchanged(now: dict[str, Any], then: dict[str, Any]) -> bool:
    """The same keys, in the same order, bound to the same objects. False is not "changed":
    the caller then compares the state itself (a number rebound to an equal one is the same)."""
    return len(now) == len(then) and all(map(operator.is_, now.values(), then.values())) and list(now) == list(then)


class ModuleState:
    """Buffer identities, plain tensor attributes and Python numbers of a declared module."""

    __slots__ = ("modules", "forward", "outside")

    def __init__(self, module: torch.nn.Module):
        self.modules = subtree(module)
        # Shallow dict copies, made in C: which attributes are state is sorted out only when
        # a replay finds something moved (``enter``), as the copies hold the same objects.
        self.forward = [(m._buffers.copy(), vars(m).copy()) for m in self.modules]
        # (module, its state just before the replay, enter()'s undo log) for the modules the
        # replay reinstates
        self.outside: list[tuple[torch.nn.Module, tuple[dict, dict], tuple[dict, dict]]] | None = None

    def enter(self) -> None:
        # Only modules whose state moved since the forward are touched: usually none, and
        # rewriting every module's __dict__ would cost more than the replay of a small block.
        self.outside = []
        for m, (buffers, attrs) in zip(self.modules, self.forward, strict=True):
            if _unchanged(m._buffers, buffers) and _unchanged(vars(m), attrs):
                continue  # the common case: every key bound to the object it held, checked in C
            now, state = _capture(m), (dict(buffers), _plain(attrs))
            if not _same(now, state):
                self.outside.append((m, now, _reinstate(m, state)))

    def exit(self) -> None:
        if self.outside is not None:
            for m, now, undo in reversed(self.outside):
                _reinstate(m, now)  # drops what the replay created
                _undo(m, undo)  # and puts back what enter() overwrote, whatever its type
            self.outside = None


def _same(a: tuple[dict[str, Any], dict[str, Any]], b: tuple[dict[str, Any], dict[str, Any]]) -> bool:
    """Whether two captures hold the same buffers and attributes: tensors by identity,
    numbers by type and value (``True`` is not ``1``; ``nan`` differs from itself, so a
    ``nan`` attribute is always reinstated, which is harmless)."""
    for x, y in zip(a, b, strict=True):
        if x.keys() != y.keys():
            return False
        for key, value in x.items():
            other = y[key]
            if isinstance(value, torch.Tensor) or isinstance(other, torch.Tensor):
                if value is not other:
                    return False
            elif type(value) is not type(other) or value != other:
                return False
    return True


_ABSENT: Any = object()  # an attribute that was not in the module's __dict__


def _reinstate(mod: torch.nn.Module, state: tuple[dict[str, Any], dict[str, Any]]) -> tuple[dict, dict]:
    """Put ``state`` on ``mod``; returns what it overwrote, for ``_undo``.

    The undo log holds every attribute written or deleted with its previous value, whatever
    its type: an attribute that is state at one capture and not at the other (``None`` then
    a list) comes back as it was, not as the other capture's absence."""
    buffers, plain = state
    # Direct dict writes: no registration hook runs, as no new state is being registered.
    undo_buffers = dict(mod._buffers)
    mod._buffers.clear()
    mod._buffers.update(buffers)
    d = vars(mod)
    undo: dict[str, Any] = {}
    for k in [k for k in _own(d) if k not in plain and _is_state(k, d[k])]:
        undo[k] = d.pop(k)  # an attribute the replay (or the forward) created
    for k, value in plain.items():
        undo.setdefault(k, d.get(k, _ABSENT))
        d[k] = value
    return undo_buffers, undo


def _undo(mod: torch.nn.Module, undo: tuple[dict, dict]) -> None:
    buffers, attrs = undo
    mod._buffers.clear()
    mod._buffers.update(buffers)
    d = vars(mod)
    for k, value in attrs.items():
        if value is _ABSENT:
            d.pop(k, None)
        else:
            d[k] = value


class TrainingModes:
    """The ``training`` flags of every module a segment reached, as its forward saw them.

    ``model.eval()`` (or ``.train()``) between a segment's forward and its backward would
    otherwise make the replay run dropout or a norm in the other mode: different saved
    tensors, a wrong gradient. Captured at the forward (one attribute read per module:
    the module lists are cached per structure, ``_reach.subtree``); a replay sets the
    forward's flags on the modules whose flag differs (the attribute only, not
    ``.train()``, which would recurse and run user overrides) and puts the outside ones
    back afterwards. Declared modules get the same from ``ModuleState``.
    """

    __slots__ = ("modules", "flags", "outside")

    def __init__(self, modules: tuple[torch.nn.Module, ...]):
        self.modules = modules
        self.flags = [m.training for m in modules]
        self.outside: list[tuple[torch.nn.Module, bool]] = []

    def enter(self) -> None:
        self.outside = [(m, m.training) for m, f in zip(self.modules, self.flags, strict=True) if m.training != f]
        for m, _ in self.outside:
            m.training = not m.training

    def exit(self) -> None:
        for m, flag in self.outside:
            m.training = flag
        self.outside = []
