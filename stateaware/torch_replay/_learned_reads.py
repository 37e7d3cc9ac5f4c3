"""Rule 6 at the cost of a few version reads: learn a segment's reads once, re-check them after.

Recording every torch call of a forward (``_reads.Touched``) costs a Python call per op,
~0.7 ms for a segment of fifty small ops: more than the segment itself on a CPU, where
the cost runtime's 64 small segments spend it on every step. Most segments touch the
same pre-existing tensors on every call: their arguments (new objects each step, but in
the same positions), and the parameters, buffers and closure tensors they reach (the
same objects). So the first call of a segment is recorded; when it did nothing a version
counter cannot show (a ``.data`` alias, fused running-statistics write, generator or
rebound buffer: ``Reads.silent``) to undeclared state, the calls after it are watched through a
``Witness`` of what it learned: the tensors at the argument positions and keywords
it read, and the other pre-existing tensors it read ("ambient"), each with its version
before and after the forward — the same ``Reads`` that a recording gives, for the cost
of reading those versions.

A learned profile is used only for the same *call shape*: what can make the segment's
Python code take another path and so read or write other state. The key holds the
function's code and bound ``self``; the identities of what it reaches (closure contents,
defaults, globals its code names, nested callables: ``_reach``'s walk); the
module-structure generation (a module, parameter or buffer registered into a module some
segment reaches, e.g. ``self.mem = new``, starts over; ``_reach.structure_generation``);
the ``training`` flags of the modules it reaches and of their norm layers (which write
running statistics only in training mode; ``model.train()``/``.eval()`` flips the reached
module's own); the caller's context (what is declared — a declared tensor's silent writes
are not watched —, and the autocast settings); and per argument: a tensor's shape, dtype,
device, layout and ``requires_grad`` (``bn(h) if x.shape[0] >= 8 else ln(h)``), the value
of a small one (``int``/``float``/``bool``/``str``/``None``/dtype/device: ``model.layer(i,
h)`` reads layer ``i``), the identity of a module (``forward(layer, x)``), small lists,
tuples and string-keyed dicts element by element, anything else its type. A
``functools.partial`` is keyed as the call it makes (``call_shape``). A learned tensor that
has died (a rebound attribute) starts over, too. A new tensor shape is a new call shape:
a sequence length that changes every step records once per length.

A first call that wrote silently is learned when everything it wrote so is declared (a
declared BatchNorm's running statistics): Rule 6 need not see it, the declaration
preserves it; the profile keeps those tensors so that the calls after it still report
them to snapshot sharing (``Reads.quiet``), and which of them only its training-mode norms
used, with the versions those norms advanced them by (``Reads.stat_only``: a ``"stats"``
engine takes no snapshot of them on the calls after it, NOTE [ Running statistics kept
by no snapshot ] in ``running_stats``).

Limit (documented on ``checkpoint``): a segment whose reads change within one call shape
— control flow on tensor values or on a Python attribute, an argument object kept by its
type, or a list or plain object in its closure whose tensors are replaced between calls —
is watched on those calls only as far as its learned reads go.
``set_read_recording("every_call")`` records every call instead (the cost above).
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from stateaware.torch_replay import _reach
from stateaware.torch_replay._reads import Reads, Touched

__all__ = ["READ_RECORDING", "set_read_recording", "call_shape", "observe", "learn"]

#: Values of ``set_read_recording``.
READ_RECORDING = ("first_call", "every_call")
_mode = ["first_call"]
_MAX_PROFILES = 4096  # call shapes kept (the oldest learned dropped first): a bound, never a cache of the world
_profiles: dict[tuple[Any, ...], _Profile] = {}  # insertion-ordered
# Arguments keyed by value, not type: an index (``model.layer(i, h)``) or a flag picks
# which tensors a call reads. A value that changes on every call (a step counter) makes
# every call a new shape: recorded, as with "every_call".
_BY_VALUE = frozenset(
    [int, bool, str, type(None), float, complex, bytes, torch.dtype, torch.device, torch.layout, torch.memory_format]
)
# Containers are keyed element by element only this deep and this long (the cost stays bounded);
# a bigger one by its type, like any other object.
_MAX_DEPTH, _MAX_ITEMS = 2, 64


def set_read_recording(mode: str) -> None:
    """``"first_call"`` (default): learn a segment's reads on the first call of each call
    shape and re-check them by version counter after; ``"every_call"``: record every call
    (Rule 6 then also sees reads that depend on data, at ~15 µs per torch call)."""
    if mode not in READ_RECORDING:
        raise ValueError(f"set_read_recording({mode!r}); allowed values are: {', '.join(READ_RECORDING)}")
    _mode[0] = mode
    _profiles.clear()


class _Profile:
    __slots__ = ("arg_reads", "ambient", "host_rng", "quiet", "stat_only")

    def __init__(
        self,
        arg_reads: tuple[tuple[Any, ...], ...],
        ambient: tuple[weakref.ref[torch.Tensor], ...],
        host_rng: tuple[str, ...],
        quiet: tuple[weakref.ref[torch.Tensor], ...] = (),
        stat_only: tuple[tuple[weakref.ref[torch.Tensor], int], ...] = (),
    ):
        self.arg_reads = arg_reads  # ("arg", i) | ("item", i, j) | ("kw", name) | ("kwitem", name, j)
        self.ambient = ambient
        self.host_rng = host_rng  # the host generators the learned call drew from (``_host_rng``)
        self.quiet = quiet  # declared tensors the learned call wrote without a version bump
        # running statistics only its training-mode norms used (``Reads.stat_only``), each with
        # the versions those norms advanced it by (instance norm copies its update in: one)
        self.stat_only = stat_only


class Witness(Reads):
    """The learned tensors of one call, with versions before the forward (``Reads``)."""

    def __init__(
        self,
        tensors: list[torch.Tensor],
        host_rng: tuple[str, ...] = (),
        quiet: list[torch.Tensor] | None = None,
        stat_only: list[tuple[torch.Tensor, int]] | None = None,
    ):
        super().__init__()
        self.tensors = {id(t): (t, t._version) for t in tensors}
        self.host_rng = host_rng
        self.quiet = quiet or []
        # known before the forward runs, unlike a recording's
        self.stat_only = {id(t): (t, t._version) for t, _ in stat_only or ()}
        self.stat_bumps = {id(t): bump for t, bump in stat_only or ()}


def call_shape(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """``fn(*args, **kwargs)`` as the call it makes: a ``functools.partial`` unwrapped into its
    function and arguments, and a module's bound ``__call__`` into the module, so that a
    segment handed over as ``partial(layer.__call__, **kwargs)`` (Hugging Face's checkpointed
    layers, every call a new partial holding new tensors) is learned once, its keyword
    tensors watched by position like any argument's."""
    while isinstance(fn, functools.partial):
        args, kwargs = (*fn.args, *args), {**fn.keywords, **kwargs}
        fn = fn.func
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(fn, "__func__", None) in _MODULE_CALLS:
        fn = owner
    return fn, args, kwargs


