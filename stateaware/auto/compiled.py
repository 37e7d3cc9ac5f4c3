"""``compile=``: each segment compiled regionally, our plan and replay around the compiled code.

As torchtitan compiles a transformer per block, ``stateaware.auto`` compiles per segment:
a segment's own ``forward`` runs as one ``torch.compile`` graph, and the planner's option
wraps it — ``eager`` calls the compiled forward, a recomputing option checkpoints it, so
the replay runs the same compiled graph (same kernels) and backward runs its compiled
backward. A compiled segment's ``selective`` option is the compiler's own selection: the segment
compiled with the partitioner's activation-memory budget at ``SELECTIVE_MEMORY_BUDGET``,
so its backward recomputes what the partitioner chose (fused, cheap ops first) and nothing
of ours replays. Profiling with ``compile=`` measures the compiled segments, so the card's
costs are the compiled ones. The code of the model's own forward between the segments (an
embedding, a head, the loss a forward computes) is compiled too, each segment call a graph
break, so whole-model fusion is kept wherever no plan needs a segment boundary.
"""

from __future__ import annotations

import contextlib
import functools
import json
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch._functorch.config as functorch_config  # not imported by `import torch`; patched below
from torch.utils._python_dispatch import TorchDispatchMode

from stateaware.torch_replay._reads import opaque_call
from stateaware.torch_replay._torch_compat import dynamo_disable

__all__ = [
    "compile_options",
    "compiled_forward",
    "segments_compiled",
    "compiled_option",
    "random_op",
    "compile_between",
    "uncompile_between",
    "COMPILE_KEYS",
    "SELECTIVE_MEMORY_BUDGET",
]

#: The ``torch.compile`` keywords a ``compile=`` dict may hold.
COMPILE_KEYS = ("backend", "mode", "fullgraph", "dynamic", "options")

#: ``torch._functorch.config.activation_memory_budget`` for a compiled segment's
#: ``selective`` option: the min-cut partitioner keeps about this share of what it would
#: save by default and recomputes the rest in the compiled backward. (Backends without
#: that partitioner, such as ``aot_eager``, ignore it: their ``selective`` is ``eager``.)
SELECTIVE_MEMORY_BUDGET = 0.5

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
# * Compiled between the segments: the model's own forward is compiled as well, and each
#   segment's call is a graph break (its planned forward is ``dynamo_disable``d), so our
#   checkpoint, its hooks and the recorder run as Python while the code around them is
#   fused — a language model's head and cross-entropy, e.g., as whole-model compilation
#   fuses them (the logits are not materialized three times over). ``fullgraph`` is
#   dropped for this outer compile: its graph breaks are the plan's.
_COMPILED: dict[tuple[Any, str, float | None], Callable[..., Any]] = {}


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


def compiled_forward(
    module: torch.nn.Module, options: dict[str, Any], memory_budget: float | None = None
) -> Callable[..., Any]:
    """``module``'s own (class) ``forward``, bound to it, run as one compiled region with
    ``options`` (``torch.compile`` keywords) and, if given, the partitioner's activation
    ``memory_budget``; see NOTE [ Compiled segments ]."""
    compiled = _compiled(type(module).forward, options, memory_budget)
    return functools.partial(opaque_call, compiled, functools.partial(_tensors_of, module), module)


def compiled_option(module: torch.nn.Module, options: dict[str, Any], option: str) -> tuple[Callable[..., Any], str]:
    """The forward and the ``run_segment`` option that run planner ``option`` on the
    compiled segment ``module``: ``selective`` is the segment compiled at
    ``SELECTIVE_MEMORY_BUDGET``, run as ``eager`` (its own backward recomputes); every other
    option wraps the segment compiled by default."""
    if option == "selective":
        return compiled_forward(module, options, SELECTIVE_MEMORY_BUDGET), "eager"
    return compiled_forward(module, options), option


def _compiled(
    function: Callable[..., Any], options: dict[str, Any], memory_budget: float | None = None
) -> Callable[..., Any]:
    key = (function, json.dumps(options, sort_keys=True), memory_budget)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = (
            torch.compile(function, **options) if memory_budget is None else _budgeted(function, options, memory_budget)
        )
    return compiled


