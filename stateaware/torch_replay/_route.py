"""``route()``: every non-reentrant ``torch.utils.checkpoint`` call in the process runs on ours.

Libraries checkpoint with torch's function, and several hold it before anyone could
replace it: transformers' ``gradient_checkpointing_enable()`` and torch's
``checkpoint_wrapper`` keep a ``functools.partial`` of ``torch.utils.checkpoint.checkpoint``
made when they are imported or built. Reassigning the module attribute reaches none of
those. What every non-reentrant call does reach, on the whole supported torch range, is
the generator torch's checkpoint looks up in its own module on each call — the decorator
form ``checkpoint(use_reentrant=False)(fn)`` and ``checkpoint_sequential`` go through
``checkpoint`` to it as well. See NOTE [ Route ].
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.checkpoint as _tuc

from stateaware.torch_replay import _reach
from stateaware.torch_replay._transaction import Transaction
from stateaware.torch_replay.checkpoint import _UNSET, transaction_steps

__all__ = ["route", "Route", "ROUTE_STATES"]

# NOTE [ Route ]
#
# torch's non-reentrant checkpoint is a generator it calls by its module-global name
# (``_checkpoint_without_reentrant_generator_impl(fn, args, kwargs, *, ...)`` from torch
# 2.14, ``_checkpoint_without_reentrant_generator(fn, preserve_rng_state, context_fn,
# determinism_check, debug, *args, **kwargs)`` before; 2.14 keeps the old name as a shim
# that calls the new one): ``next(gen)`` opens the checkpoint, the caller runs
# ``fn(*args, **kwargs)``, ``next(gen)`` closes it (2.14 throws the forward's exception
# in). Our checkpoint has the same shape (``checkpoint.transaction_steps``), so routing
# swaps that module global while a route is open — in ``torch.utils.checkpoint`` and in
# every module already imported that bound the generator by name (torch's composable
# ``torch.distributed._composable.checkpoint(module)``) — and puts torch's back when the
# last one closes. A module that imports the generator by name while a route is open
# binds ours and keeps it; with no route open ours hands every call to torch's.
#
# The reentrant path (``use_reentrant=True``, and no ``use_reentrant`` at all, which torch
# 2.4-2.14 takes as True with a warning) never reaches the generator, so it stays torch's.
# A checkpoint inside a ``torch.compile`` region is captured as a higher-order op and
# stays torch's: while Dynamo or AOTAutograd trace, and when a backend runs the op's graph
# eagerly through torch's checkpoint (``_captured``), the routed generator hands the call
# to torch's.
#
# Invariants: (1) the swap is process-wide and happens under one lock; the routes form a
# stack, closed innermost first, and the innermost one's ``state`` applies. (2) While
# routed, the global is our function, so a second install never wraps ours.

#: Values of ``route(state=...)``: ``"reached"`` declares every module the segment
#: reaches (its function or bound ``self``, closure, ``functools.partial`` arguments,
#: globals the code names, arguments — and modules in small lists, tuples and dicts among
#: them: ``checkpoint_sequential``'s segments); ``"none"`` declares nothing, so a segment
#: that writes state (BatchNorm statistics) raises ``UndeclaredStateError``.
ROUTE_STATES = ("reached", "none")

_NEW = "_checkpoint_without_reentrant_generator_impl"  # torch >= 2.14
_OLD = "_checkpoint_without_reentrant_generator"  # torch 2.4 - 2.13
_MAX_CONTAINER = 64

_lock = threading.Lock()
_open: list[Route] = []
_torch_generator: list[tuple[str, Callable[..., Any]]] = []  # (global name, torch's generator) while routed
_swapped: list[Any] = []  # the modules whose global named so was torch's generator, while routed


class Route:
    """An open route (see ``route``): a context manager, or closed by ``close``.

    ``calls`` counts the checkpoint calls this route sent to ours while it was the
    innermost open route."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.calls = 0
        self.closed = False

    def close(self) -> None:
        """Stop routing for this handle; torch's checkpoint is torch's again once no route
        is open. ``RuntimeError`` when an inner route is still open (close innermost first);
        closing twice is a no-op."""
        with _lock:
            if self.closed:
                return
            if _open[-1] is not self:
                raise RuntimeError(
                    f"route handle closed out of order: {len(_open) - 1 - _open.index(self)} route(s) opened "
                    "after it are still open. Tip: close the innermost route first (or use `with route():`)."
                )
            _open.pop()
            self.closed = True
            if not _open:
                name, original = _torch_generator.pop()
                for module in _swapped:
                    setattr(module, name, original)
                _swapped.clear()

    def __enter__(self) -> Route:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Route(state={self.state!r}, calls={self.calls}, {'closed' if self.closed else 'open'})"


