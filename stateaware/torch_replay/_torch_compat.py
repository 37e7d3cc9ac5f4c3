"""What ``torch.utils.checkpoint(use_reentrant=False)`` callers rely on besides the replay.

A drop-in must honour the same knobs and speak the same errors as torch's checkpoint:

* ``context_fn`` — a pair of context managers, the first entered around the original
  forward, the second around every replay. Selective activation checkpointing
  (``create_selective_checkpoint_contexts``) is this: its caching dispatch mode stores
  the outputs of the ops its policy saves, its cached mode hands them back on replay
  and recomputes the rest. Our transaction (declared state, RNG, autocast) wraps the
  replay from outside, so the policy decides *which* ops are recomputed and the
  transaction decides *what state* they see.
* ``debug=`` and the global ``set_checkpoint_debug_enabled`` — torch's operator logs
  around forward and replay, and an error callback that turns a checkpoint error into
  the logged report. We use torch's own helper, so the report is torch's.
* ``set_checkpoint_early_stop`` — a global that overrides ``early_stop`` when set.
* ``GraphExecGroup`` — backward calls under one group share one replay per segment.
* ``CheckpointError`` — the class existing handlers catch; ours subclass it, and the
  messages lead with torch's sentences (``TORCH_*`` below), then say what we know more.

Torch's private names are read here, once, so the replay code never touches them.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import torch
import torch.utils.checkpoint as _tuc
from torch.overrides import _get_current_function_mode_stack
from torch.utils._device import DeviceContext

__all__ = [
    "CheckpointError",
    "Contexts",
    "contexts",
    "early_stop",
    "graph_group_id",
    "twice_message",
    "NOOP_CONTEXT_FN",
    "TORCH_COUNT",
    "TORCH_MORE",
    "TORCH_METADATA",
    "TORCH_TWICE",
    "metadata_of",
    "saved_tensors_hooks",
    "device_context",
    "dynamo_disable",
    "entered",
]

CheckpointError = _tuc.CheckpointError
NOOP_CONTEXT_FN = _tuc.noop_context_fn

#: torch's sentences, kept verbatim so that code matching torch's messages matches ours.
TORCH_COUNT = (
    "torch.utils.checkpoint: A different number of tensors was saved during the original "
    "forward and recomputation.\nNumber of tensors saved during forward: {forward}\n"
    "Number of tensors saved during recomputation: {replay}."
)
TORCH_MORE = (
    "torch.utils.checkpoint: trying to save more tensors during recomputation than during the original forward pass."
)
TORCH_METADATA = (
    "torch.utils.checkpoint: Recomputed values for the following tensors have different "
    "metadata than during the forward pass."
)
TORCH_TWICE = (
    "torch.utils.checkpoint: Unpack is being triggered for a tensor that was already unpacked "
    "once. {extra}If you are calling ctx.saved_tensors in backward, make sure to do so only once."
)
_GROUP_OVERLAP = (
    "Performing two backward calls that overlap (i.e. require the same saved activation in "
    "order to compute gradients) is not allowed while under the "
    "torch.utils.checkpoint.GraphExecGroup context. "
)

_P = ParamSpec("_P")
_R = TypeVar("_R")

_gid_fallback = itertools.count(-2, -1)  # an unpack outside any backward: a fresh id each time


class Contexts:
    """The forward and replay context managers of one checkpointed call, and the
    callback that rewrites a checkpoint error raised while unpacking (debug mode)."""

    __slots__ = ("forward", "replay", "on_error")

    def __init__(self, forward: Any, replay: Any, on_error: Callable[[CheckpointError], object] | None):
        self.forward, self.replay, self.on_error = forward, replay, on_error


def contexts(
    context_fn: Callable[[], tuple[Any, Any]], debug: bool, respect_saved_tensors_hooks: bool | None
) -> Contexts | None:
    """The contexts torch's checkpoint would use for these arguments, or ``None`` when
    every one is a no-op (the common case costs nothing).

    ``set_checkpoint_debug_enabled(True/False)`` overrides ``debug``, as in torch; debug
    mode cannot be combined with a ``context_fn`` (torch raises the same ValueError).
    """
    on_error = None
    if _tuc._checkpoint_debug_enabled if _tuc._checkpoint_debug_enabled is not None else debug:
        if context_fn is not NOOP_CONTEXT_FN:
            raise ValueError("debug=True is incompatible with non-default context_fn")
        context_fn, on_error = _tuc._get_debug_context_and_cb()
    if context_fn is NOOP_CONTEXT_FN:
        return None
    if not callable(context_fn):
        raise TypeError(
            f"context_fn must be a callable returning two context managers, got "
            f"{type(context_fn).__name__}. Tip: functools.partial("
            "torch.utils.checkpoint.create_selective_checkpoint_contexts, policy_fn)"
        )
    forward, replay = context_fn()
    if isinstance(forward, _tuc._CachingTorchDispatchMode):
        forward.respect_saved_tensors_hooks = respect_saved_tensors_hooks
    return Contexts(forward, replay, on_error)


def early_stop(requested: bool) -> bool:
    """``early_stop`` as torch resolves it: the ``set_checkpoint_early_stop`` global wins."""
    forced = _tuc._enable_checkpoint_early_stop
    return requested if forced is None else bool(forced)


def graph_group_id() -> Any:
    """Key of "this backward" for replay bookkeeping: the active ``GraphExecGroup`` (all
    backward calls under it share one replay), else the graph task id, else (an unpack
    outside any backward) a fresh id."""
    group = torch._C._get_graph_exec_group()
    if group is not None:
        return group
    gid = torch._C._current_graph_task_id()
    return next(_gid_fallback) if gid == -1 else gid


def twice_message() -> str:
    """Torch's message for a saved tensor unpacked twice in one backward (or one group)."""
    extra = _GROUP_OVERLAP if torch._C._get_graph_exec_group() is not None else ""
    return TORCH_TWICE.format(extra=extra)