#: ``nn.Module.__call__`` and what it is an alias of: a module called through them runs its forward.
_MODULE_CALLS = frozenset(
    f for f in (torch.nn.Module.__call__, getattr(torch.nn.Module, "_wrapped_call_impl", None)) if f is not None
)


def observe(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], context: Any = ()
) -> tuple[Reads, tuple[Any, ...] | None]:
    """What to run ``fn``'s forward under: a ``Witness`` when this call shape was
    learned (and every learned tensor is alive), else a recording ``Touched``; with
    the key to ``learn`` under (``None``: nothing to learn, e.g. a witness).
    ``context``: the caller's hashable part of the call shape (autocast settings)."""
    if _mode[0] != "first_call":
        return Touched(), None
    key = _key(fn, args, kwargs, context)
    if key is None:
        return Touched(), None
    profile = _profiles.get(key)
    if profile is not None:
        tensors = _resolve(profile, args, kwargs)
        quiet, statistics = _alive(profile.quiet), _alive(tuple(ref for ref, _ in profile.stat_only))
        if tensors is not None and quiet is not None and statistics is not None:
            stat_only = list(zip(statistics, (bump for _, bump in profile.stat_only), strict=True))
            return Witness(tensors, profile.host_rng, quiet, stat_only), None
        _profiles.pop(key, None)  # pop, not del: another thread may have dropped it
    return Touched(), key


