"""Segments of a user's model and the state each one writes (``state="auto"``).

One forward of the whole model, as training runs it (gradients enabled), with a
``TorchDispatchMode`` and forward pre-/post-hooks on the segments, answers for each segment:

* its inputs (the positional and keyword arguments the model's own ``forward`` passed,
  copied, with whether each tensor required grad);
* which of the model's tensors — parameters, buffers, plain tensor attributes of any
  submodule — it *writes*. Three witnesses: an aten op whose schema marks an argument
  ``(a!)`` and whose tensor shares that tensor's storage (which also says which rows);
  the version counter moving across the segment; and, for the tensors of the segment's
  own subtree, their bytes changing across it — which catches kernels that neither
  bump the counter nor declare the mutation in their schema (``native_batch_norm``'s
  running statistics);
* whether every write reaches only some rows (dim-0 index ops, slice assignment): then
  ``write="rows"`` and the rows journal (``preserve="rows"``) can keep just those rows;
  else ``write="whole"``;
* which tensors it *reads* that something later in the same forward writes (a later
  segment, or the model's code between segments): its replay must see them as they were,
  so they are its state too;
* which plain Python number attributes (``int``, ``float``, ``bool``) of modules in its
  subtree it changes (a ring pointer ``self.ptr``);
* whether it changes tensors kept in a Python container attribute (a list, tuple, dict or
  set, or a plain object's attributes, two levels deep) of a module in its subtree: an
  item appended, replaced or written in place. Such state has no qualified name a
  declaration can use, so ``trace`` refuses it (``ValueError`` naming the attribute,
  ``blocks.2.history (a list of tensors written in forward)``) rather than let a replay
  append or write it a second time.

The names are qualified from the model's root (``encoder.1.running_mean``, ``head.ptr``),
as ``state_dict()`` and ``get_submodule`` spell them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stateaware.torch_replay.written_rows import dim0_index, row_origin

__all__ = [
    "WRITES",
    "StateEntry",
    "Trace",
    "resolve_segments",
    "trace",
    "explicit_names",
    "map_tensors",
    "leaf_copy",
]

#: Values of ``StateEntry.write``.
WRITES = ("whole", "rows", "value")

_NUMBER = (bool, int, float, complex)
_SKIPPED_ATTRS = frozenset({"training"})  # nn.Module's mode flag: train()/eval() set it, forward does not
# nn.Module's own bookkeeping dicts (_parameters, _buffers, _modules, hooks): not user containers
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
_CONTAINER_DEPTH = 2  # how deep a container attribute is looked into


@dataclass(frozen=True)
class StateEntry:
    """One piece of a segment's state: a tensor (``kind`` buffer, parameter or attribute)
    with its ``bytes`` and ``write`` ("whole" or "rows"), or a Python number attribute
    (``kind="python"``, ``write="value"``, 0 bytes)."""

    name: str
    kind: str
    bytes: int
    write: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "bytes": int(self.bytes), "write": self.write}

    @staticmethod
    def from_dict(raw: dict[str, Any]) -> StateEntry:
        return StateEntry(str(raw["name"]), str(raw["kind"]), int(raw["bytes"]), str(raw["write"]))


@dataclass
class Trace:
    """What one forward of the model showed, per segment in execution order."""

    names: list[str]
    inputs: list[tuple[tuple, dict]] = field(default_factory=list)
    state: list[list[StateEntry]] = field(default_factory=list)


def resolve_segments(model: torch.nn.Module, segments: Sequence[str] | None) -> list[str]:
    """Qualified names of the segments: an ``nn.Sequential``'s children, or ``segments``.

    ``ValueError`` for a name that is not a submodule, a repeated one, or one segment
    inside another (a replay of the outer would re-run the inner).
    """
    if segments is None:
        if not isinstance(model, torch.nn.Sequential):
            raise ValueError(
                f"segments=None needs an nn.Sequential, got {type(model).__name__}. Tip: pass "
                "segments=['encoder.layer1', ...], the qualified names of submodules its forward runs in order."
            )
        names = [name for name, _ in model.named_children()]
    else:
        names = [str(s) for s in segments]
    if not names:
        raise ValueError("segments is empty; name at least one submodule")
    if len(set(names)) != len(names):
        raise ValueError(f"segments names a submodule twice: {names}")
    modules = dict(model.named_modules())
    for name in names:
        if name == "" or name not in modules:
            raise ValueError(
                f"segment {name!r} is not a submodule of {type(model).__name__}; "
                f"valid names are its named_modules(), e.g. {[n for n in modules if n][:6]}"
            )
    for a in names:
        for b in names:
            if a != b and b.startswith(a + "."):
                raise ValueError(f"segment {b!r} lies inside segment {a!r}; segments must be disjoint")
    return names


def _tensors(model: torch.nn.Module) -> dict[int, tuple[str, str, torch.Tensor]]:
    """Storage pointer -> (qualified name, kind, tensor) of every tensor the model holds."""
    found: dict[int, tuple[str, str, torch.Tensor]] = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        items = [(n, "parameter", t) for n, t in module._parameters.items()]
        items += [(n, "buffer", t) for n, t in module._buffers.items()]
        items += [(n, "attribute", t) for n, t in vars(module).items() if isinstance(t, torch.Tensor)]
        for name, kind, t in items:
            if isinstance(t, torch.Tensor):
                found.setdefault(_ptr(t), (prefix + name, kind, t))
    return found


def _aliases(model: torch.nn.Module) -> dict[int, list[str]]:
    """Storage pointer -> every qualified name the model holds that storage under, in module
    order (a tensor shared by several modules, as one cell's counter by every time step)."""
    found: dict[int, list[str]] = {}
    for path, module in model.named_modules(remove_duplicate=False):
        prefix = f"{path}." if path else ""
        items = [*module._parameters.items(), *module._buffers.items()]
        items += [(n, t) for n, t in vars(module).items() if isinstance(t, torch.Tensor)]
        for name, t in items:
            if isinstance(t, torch.Tensor) and prefix + name not in found.setdefault(_ptr(t), []):
                found[_ptr(t)].append(prefix + name)
    return found


def _local_name(aliases: dict[int, list[str]], t: torch.Tensor, segment: str, name: str) -> str:
    """The name segment ``segment`` holds ``t`` under (what its run resolves), else ``name``."""
    inside = [a for a in aliases.get(_ptr(t), []) if a.startswith(segment + ".")]
    return inside[0] if inside else name


def _ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def _numbers(model: torch.nn.Module, root: str) -> dict[str, Any]:
    """``qualified name -> value`` of the plain Python numbers of ``root``'s subtree."""
    out = {}
    for path, module in model.get_submodule(root).named_modules():
        where = ".".join(p for p in (root, path) if p)
        for key, value in vars(module).items():
            if type(value) in _NUMBER and key not in _SKIPPED_ATTRS and not key.startswith("__"):
                out[f"{where}.{key}"] = value
    return out


def _signature(value: Any, depth: int) -> tuple[Any, ...] | None:
    """What a container holds, as tensor identities and versions (None: no tensor inside)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), value._version)
    if depth == 0 or isinstance(value, torch.nn.Module):
        return None
    items: list[tuple[Any, Any]]
    if isinstance(value, (list, tuple)):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (set, frozenset)):
        items = [(None, v) for v in value if isinstance(v, torch.Tensor)]
    elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
        items = list(vars(value).items())
    else:
        return None
    inner = [(k, _signature(v, depth - 1)) for k, v in items]
    if all(sig is None for _, sig in inner):
        return None
    return (type(value).__name__, len(items), tuple(inner))


def _containers(model: torch.nn.Module, root: str) -> dict[str, tuple[Any, ...]]:
    """``qualified attribute -> signature`` of the container attributes holding tensors in
    ``root``'s subtree (module doc)."""
    out = {}
    for path, module in model.get_submodule(root).named_modules():
        where = ".".join(p for p in (root, path) if p)
        for key, value in vars(module).items():
            if key in _MODULE_INTERNALS or isinstance(value, (torch.Tensor, torch.nn.Module)):
                continue
            sig = _signature(value, _CONTAINER_DEPTH)
            if sig is not None:
                out[f"{where}.{key}" if where else key] = sig
    return out


def _subtree_tensors(model: torch.nn.Module, root: str) -> list[tuple[str, torch.Tensor]]:
    sub = _tensors(model.get_submodule(root))
    return [(f"{root}.{n}" if root else n, t) for n, _, t in sub.values()]


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Bytes, not values: NaN equals NaN here, and -0.0 differs from 0.0.
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(
        a.detach().reshape(-1).contiguous().view(torch.uint8), b.detach().reshape(-1).contiguous().view(torch.uint8)
    )


class _Watch(TorchDispatchMode):
    """Records, per op, which model tensors it reads and writes (and whether in rows)."""

    def __init__(self, tensors: dict[int, tuple[str, str, torch.Tensor]]):
        super().__init__()
        self.tensors = tensors
        self.events: list[tuple[str, str, str]] = []  # (name, "read" | "rows" | "whole", segment or "")
        self.segment = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for index, argument in enumerate(func._schema.arguments):
            value = args[index] if index < len(args) else kwargs.get(argument.name)
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if not isinstance(t, torch.Tensor):
                    continue
                hit = self.tensors.get(_ptr(t))
                if hit is None:
                    continue
                name, _, base = hit
                if argument.alias_info is not None and argument.alias_info.is_write:
                    self.events.append((name, _write_kind(func, t, base, args), self.segment))
                else:
                    self.events.append((name, "read", self.segment))
        return func(*args, **kwargs)


def _write_kind(func, target: torch.Tensor, base: torch.Tensor, args: tuple) -> str:
    if base.dim() == 0:
        return "whole"
    if dim0_index(func, target, base, args) is not None:
        return "rows"
    origin = row_origin(base, target)
    return "rows" if origin is not None and target.shape[0] < base.shape[0] else "whole"


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with ``fn`` applied to each tensor inside lists, tuples (named ones too) and dicts."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple takes its fields as arguments
        return type(value)(*(map_tensors(v, fn) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def leaf_copy(t: torch.Tensor) -> torch.Tensor:
    """A fresh leaf holding ``t``'s bytes that requires grad as ``t`` does."""
    return t.detach().clone().requires_grad_(t.requires_grad)


def trace(model: torch.nn.Module, example_inputs: tuple, names: list[str]) -> Trace:
    """Run ``model(*example_inputs)`` once and record each segment's inputs and state.

    The caller restores the model afterwards (the forward writes its state for real).
    ``ValueError`` when a segment does not run exactly once per forward.
    """
    tensors = _tensors(model)
    watch = _Watch(tensors)
    order: list[str] = []
    inputs: dict[str, tuple[tuple, dict]] = {}
    versions: dict[str, dict[str, int]] = {}
    numbers_before: dict[str, dict[str, Any]] = {}
    bytes_before: dict[str, dict[str, torch.Tensor]] = {}
    bytes_changed: dict[str, set[str]] = {}
    changed_numbers: dict[str, list[str]] = {}
    version_writes: dict[str, set[str]] = {}
    containers_before: dict[str, dict[str, tuple[Any, ...]]] = {}
    changed_containers: list[str] = []
    handles = []

    def pre(name):
        def hook(module, args, kwargs):
            order.append(name)
            # copies: a later in-place op of the same forward may overwrite a segment's input
            inputs[name] = (map_tensors(args, leaf_copy), map_tensors(kwargs, leaf_copy))
            versions[name] = {n: t._version for n, _, t in tensors.values()}
            numbers_before[name] = _numbers(model, name)
            containers_before[name] = _containers(model, name)
            bytes_before[name] = {n: t.detach().clone() for n, t in _subtree_tensors(model, name)}
            watch.segment = name

        return hook

    def post(name):
        def hook(module, args, kwargs, output):
            watch.segment = ""
            after = _numbers(model, name)
            changed_numbers[name] = [k for k, v in numbers_before[name].items() if after.get(k, v) != v]
            before_c, after_c = containers_before.pop(name), _containers(model, name)
            changed_containers.extend(
                f"{k} (a {after_c.get(k, v)[0]} of tensors written in forward)"
                for k, v in {**after_c, **before_c}.items()
                if before_c.get(k) != after_c.get(k)
            )
            version_writes[name] = {n for n, _, t in tensors.values() if t._version != versions[name][n]}
            before = bytes_before.pop(name)
            bytes_changed[name] = {  # named as the model names them (a tensor may be held twice)
                tensors[_ptr(t)][0]
                for n, t in _subtree_tensors(model, name)
                if n in before and not _same_bytes(before[n], t)
            }

        return hook

    for name in names:
        module = model.get_submodule(name)
        handles.append(module.register_forward_pre_hook(pre(name), with_kwargs=True))
        handles.append(module.register_forward_hook(post(name), with_kwargs=True))
    try:
        with torch.enable_grad(), watch:
            model(*example_inputs)
    finally:
        for handle in handles:
            handle.remove()
    if changed_containers:
        raise ValueError(
            "state='auto' cannot declare state kept in Python containers; the segment(s) changed "
            + ", ".join(changed_containers)
            + ", and a replay would write it a second time. Tip: keep such state in registered buffers "
            "(register_buffer, a ring buffer with an index), or move the write out of the segment."
        )
    missing = [n for n in names if order.count(n) != 1]
    if missing:
        raise ValueError(
            f"segment(s) {missing} ran {[order.count(n) for n in missing]} times in one forward of "
            f"{type(model).__name__}; each segment must run exactly once"
        )

    by_name = {n: (kind, t) for n, kind, t in tensors.values()}
    aliases = _aliases(model)
    result = Trace(names=order)
    for position, name in enumerate(order):
        mine = [e for e in watch.events if e[2] == name]
        later_segments = set(order[position + 1 :])
        start = next(i for i, e in enumerate(watch.events) if e[2] == name) if mine else len(watch.events)
        later_writes = {
            e[0]
            for e in watch.events[start:]
            if e[1] != "read" and e[2] != name and (e[2] in later_segments or e[2] == "")
        }
        writes: dict[str, set[str]] = {}
        for tname, what, _ in mine:
            if what != "read":
                writes.setdefault(tname, set()).add(what)
        for tname in version_writes[name] | bytes_changed[name]:
            writes.setdefault(tname, {"whole"})  # a write no op announced: its rows are unknown
        for tname in {e[0] for e in mine if e[1] == "read"} & later_writes:
            writes.setdefault(tname, set()).add("whole")  # read here, overwritten before backward
        entries = []
        for tname in sorted(writes, key=list(by_name).index):
            kind, t = by_name[tname]
            write = "rows" if writes[tname] == {"rows"} else "whole"
            local = _local_name(aliases, t, name, tname)
            entries.append(StateEntry(local, kind, t.numel() * t.element_size(), write))
        entries += [StateEntry(k, "python", 0, "value") for k in changed_numbers[name]]
        result.inputs.append(inputs[name])
        result.state.append(entries)
    return result


def explicit_names(model: torch.nn.Module, state: Sequence[Any]) -> set[str]:
    """Qualified names an explicit ``state=[...]`` covers: a tensor names itself, a module
    its buffers, tensor attributes and Python number attributes (its whole subtree), a
    string the tensor, attribute or module of that name. ``TypeError`` for anything else."""
    tensors = {id(t): n for n, _, t in _tensors(model).values()}
    modules = {id(m): n for n, m in model.named_modules()}
    covered: set[str] = set()
    aliases = _aliases(model)
    all_names = {a for names in aliases.values() for a in names} | set(_numbers(model, ""))
    for i, item in enumerate(state):
        if isinstance(item, str):
            prefix = item
        elif isinstance(item, torch.Tensor) and id(item) in tensors:
            prefix = tensors[id(item)]
        elif isinstance(item, torch.nn.Module) and id(item) in modules:
            prefix = modules[id(item)]
            covered |= {n for n in all_names if prefix == "" or n.startswith(prefix + ".")}
            continue
        else:
            raise TypeError(
                f"state[{i}] is a {type(item).__name__} that is not part of the model; valid items "
                "are the model's tensors, its submodules, or their qualified names as strings"
            )
        covered |= {n for n in all_names if n == prefix or n.startswith(prefix + ".")}
    # A tensor declared under one name is declared under every name the model holds it by.
    return covered | {a for names in aliases.values() if covered.intersection(names) for a in names}
