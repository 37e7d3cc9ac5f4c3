"""A declared module's state beyond its buffers' bytes: which tensors are its buffers, and
its plain Python numbers.

A module's forward can change its state without writing a tensor in place: rebinding a
buffer (``self.mem = torch.cat(...)``; ``nn.Module.__setattr__`` stores it in
``_buffers``), rebinding a plain tensor attribute, or moving a Python number used as a
pointer (``self.ptr = (self.ptr + k) % size``). For a *declared* module (and every
submodule) :class:`ModuleState` captures, at the segment's forward, the identities in
``_buffers``, the plain tensor attributes and the ``int``/``float``/``bool`` values in
``__dict__`` (``training`` included); a replay runs with them reinstated, and the values
the module held just before the replay are put back afterwards, so the state is written
once — by the forward — as in eager (NOTE [ Replay transaction ], Rule 5).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ModuleState", "TrainingModes", "plain_tensors"]

_NUMBERS = (int, float, bool)


def plain_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(path, tensor)`` for tensors stored as plain attributes (not registered) in the subtree;
    views and tensors that require grad are left out (they are not state a replay restores)."""
    out = []
    for path, mod in module.named_modules():
        for attr, value in vars(mod).items():
            if isinstance(value, torch.Tensor) and value._base is None and not value.requires_grad:
                out.append((f"{path}.{attr}" if path else attr, value))
    return out


def _capture(mod: torch.nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    plain = {
        k: v
        for k, v in vars(mod).items()
        if type(v) in _NUMBERS or (isinstance(v, torch.Tensor) and not k.startswith("_"))
    }
    return dict(mod._buffers), plain


class ModuleState:
    """Buffer identities, plain tensor attributes and Python numbers of a declared module."""

    __slots__ = ("modules", "forward", "outside")

    def __init__(self, module: torch.nn.Module):
        self.modules = list(module.modules())
        self.forward = [_capture(m) for m in self.modules]
        self.outside: list[tuple[dict, dict]] | None = None

    def enter(self) -> None:
        self.outside = [_capture(m) for m in self.modules]
        for m, state in zip(self.modules, self.forward, strict=True):
            _reinstate(m, state)

    def exit(self) -> None:
        if self.outside is not None:
            for m, state in zip(self.modules, self.outside, strict=True):
                _reinstate(m, state)
            self.outside = None


def _reinstate(mod: torch.nn.Module, state: tuple[dict[str, Any], dict[str, Any]]) -> None:
    buffers, plain = state
    # Direct dict writes: no registration hook runs, as no new state is being registered.
    mod._buffers.clear()
    mod._buffers.update(buffers)
    d = vars(mod)
    for k in [
        k
        for k, v in d.items()
        if k not in plain and (type(v) in _NUMBERS or (isinstance(v, torch.Tensor) and not k.startswith("_")))
    ]:
        del d[k]  # an attribute the replay (or the forward) created
    d.update(plain)


class TrainingModes:
    """The ``training`` flags of every module a segment reached, as its forward saw them.

    ``model.eval()`` (or ``.train()``) between a segment's forward and its backward would
    otherwise make the replay run dropout or a norm in the other mode: different saved
    tensors, a wrong gradient. Captured at the forward (one attribute read per module:
    the module lists are cached per structure, ``_reach.subtree``); a replay sets the
    forward's flags on the modules whose flag differs (the attribute only, not
    ``.train()``, which would recurse and run user overrides) and puts the outside ones
    back afterwards. Declared modules get the same from :class:`ModuleState`.
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