def learn(
    key: tuple[Any, ...] | None,
    reads: Reads,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    host_rng: tuple[str, ...] = (),
) -> None:
    """Keep what a recorded, accepted forward read under ``key``, with the host generators it
    drew from (``host_rng``: captured on the calls after it).

    A forward that did something a version counter cannot show (``reads.silent``) is
    learned only when all of it concerns declared state (``reads.quiet_undeclared`` is
    false, as the checkpoint's Rule 6a check found): Rule 6 need not see a declared
    tensor's writes, the declaration preserves them on every call. The tensors it wrote so
    are kept with the profile, for the calls after it to report (``Reads.quiet``: NOTE
    [ Shared snapshots ] in ``preserve``).
    """
    if key is None or (reads.silent and reads.quiet_undeclared is not False):
        return
    quiet = [*reads.stat_writes.values(), *(owner for _, _, owner in reads.data_aliases)]
    where: dict[int, tuple[Any, ...]] = {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            where.setdefault(id(a), ("arg", i))
        elif type(a) is list or type(a) is tuple:
            for j, b in enumerate(a):
                if isinstance(b, torch.Tensor):
                    where.setdefault(id(b), ("item", i, j))
    for name, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            where.setdefault(id(v), ("kw", name))
        elif type(v) is list or type(v) is tuple:
            for j, b in enumerate(v):
                if isinstance(b, torch.Tensor):
                    where.setdefault(id(b), ("kwitem", name, j))
    arg_reads, ambient = [], []
    for i, (t, _) in reads.tensors.items():
        if i in where:
            arg_reads.append(where[i])
        else:
            ambient.append(weakref.ref(t))
    kept_quiet = tuple(weakref.ref(t) for t in dict.fromkeys(quiet))  # dict: once each, in order
    stat_only = tuple((weakref.ref(t), t._version - version) for t, version in reads.stat_only.values())
    _profiles[key] = _Profile(tuple(arg_reads), tuple(ambient), host_rng, kept_quiet, stat_only)
    while len(_profiles) > _MAX_PROFILES:  # oldest learned first out
        _profiles.pop(next(iter(_profiles)), None)


def _alive(refs: tuple[weakref.ref[torch.Tensor], ...]) -> list[torch.Tensor] | None:
    out = []
    for ref in refs:
        t = ref()
        if t is None:
            return None
        out.append(t)
    return out


def _resolve(profile: _Profile, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor] | None:
    out = []
    for ref in profile.ambient:
        t = ref()
        if t is None:
            return None
        out.append(t)
    for where in profile.arg_reads:
        kind = where[0]
        try:
            if kind == "arg":
                t = args[where[1]]
            elif kind == "item":
                t = args[where[1]][where[2]]
            elif kind == "kw":
                t = kwargs.get(where[1])
            else:  # "kwitem"
                t = kwargs[where[1]][where[2]]
        except (IndexError, KeyError, TypeError):  # a shorter list than the learned call's: learn again
            return None
        if not isinstance(t, torch.Tensor):
            return None
        out.append(t)
    return out


def _key(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], context: Any) -> tuple[Any, ...] | None:
    """The call shape (module doc), or ``None`` for a callable whose code is not one function's.

    What the function reaches (closure, defaults, named globals, nested callables) is
    ``_reach``'s walk, the one error messages name state by.
    """
    bound: object
    if isinstance(fn, torch.nn.Module):
        code, bound = type(fn).forward.__code__, fn
    else:
        func = getattr(fn, "__func__", fn)
        if not isinstance(func, types.FunctionType):
            return None  # functools.partial, callable objects, builtins: recorded every call
        code, bound = func.__code__, getattr(fn, "__self__", None)
    reached = [obj for _, obj in _reach._roots(fn, (), {})]
    modes = tuple(_reach.training_flags(r) for r in (*reached, *args) if isinstance(r, torch.nn.Module))
    layout = tuple(_shape_of(a) for a in args)
    keywords = tuple((k, _shape_of(v)) for k, v in kwargs.items())
    return (code, id(bound), _reach.structure_generation(), tuple(map(id, reached)), modes, layout, keywords, context)


def _shape_of(value: Any, depth: int = 0) -> Any:
    """An argument's part of the call shape: what a segment's Python code can branch on.

    A tensor by its metadata (``bn(h) if x.shape[0] >= 8 else ln(h)``: a new batch size is
    a new call shape, recorded once); small values by value (an index picks what is read);
    a module by identity (``forward(layer, x)``: its parameters are what is read; Hugging
    Face hands each layer over so); small lists, tuples and string-keyed dicts element by
    element; anything else by type.
    """
    kind = type(value)
    if kind in _BY_VALUE:
        return value
    if isinstance(value, torch.Tensor):
        try:
            shape: Any = value.shape
        except (RuntimeError, NotImplementedError):  # a layout without one shape (strided nested tensors)
            shape = None
        return (kind, shape, value.dtype, value.device, value.layout, value.requires_grad)
    if isinstance(value, torch.nn.Module):
        return ("module", id(value))
    if depth < _MAX_DEPTH and (kind is list or kind is tuple) and len(value) <= _MAX_ITEMS:
        return (kind, *(_shape_of(v, depth + 1) for v in value))
    if depth < _MAX_DEPTH and kind is dict and len(value) <= _MAX_ITEMS and all(type(k) is str for k in value):
        return (kind, *((k, _shape_of(v, depth + 1)) for k, v in value.items()))
    return kind