def _budgeted(function: Callable[..., Any], options: dict[str, Any], memory_budget: float) -> Callable[..., Any]:
    """``function`` compiled with the partitioner's ``activation_memory_budget`` set.

    Dynamo keeps its graphs per code object, and its guards do not include the
    partitioner's budget: compiled from ``function`` itself, the budgeted and the default
    variants would share (and overwrite) each other's graphs. A copy of the code under a
    name of its own compiles its own graphs. The budget is set around every call, as a
    recompilation (a guard failing) partitions again."""
    code = function.__code__
    name = f"{code.co_name}_memory_budget_{memory_budget:g}".replace(".", "_")
    twin = types.FunctionType(
        code.replace(co_name=name, co_qualname=name),
        function.__globals__,
        name,
        function.__defaults__,
        function.__closure__,
    )
    twin.__kwdefaults__ = function.__kwdefaults__
    compiled = torch.compile(twin, **options)

    def run(*args: Any, **kwargs: Any) -> Any:
        with functorch_config.patch(activation_memory_budget=memory_budget):
            return compiled(*args, **kwargs)

    return run


_BETWEEN = "_stateaware_compiled_between"


def compile_between(model: torch.nn.Module, names: Sequence[str], options: dict[str, Any]) -> None:
    """Make ``model`` run its own (class) ``forward`` compiled with ``options`` (less
    ``fullgraph``), in place: each call of a segment ``names`` holds is a graph break, so
    what lies between them is compiled (see NOTE [ Compiled segments ]). Nothing is
    registered (``state_dict()`` keys are unchanged); ``uncompile_between`` undoes it. When
    ``model`` is itself a segment (``""`` in ``names``) nothing lies between: no change."""
    if "" in names:
        return
    model.__dict__[_BETWEEN] = {k: v for k, v in options.items() if k != "fullgraph"}
    model.forward = types.MethodType(_forward_between, model)


def uncompile_between(model: torch.nn.Module) -> None:
    """Undo ``compile_between``: ``model`` runs its class's ``forward`` again."""
    if model.__dict__.pop(_BETWEEN, None) is not None:
        model.__dict__.pop("forward", None)


def _forward_between(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    # Resolved at each call from plain data on the module, so a deep copy runs compiled too.
    return _compiled(type(self).forward, self.__dict__[_BETWEEN])(self, *args, **kwargs)


@contextlib.contextmanager
def segments_compiled(model: torch.nn.Module, names: Sequence[str], options: dict[str, Any] | None) -> Iterator[None]:
    """Within the block, the segments ``names`` of ``model`` run their compiled forward
    (no checkpoint: all-eager) and the code between them is compiled (``compile_between``);
    with ``options`` None, nothing changes."""
    if options is None:
        yield
        return
    modules = [model.get_submodule(name) for name in names]
    for module in modules:
        module.forward = dynamo_disable(compiled_forward(module, options))
    compile_between(model, names, options)
    try:
        yield
    finally:
        uncompile_between(model)
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


class _FirstRandomOp(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.found: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if self.found is not None or torch.Tag.nondeterministic_seeded not in func.tags:
            return func(*args, **kwargs)
        # Tagged ops may draw (attention with dropout_p=0 is tagged too): a draw advances a generator.
        generators = [g for g in (kwargs.get("generator"),) if g is not None] + _default_generators()
        before = [g.get_state() for g in generators]
        out = func(*args, **kwargs)
        if any(not torch.equal(b, g.get_state()) for b, g in zip(before, generators, strict=True)):
            self.found = str(func)
        return out


def _default_generators() -> list[torch.Generator]:
    cuda = list(torch.cuda.default_generators) if torch.cuda.is_available() else []
    return [torch.default_generator, *cuda]


def random_op(run: Callable[[], Any]) -> str | None:
    """The first op ``run()`` dispatches that draws from a random generator, by name, or
    None: an op tagged ``nondeterministic_seeded`` (dropout's ``bernoulli_``, ``rand``...)
    whose call advanced its ``generator=`` or a default generator (tagged ops that draw
    nothing, such as attention without dropout, do not count).

    Why it matters: compiled at a memory budget, the min-cut partitioner may recompute such
    an op in the backward, drawing other numbers than the forward drew (seen on a CPU: a
    dropout block's gradients differ from the default compilation's; torch keeps the draws
    equal only with ``functionalize_rng_ops``, a CUDA feature). A segment that draws gets no
    compiled ``selective``."""
    mode = _FirstRandomOp()
    with mode:
        run()
    return mode.found