def saved_tensors_hooks(pack: Callable[[torch.Tensor], Any], unpack: Callable[[Any], torch.Tensor]) -> Any:
    """Our pack/unpack hooks, marked as a checkpoint's own: code that looks for the *user's*
    saved-tensor hooks (SAC routing cached tensors through ``save_on_cpu``, nested
    checkpoints) skips them, as it skips torch's checkpoint hooks."""
    pack._checkpoint_internal = True  # type: ignore[attr-defined]
    return _tuc._checkpoint_internal_hook(pack, unpack)


def device_context() -> Any:
    """A fresh copy of the innermost ``with torch.device(...)`` active now, or ``None``.

    The replay runs in backward, outside that block; re-entering the same device makes
    tensors the segment creates without a device land where the forward's did. A fresh
    context, not the live one: re-entering a mode instance (maybe on the backward
    thread) would corrupt its exit state.
    """
    if torch._C._len_torch_function_stack() == 0:  # the common case: no mode at all, ~0.1 us
        return None
    for mode in reversed(_get_current_function_mode_stack()):  # type: ignore[no-untyped-call]  # unannotated in torch
        if isinstance(mode, DeviceContext):
            return DeviceContext(mode.device)
    return None


def metadata_of(x: torch.Tensor) -> dict[str, Any]:
    """What the default determinism check compares (torch's extractor: shape, dtype, device)."""
    return {"shape": x.shape, "dtype": x.dtype, "device": x.device}


def dynamo_disable(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` run eagerly under ``torch.compile``: a graph break before and after it.

    The replay is driven by saved-tensor hooks whose closures hold Python state (holders,
    weak dictionaries) that Dynamo would guard on and recompile for on every call; and a
    traced forward would bake the hooks' bookkeeping into a graph. Torch's own checkpoint
    is disabled the same way when Dynamo cannot wrap it in a higher-order op.

    The disabled wrapper costs hundreds of microseconds per call in eager mode (it
    swaps the frame-evaluation callback), so it is taken only while Dynamo traces:
    ``torch.compiler.is_compiling()`` is a constant True there and False in eager.
    """
    disabled = torch._disable_dynamo(fn, recursive=True)

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if torch.compiler.is_compiling():
            return disabled(*args, **kwargs)
        return fn(*args, **kwargs)

    return run


_NOTHING = contextlib.nullcontext()  # reusable: entering it does nothing


def entered(ctx: Any) -> Any:
    """``ctx`` itself, or a context that does nothing when ``ctx`` is ``None``."""
    return _NOTHING if ctx is None else ctx