def route(*, state: str = "reached") -> Route:
    """Run every non-reentrant ``torch.utils.checkpoint`` call in the process on ours.

    While the returned handle is open, ``torch.utils.checkpoint.checkpoint(fn, ...,
    use_reentrant=False)``, its decorator form ``checkpoint(use_reentrant=False)(fn)`` and
    ``checkpoint_sequential(..., use_reentrant=False)`` — also through a ``partial`` or a
    wrapper that bound torch's function earlier (transformers'
    ``gradient_checkpointing_enable()``, torch's ``checkpoint_wrapper``, timm's
    ``set_grad_checkpointing()``, diffusers' ``enable_gradient_checkpointing()``) — run as
    ``stateaware.torch_replay.checkpoint`` with ``state`` declared (``ROUTE_STATES``:
    ``"reached"`` declares every module the segment reaches). torch's keywords keep their
    meaning: ``preserve_rng_state``, ``context_fn`` (selective checkpointing),
    ``determinism_check``, ``debug``, ``early_stop``. A call without ``use_reentrant``
    (reentrant in torch) or with ``use_reentrant=True`` stays torch's, and so do
    checkpoints Dynamo captures inside ``torch.compile``.

    Use as ``with route(): train()`` or ``handle = route()`` … ``handle.close()``. Routes
    nest (the innermost one's ``state`` applies); a handle closed while a route opened
    after it is still open raises ``RuntimeError``. The route is process-wide: calls from
    every thread are routed.

    ``ValueError`` for a ``state`` not in ``ROUTE_STATES``; ``RuntimeError`` naming the
    installed torch version when its checkpoint has no generator to route (torch outside
    2.4-2.14).
    """
    if state not in ROUTE_STATES:
        raise ValueError(f"route(state={state!r}); valid values are: {', '.join(map(repr, ROUTE_STATES))}")
    handle = Route(state)
    with _lock:
        if not _open:
            name = _NEW if hasattr(_tuc, _NEW) else _OLD
            original = getattr(_tuc, name, None)
            if not inspect.isgeneratorfunction(original):
                raise RuntimeError(
                    f"stateaware.torch_replay.route: torch {torch.__version__} has no "
                    f"torch.utils.checkpoint.{_NEW} or {_OLD} generator to route (supported: torch 2.4-2.14). "
                    "Tip: call stateaware.torch_replay.checkpoint directly."
                )
            _torch_generator.append((name, original))
            routed = _routed_new if name == _NEW else _legacy(original)
            # torch.utils.checkpoint, and every module imported so far that bound the generator
            # by name (torch.distributed._composable's checkpoint(module) does)
            _swapped.extend(m for m in list(sys.modules.values()) if _holds(m, name, original))
            for module in _swapped:
                setattr(module, name, routed)
        _open.append(handle)
    return handle


def _holds(module: Any, name: str, original: Callable[..., Any]) -> bool:
    try:
        return vars(module).get(name) is original
    except TypeError:  # not a module with a __dict__ (a placeholder some packages leave)
        return False


