"""Put a module back exactly as it was: how profiling leaves no trace.

``ModelSnapshot(module)`` keeps, for the module's whole subtree, the bytes of every
parameter, buffer and plain tensor attribute (and of every parameter's ``.grad``), the
identity of each (a rebound buffer is rebound back), every other instance attribute by
identity with what it holds (a list's, dict's or set's items, a plain object's fields,
nested), and, with ``rng=True``, the global CPU and CUDA random-generator states. ``restore()`` writes
them all back through ``.data`` (no autograd-visible write); it can be called any number
of times.

# NOTE [ Hooks and markers ]
# A library may install state on the modules it runs the first time they run: Hugging
# Face's output recording (``output_hidden_states``, ``output_router_logits``) registers a
# forward hook on every layer and sets ``_output_capturing_hooks_installed`` on the model.
# Profiling runs that first forward; undoing the marker but not the hooks would make the
# next forward install them again (each output recorded twice, a wrong auxiliary loss).
# So the snapshot keeps every entry of every ``__dict__`` — torch's own tables (parameters,
# buffers, submodules, the forward/backward/state-dict hook dicts, with_kwargs and
# always_called flags, the non-persistent set) by their contents, restored into the same
# dict objects (a ``RemovableHandle`` refers to them), and every other attribute as above
# — and torch's process-wide module hook tables (``register_module_forward_hook`` and
# friends). ``restore()`` deletes what was added after, whatever its name.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ModelSnapshot"]

#: torch's tables in every module's ``__dict__`` (registries and hook dicts): kept by contents.
_TABLES = frozenset(k for k, v in vars(torch.nn.Module()).items() if isinstance(v, (dict, set)))
#: torch's process-wide module hook tables (``torch.nn.modules.module``), kept the same way.
_GLOBAL_TABLES = tuple(
    name
    for name, value in vars(torch.nn.modules.module).items()
    if name.startswith("_global_") and isinstance(value, dict)
)
_GLOBAL_FLAGS = ("_global_is_full_backward_hook",)


class ModelSnapshot:
    """See the module docstring."""

    def __init__(self, module: torch.nn.Module, *, rng: bool = False) -> None:
        self.modules = list(module.modules())
        # The model's own modules and tensors, restored by their own rules: never walked as contents.
        self.own: dict[int, Any] = {id(m): m for m in self.modules}
        self.own.update({id(t): t for m in self.modules for t in vars(m).values() if isinstance(t, torch.Tensor)})
        self.own.update({id(t): t for t in module.parameters()})
        self.own.update({id(t): t for t in module.buffers()})
        self.tensors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.grads: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = []
        self.dicts: list[tuple[torch.nn.Module, dict[str, Any], dict[str, Any]]] = []
        # id -> (object, what it held): every other attribute keeps its identity (a library may
        # hold it elsewhere too) and gets its contents back (``_put_contents``)
        self.contents: dict[int, tuple[Any, Any]] = {}
        for m in self.modules:
            attrs = {}
            for key, value in vars(m).items():
                if key in _TABLES and isinstance(value, (dict, set)):
                    continue
                if isinstance(value, torch.Tensor):
                    self._keep(value)
                    attrs[key] = value
                elif isinstance(value, torch.nn.Module):
                    attrs[key] = value
                else:
                    attrs[key] = value
                    self._hold(value)
            registries = {k: v.copy() for k, v in vars(m).items() if k in _TABLES and isinstance(v, (dict, set))}
            for t in (*registries["_parameters"].values(), *registries["_buffers"].values()):
                if t is not None:
                    self._keep(t)
            self.dicts.append((m, attrs, registries))
        for p in {id(p): p for m in self.modules for p in m._parameters.values() if p is not None}.values():
            grad = p.grad
            self.grads.append((p, grad, None if grad is None else grad.detach().clone()))
        self.rng = _rng_state() if rng else None
        globals_ = vars(torch.nn.modules.module)
        self.global_tables = {name: globals_[name].copy() for name in _GLOBAL_TABLES}
        self.global_flags = {name: globals_[name] for name in _GLOBAL_FLAGS if name in globals_}

    def _hold(self, value: Any) -> None:
        """Keep what ``value`` holds, and what the containers and objects in it hold (once each)."""
        if id(value) in self.contents or id(value) in self.own:
            return
        held = _contents(value)
        self.contents[id(value)] = (value, held)
        if held is not None:
            for item in held.values() if isinstance(held, dict) else held:
                self._hold(item)

    def _keep(self, t: torch.Tensor) -> None:
        if id(t) not in self.tensors:
            self.tensors[id(t)] = (t, t.detach().clone(memory_format=torch.preserve_format))

    def restore(self) -> None:
        """Write everything back (see the module docstring)."""
        for m, attrs, registries in self.dicts:
            for name, saved in registries.items():
                live = m.__dict__.get(name)
                if type(live) is type(saved):
                    live.clear()  # the same dict object: handles refer to it
                    live.update(saved)
                else:
                    m.__dict__[name] = saved.copy()
            for key in [k for k in vars(m) if k not in attrs and k not in registries]:
                del m.__dict__[key]
            m.__dict__.update(attrs)
        for value, held in self.contents.values():
            _put_contents(value, held)
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
        globals_ = vars(torch.nn.modules.module)
        for name, saved in self.global_tables.items():
            globals_[name].clear()
            globals_[name].update(saved)
        globals_.update(self.global_flags)


def _contents(value: Any) -> Any:
    """What a mutable attribute holds, by identity: a list's, dict's or set's items, a plain
    object's ``__dict__`` (a config object's fields); None for the rest (numbers, strings,
    tensors, callables, objects without a ``__dict__``), which are kept by identity only."""
    if isinstance(value, (list, set)):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    if callable(value) or isinstance(value, (type, torch.Tensor, torch.nn.Module)):
        return None
    fields = getattr(value, "__dict__", None)
    return dict(fields) if isinstance(fields, dict) else None


def _put_contents(value: Any, held: Any) -> None:
    if held is None:
        return
    if isinstance(value, (list, set, dict)):
        if _same_items(value, held):
            return
        value.clear()
        if isinstance(value, list):
            value.extend(held)
        else:
            value.update(held)
        return
    fields = vars(value)
    if not _same_items(fields, held):
        fields.clear()
        fields.update(held)


def _same_items(live: Any, held: Any) -> bool:
    if isinstance(held, dict):
        return live.keys() == held.keys() and all(live[k] is v for k, v in held.items())
    return len(live) == len(held) and all(a is b for a, b in zip(live, held, strict=True))


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda:
        torch.cuda.set_rng_state_all(cuda)
