"""Our options must not take the user's keywords (``state=``, ``preserve=``).

``torch.utils.checkpoint.checkpoint(fn, *args, **kwargs)`` passes every keyword it does
not know to ``fn``. Ours also knows ``state`` and ``preserve``; a function with a keyword
of that name (``def cell(x, state=None)``, or ``**kwargs``) would silently run without it.
So a keyword the function accepts is never consumed silently:

* ``checkpoint(fn, x, state=[...])`` keeps working when ``fn`` cannot take ``state`` —
  it has no such parameter, or the positional arguments already fill it;
* when it can, the call is refused with a message naming the keyword; and
* ``checkpoint(transaction(fn, state=[...], preserve=...), x, **kwargs)`` declares the
  replay's state *outside* the function's keyword space: every keyword of that call goes
  to ``fn``, exactly as torch's checkpoint passes them.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["Transaction", "transaction", "check_collision"]

_Accepts = tuple[dict[str, int], frozenset[str], bool]  # positional index by name, keyword-only names, **kwargs
_accepts_cache: weakref.WeakKeyDictionary[Any, tuple[type, _Accepts]] = weakref.WeakKeyDictionary()


class Transaction:
    """``fn`` with the state its replay must see; see ``transaction``."""

    __slots__ = ("fn", "state", "preserve", "__weakref__")

    def __init__(self, fn: Callable[..., Any], state: Iterable[Any], preserve: Any):
        if not callable(fn):
            raise TypeError(f"transaction(fn, ...) needs a callable fn, got {type(fn).__name__}")
        self.fn, self.state, self.preserve = fn, tuple(state), preserve

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)  # outside a checkpoint it is just fn

    def __repr__(self) -> str:
        return f"transaction({self.fn!r}, state=<{len(self.state)} item(s)>, preserve={self.preserve!r})"


def transaction(fn: Callable[..., Any], *, state: Iterable[Any] = (), preserve: Any = "whole") -> Transaction:
    """Declare the state ``fn``'s replay must see, keeping ``fn``'s keywords its own.

    ``checkpoint(transaction(fn, state=[...], preserve="whole"), *args, **kwargs)`` is
    ``checkpoint(fn, *args, state=[...], preserve="whole", **kwargs)`` except that *every*
    keyword in ``kwargs`` — ``state`` and ``preserve`` included — is passed to ``fn``, as
    ``torch.utils.checkpoint.checkpoint`` passes them. Use it when ``fn`` has a keyword
    named ``state`` or ``preserve`` or takes ``**kwargs``; called directly (not through
    ``checkpoint``) it just calls ``fn``.

    Args:
        fn: the segment.
        state: tensors, modules and ``Region`` objects the segment may read or write.
        preserve: ``"whole"``, ``"region"`` or a per-tensor mapping (see ``checkpoint``).
    """
    return Transaction(fn, state, preserve)


def check_collision(fn: Callable[..., Any], passed: Iterable[str], n_positional: int) -> None:
    """Refuse ``checkpoint(fn, *args, state=...)`` when ``fn`` itself could take ``state=``.

    ``passed`` names the keywords of ours the caller gave; ``n_positional`` is
    ``len(args)``. ``fn`` could take keyword ``k`` when ``k`` names a parameter that the
    positional arguments leave unfilled, or when ``fn`` takes ``**kwargs`` and has no
    parameter ``k`` (``def f(shape, state)`` called as ``f(shape, s)`` cannot take
    ``state=`` as well: Python would raise "multiple values"). A function whose
    signature cannot be read (a C builtin) is taken to accept none of them.
    """
    passed = tuple(passed)
    if not passed:
        return
    positional, keyword_only, var_keyword = _accepts(fn)
    for key in passed:
        if key in positional:
            free = positional[key] >= n_positional
        else:
            free = key in keyword_only or var_keyword
        if free:
            how = "**kwargs" if key not in positional and key not in keyword_only else f"a parameter named {key!r}"
            raise TypeError(
                f"checkpoint(fn, ..., {key}=...): fn ({_name(fn)}) takes {how}, so {key}= could be meant for "
                f"fn (torch.utils.checkpoint passes every keyword to fn) or for the replay's declared state; "
                f"it is refused rather than guessed. Tip: declare the replay's state with "
                f"checkpoint(stateaware.torch_replay.transaction(fn, state=[...], preserve=...), *args, **kwargs) "
                f"— every keyword of that call goes to fn."
            )


def _accepts(fn: Any) -> tuple[dict[str, int], frozenset[str], bool]:
    """(positional-or-keyword parameter -> its position, keyword-only names, takes **kwargs)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    key = getattr(target, "__func__", target)  # a bound method: its function (weak-referenceable)
    if type(key) is types.FunctionType and not key.__dict__:
        # A plain function's parameters are its code's (nothing like __wrapped__ or
        # __signature__ redirects inspect): a closure made per call (checkpoint(lambda t:
        # block(t), x)) shares its code object's entry instead of reading a signature per call.
        key = key.__code__
    try:
        cached = _accepts_cache[key]
    except (KeyError, TypeError):
        cached = None
    if cached is not None and cached[0] is target.__class__:
        return cached[1]
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # no signature to read (C builtins)
        result: _Accepts = ({}, frozenset(), False)
    else:
        positional = {p.name: i for i, p in enumerate(params) if p.kind is p.POSITIONAL_OR_KEYWORD}
        keyword_only = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)
        result = (positional, keyword_only, any(p.kind is p.VAR_KEYWORD for p in params))
    try:
        _accepts_cache[key] = (target.__class__, result)  # bound and plain differ by `self`
    except TypeError:  # not weak-referenceable: recompute next time
        pass
    return result


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
