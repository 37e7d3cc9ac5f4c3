"""``compile=``: each segment compiled regionally, our plan and replay around the compiled code.

As torchtitan compiles a transformer per block, ``stateaware.auto`` compiles per segment:
a segment's own ``forward`` runs as one ``torch.compile`` graph, and the planner's option
wraps it — ``eager`` calls the compiled forward, a recomputing option checkpoints it, so
the replay runs the same compiled graph (same kernels) and backward runs its compiled
backward. Profiling with ``compile=`` measures the compiled segments, so the card's costs
are the compiled ones.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from stateaware.torch_replay._reads import opaque_call

__all__ = ["compile_options", "compiled_forward", "segments_compiled", "COMPILE_KEYS"]

#: The ``torch.compile`` keywords a ``compile=`` dict may hold.
COMPILE_KEYS = ("backend", "mode", "fullgraph", "dynamic", "options")

# NOTE [ Compiled segments ]
#
# * In place and reversible: nothing is registered on the module (``state_dict()`` keys
#   are unchanged, as with ``nn.Module.compile``); the compiled forward is bound through
#   the plan ``apply`` puts on the segment, so ``remove`` undoes the compilation too.
# * Compiled once: one ``torch.compile`` of each segment class's ``forward`` per options,
#   kept for the process (``_COMPILED``) — the budget loop's apply/measure/remove rounds
#   and the repeated blocks of a model reuse it (Dynamo guards on the module it is given).
# * Opaque to the recorder: our checkpoint learns what a segment reads under a
#   ``TorchFunctionMode`` (``torch_replay._reads.Touched``); Dynamo would trace that mode
#   and fall back to eager, so the compiled call is recorded whole
#   (``torch_replay._reads.opaque_call``): the segment's parameters, buffers and tensor
#   attributes count as read, and a write to any of them (a version bump) that the
#   segment's state does not declare is refused as in eager.
# * Hooks stay eager: the module's forward pre/post hooks run around the compiled forward,
#   once per call, not again in a replay.
_COMPILED: dict[tuple[Any, str], Callable[..., Any]] = {}


def compile_options(compile: bool | dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``torch.compile`` keywords ``compile=`` asks for: None for False/None, ``{}`` for True.

    A dict is passed to ``torch.compile`` as given; its keys must be among ``COMPILE_KEYS``
    and its values JSON data (the card records them, and ``apply`` compiles from the card):
    a backend by name (``"inductor"``, ``"aot_eager"``). ``ValueError``/``TypeError`` naming
    the key or type otherwise.
    """
    if compile is None or compile is False:
        return None
    if compile is True:
        return {}
    if not isinstance(compile, dict):
        raise TypeError(
            f"compile is a {type(compile).__name__}; valid values are True, False or a dict of torch.compile keywords"
        )
    unknown = sorted(set(compile) - set(COMPILE_KEYS))
    if unknown:
        raise ValueError(
            f"compile has the key(s) {', '.join(map(repr, unknown))}; valid keys are: {', '.join(COMPILE_KEYS)}"
        )
    try:
        json.dumps(compile, sort_keys=True)
    except TypeError as error:
        raise ValueError(
            f"compile={compile!r} holds a value that is not JSON data ({error}); the card records it. "
            "Tip: name the backend as a string, e.g. compile={'backend': 'inductor'}."
        ) from None
    return dict(compile)


def compiled_forward(module: torch.nn.Module, options: dict[str, Any]) -> Callable[..., Any]:
    """``module``'s own (class) ``forward``, bound to it, run as one compiled region with
    ``options`` (``torch.compile`` keywords); see NOTE [ Compiled segments ]."""
    function = type(module).forward
    key = (function, json.dumps(options, sort_keys=True))
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = torch.compile(function, **options)
    return functools.partial(opaque_call, compiled, functools.partial(_tensors_of, module), module)


@contextlib.contextmanager
def segments_compiled(model: torch.nn.Module, names: Sequence[str], options: dict[str, Any] | None) -> Iterator[None]:
    """Within the block, the segments ``names`` of ``model`` run their compiled forward
    (no checkpoint: all-eager); with ``options`` None, nothing changes."""
    if options is None:
        yield
        return
    modules = [model.get_submodule(name) for name in names]
    for module in modules:
        module.forward = compiled_forward(module, options)
    try:
        yield
    finally:
        for module in modules:
            module.__dict__.pop("forward", None)


def _tensors_of(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    """What a compiled forward of ``module`` can reach: its subtree's parameters, buffers
    and plain tensor attributes."""
    yield from module.parameters()
    yield from module.buffers()
    for m in module.modules():
        for value in vars(m).values():
            if isinstance(value, torch.Tensor):
                yield value
