"""The state a checkpointed segment can reach, with names a user recognises.

Undeclared-state detection (NOTE [ Replay transaction ], Rule 6) watches what the
forward *touched* (``_reads``); this module only names it, when an error is raised, and
finds the devices a segment's modules live on (for the RNG stash) through a per-module
cache. Discovery is deliberately shallow: the function's
tensor arguments, the function itself or its bound ``self`` when that is a module, the
modules and tensors in its closure cells, default arguments, ``functools.partial``
arguments, and module-level globals the function's code names. Modules contribute every
parameter, buffer, plain tensor attribute and generator of their subtree. Objects
hidden deeper (an attribute of a plain object, a list inside a dict) are not named; an
error then describes them by shape, dtype and device.

The device cache is keyed by the module and by a global structure generation that
PyTorch's module/parameter/buffer registration hooks bump; each entry keeps where to
find one tensor per device (a dict and a key), so moving a module (``.to``) is seen
when the sample is read, without walking the module again.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Iterator
from typing import Any

import torch

__all__ = [
    "describe",
    "names",
    "module_devices",
    "structure_generation",
    "subtree",
    "named_subtree",
    "training_flags",
]

_MAX_CONTAINER = 64  # look into small lists/tuples/dicts of tensors only; cost stays bounded


def names(fn: Any, args: tuple, kwargs: dict) -> dict[int, str]:
    """``id(obj) -> name`` for every tensor and generator the segment reaches (for messages)."""
    found: dict[int, str] = {}
    for name, obj in _roots(fn, args, kwargs):
        if isinstance(obj, torch.Generator):
            found.setdefault(id(obj), name)
            continue
        for sub, t in _tensors_of(name, obj):
            found.setdefault(id(t), sub)
        if isinstance(obj, torch.nn.Module):
            for path, mod in obj.named_modules():
                for attr, value in vars(mod).items():
                    if isinstance(value, (torch.Tensor, torch.Generator)):
                        where = f"{name}.{path}." if path else f"{name}."
                        found.setdefault(id(value), f"{where}{attr} ({type(mod).__name__}, plain attribute)")
    return found


def describe(name: str, t: torch.Tensor) -> str:
    """``name`` with shape, dtype and device, as error messages print it."""
    return f"{name} (shape {tuple(t.shape)}, {t.dtype}, {t.device})"


def _roots(fn: Any, args: tuple, kwargs: dict) -> Iterator[tuple[str, Any]]:
    for i, a in enumerate(args):
        yield f"argument {i}", a
    for k, v in kwargs.items():
        yield f"keyword argument {k!r}", v
    seen: set[int] = set()
    stack: list[Any] = [fn]
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, torch.nn.Module):
            yield type(f).__name__, f
            continue
        if isinstance(f, functools.partial):
            stack.append(f.func)
            for i, a in enumerate(f.args):
                yield f"partial argument {i}", a
            for k, v in f.keywords.items():
                yield f"partial keyword {k!r}", v
            continue
        owner = getattr(f, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            yield type(owner).__name__, owner
        func = getattr(f, "__func__", f)
        code = getattr(func, "__code__", None)
        if code is None:
            continue
        # Not strict: a callable that is not a plain function may lack the __closure__ its code implies.
        for var, cell in zip(code.co_freevars, getattr(func, "__closure__", None) or (), strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (variable not yet bound)
                continue
            if callable(value) and not isinstance(value, (torch.nn.Module, torch.Tensor)):
                stack.append(value)
            else:
                yield var, value
        for i, d in enumerate(getattr(func, "__defaults__", None) or ()):
            yield f"default argument {i}", d
        g = getattr(func, "__globals__", {})
        for var in _global_names(code, g):
            value = g.get(var)
            if isinstance(value, (torch.nn.Module, torch.Tensor, torch.Generator)):
                yield var, value


_globals_of: dict[tuple[Any, int], tuple[int, tuple[str, ...]]] = {}


def _global_names(code: Any, names: dict) -> tuple[str, ...]:
    """The names ``code`` uses that its module defines (``co_names`` also lists attribute
    names), found again whenever the module's globals grow or shrink; read on every
    checkpoint call, so worth a cache per code object."""
    entry = _globals_of.get((code, id(names)))
    if entry is None or entry[0] != len(names):
        entry = (len(names), tuple(n for n in code.co_names if n in names))
        _globals_of[(code, id(names))] = entry
    return entry[1]


def _tensors_of(name: str, obj: Any) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        yield name, obj
    elif isinstance(obj, torch.nn.Module):
        # "Net.1.running_mean (BatchNorm1d)": the path a user types, and the owner's class.
        for path, mod in obj.named_modules():
            where = f"{name}.{path}." if path else f"{name}."
            for sub, t in itertools.chain(mod.named_buffers(recurse=False), mod.named_parameters(recurse=False)):
                if t is not None:
                    yield f"{where}{sub} ({type(mod).__name__})", t
    elif isinstance(obj, (list, tuple)) and len(obj) <= _MAX_CONTAINER:
        for i, o in enumerate(obj):
            if isinstance(o, (torch.Tensor, torch.nn.Module)):
                yield from _tensors_of(f"{name}[{i}]", o)
    elif isinstance(obj, dict) and len(obj) <= _MAX_CONTAINER:
        for k, o in obj.items():
            if isinstance(o, (torch.Tensor, torch.nn.Module)):
                yield from _tensors_of(f"{name}[{k!r}]", o)


# --------------------------------------------------------------------------- device cache

_generation = [0]  # bumped whenever a walked module registers a module, parameter or buffer
_device_cache: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, list]] = weakref.WeakKeyDictionary()
# Every module some cache here has walked. A registration into any other module cannot make
# a cached walk stale: slicing a ModuleList (Hugging Face's `self.layers[:n]` on every
# forward) registers its modules into a new container, which must not start every cache over.
_walked: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def _structure_changed(parent: torch.nn.Module, *_: Any) -> None:
    if parent in _walked:
        _generation[0] += 1


def _walk(module: torch.nn.Module) -> tuple[torch.nn.Module, ...]:
    """``module.modules()``, each remembered as walked (so its registrations bump the generation)."""
    found = tuple(module.modules())
    _walked.update(found)
    return found


for _register in (
    torch.nn.modules.module.register_module_module_registration_hook,
    torch.nn.modules.module.register_module_parameter_registration_hook,
    torch.nn.modules.module.register_module_buffer_registration_hook,
):
    _register(_structure_changed)


def structure_generation() -> int:
    """A number that changes whenever a module some cache here walked registers a module,
    parameter or buffer (a registration elsewhere cannot make a cached walk stale)."""
    return _generation[0]


_watched_modes: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, list]] = weakref.WeakKeyDictionary()


def training_flags(module: torch.nn.Module) -> tuple[bool, ...]:
    """The ``training`` flags of ``module`` and of its norm layers (which write their running
    statistics only in training mode); the submodules are found once per structure."""
    entry = _watched_modes.get(module)
    if entry is None or entry[0] != _generation[0]:
        norms = [m for m in _walk(module) if isinstance(m, torch.nn.modules.batchnorm._NormBase)]
        entry = (_generation[0], [module, *norms])
        _watched_modes[module] = entry
    return tuple(m.training for m in entry[1])


_subtrees: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, tuple[torch.nn.Module, ...]]] = (
    weakref.WeakKeyDictionary()
)


_named_subtrees: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, tuple[tuple[str, torch.nn.Module], ...]]] = (
    weakref.WeakKeyDictionary()
)


def subtree(module: torch.nn.Module) -> tuple[torch.nn.Module, ...]:
    """``module.modules()`` as a tuple, walked once per structure generation."""
    entry = _subtrees.get(module)
    if entry is None or entry[0] != _generation[0]:
        entry = (_generation[0], _walk(module))
        _subtrees[module] = entry
    return entry[1]


def named_subtree(module: torch.nn.Module) -> tuple[tuple[str, torch.nn.Module], ...]:
    """``module.named_modules()`` as a tuple, walked once per structure generation."""
    entry = _named_subtrees.get(module)
    if entry is None or entry[0] != _generation[0]:
        _walk(module)
        entry = (_generation[0], tuple(module.named_modules()))
        _named_subtrees[module] = entry
    return entry[1]


def module_devices(module: torch.nn.Module) -> set[torch.device]:
    """The devices of ``module``'s parameters and buffers, walked once per structure."""
    entry = _device_cache.get(module)
    if entry is None or entry[0] != _generation[0]:
        samples, seen = [], set()
        for mod in _walk(module):
            for table in (mod._parameters, mod._buffers):
                for key, t in table.items():
                    if t is not None and t.device not in seen:
                        seen.add(t.device)
                        samples.append((table, key))
        entry = (_generation[0], samples)
        _device_cache[module] = entry
    out = set()
    for table, key in entry[1]:
        t = table.get(key)
        if t is not None:
            out.add(t.device)
    return out