def _routed_new(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    preserve_rng_state: bool = True,
    context_fn: Callable[[], tuple[Any, Any]] = _tuc.noop_context_fn,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool = True,
    respect_saved_tensors_hooks: bool | None = None,
) -> Iterator[Any]:
    options: dict[str, Any] = dict(
        preserve_rng_state=preserve_rng_state,
        context_fn=context_fn,
        determinism_check=determinism_check,
        debug=debug,
        early_stop=early_stop,
        respect_saved_tensors_hooks=respect_saved_tensors_hooks,
    )
    top = _open[-1] if _open else None
    if top is None or not _torch_generator or torch.compiler.is_compiling() or _captured(fn):
        yield from _torch_steps(fn, args, kwargs, options)
        return
    top.calls += 1
    if not isinstance(fn, Transaction):  # a transaction's own declaration wins
        fn = Transaction(fn, _reached(fn, args, kwargs) if top.state == "reached" else (), "whole")
    yield from transaction_steps(fn, args, kwargs, _UNSET, _UNSET, use_reentrant=False, **options)


def _captured(fn: Any) -> bool:
    """A segment Dynamo captured: its higher-order op runs the traced graph through
    ``torch.utils.checkpoint`` (an ``fx.Interpreter``, or a closure of torch's
    ``_higher_order_ops`` over one) when a backend executes it without AOT tracing."""
    if isinstance(getattr(fn, "__self__", None), torch.fx.Interpreter):
        return True
    return str(getattr(fn, "__module__", "")).startswith("torch._higher_order_ops")


def _torch_steps(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]) -> Iterator[Any]:
    if _torch_generator:
        name, original = _torch_generator[0]
    else:  # no route open: a module bound ours while one was (see NOTE [ Route ])
        name = _NEW if hasattr(_tuc, _NEW) else _OLD
        original = getattr(_tuc, name)
    if name == _NEW:
        yield from original(fn, args, kwargs, **options)
        return
    known = inspect.signature(original).parameters
    positional = [options[k] for k in ("preserve_rng_state", "context_fn", "determinism_check", "debug")]
    extra = {k: v for k, v in options.items() if k in known and k not in _LEGACY_POSITIONAL}
    yield from original(fn, *positional, *args, **extra, **kwargs)


_LEGACY_POSITIONAL = ("preserve_rng_state", "context_fn", "determinism_check", "debug")


def _legacy(original: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
    """The routed generator under torch's pre-2.14 signature: ``(fn, preserve_rng_state,
    context_fn, determinism_check, debug, *args, **kwargs)``, where keywords the
    signature names (``early_stop`` where it has one) are torch's and the rest the segment's."""
    signature = inspect.signature(original)
    ours = [p for p in signature.parameters if p not in ("fn", "args", "kwargs")]

    def routed(*call: Any, **keywords: Any) -> Iterator[Any]:
        bound = signature.bind(*call, **keywords)
        bound.apply_defaults()
        given = bound.arguments
        options = {k: given[k] for k in ours if k in given}
        return _routed_new(given["fn"], tuple(given.get("args", ())), dict(given.get("kwargs", {})), **options)

    return routed


def _reached(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.nn.Module]:
    """The modules the segment reaches (``_reach._roots``), looking one level into small
    lists, tuples and dicts (``checkpoint_sequential`` and timm's ``checkpoint_seq`` hold
    their modules in a list in the closure); each declares its whole subtree."""
    found: dict[int, torch.nn.Module] = {}
    for _, obj in _reach._roots(fn, args, kwargs):
        if isinstance(obj, torch.nn.Module):
            found.setdefault(id(obj), obj)
        elif isinstance(obj, (list, tuple, dict)) and len(obj) <= _MAX_CONTAINER:
            for item in obj.values() if isinstance(obj, dict) else obj:
                if isinstance(item, torch.nn.Module):
                    found.setdefault(id(item), item)
    return list(found.values())
