"""A transactional, non-reentrant activation checkpoint for PyTorch (paper §3.1, §5).

Drop-in for ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` that also
takes the *state* a segment may read or write, and replays the segment against the
state the original forward saw. Built on ``torch.autograd.graph.saved_tensors_hooks``
and ``torch.random.fork_rng``; see NOTE [ Replay transaction ] for the invariants the
code cites as "Rule N".
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
from torch.utils._python_dispatch import _disable_current_modes

from stateaware.torch_replay import _host_rng, _learned_reads
from stateaware.torch_replay import _torch_compat as compat
from stateaware.torch_replay._bindings import Bindings, frozen, has_containers
from stateaware.torch_replay._generators import GeneratorState
from stateaware.torch_replay._reach import _roots, describe, module_devices, named_subtree, names, subtree
from stateaware.torch_replay._reads import Reads, Touched, rebind_mark, rebound_since
from stateaware.torch_replay._replaying import replaying
from stateaware.torch_replay._state import ModuleState, TrainingModes, _unchanged, plain_tensors
from stateaware.torch_replay._transaction import Transaction, check_collision
from stateaware.torch_replay.preserve import (
    PRESERVE_MODES,
    Region,
    _is_wrapper,
    make_engine,
    note_silent_write,
    recording,
)

if TYPE_CHECKING:
    from stateaware.torch_replay.preserve import Engine

__all__ = ["checkpoint", "UndeclaredStateError", "ReplayError", "DETERMINISM_CHECKS"]

# NOTE [ Replay transaction ]
#
# A checkpointed segment discards the tensors it saves for backward and recomputes them
# when backward first needs one ("replay"). A replay is correct only if it sees the bytes
# and random-generator state the original forward saw (paper eq. 2). The transaction:
#
# Rule 1 (preserve first). Before the segment's forward runs, stash the RNG state of the
#   CPU and of every device the segment reaches, and preserve each declared item: a
#   tensor whole (one copy per tensor version, shared by the segments that declare it
#   unchanged) or, for a Region, the declared rows and their index; a wrapper subclass
#   through its inner tensors; a generator's state; a module's buffers, plain tensor
#   attributes, buffer identities and Python numbers (``_state``). Undeclared state is
#   not preserved; Rule 6 makes that an error rather than a wrong gradient.
# Rule 2 (the replay never leaves autograd holding live storage or live history). A
#   whole replay runs on a private copy that the live tensor's ``.data`` points at for the
#   replay (for a non-leaf that requires grad, a stand-in object swapped in, so in-place
#   writes record their history on the stand-in, not on the live tensor); the live
#   storage is neither read nor written. A region replay undoes the declared rows in the
#   live storage, so every tensor the replay saves for backward that aliases that
#   storage is cloned when saved — before the redo overwrites it.
# Rule 3 (saved means unchanged). A tensor the replay saves must still hold, at the end of
#   the replay, the version it had when saved; eager autograd would raise otherwise, and
#   a replay must not silently differentiate something eager would refuse.
# Rule 4 (no autograd-visible bookkeeping). Preservation, undo, redo and the ``.data``
#   swaps go through ``.data`` aliases, which have their own version counter. After a
#   replay the declared tensors' version counters are put back to their pre-replay
#   values: their bytes are the pre-replay bytes, so nothing saved elsewhere is stale.
# Rule 5 (reinstate on every exit). Normal end, early stop and exceptions all restore the
#   live tensors and the outside RNG state. The preserved history itself is never
#   written, so any number of replays (retain_graph=True, several autograd.grad calls)
#   see the same history.
# Rule 6 (undeclared state is an error). The forward runs under ``_reads.Touched``, which
#   records every pre-existing tensor and generator the segment touched (read or wrote) —
#   on the first call of each call shape; later calls re-read the version counters of
#   what that call touched (``_learned_reads``: a version read per tensor instead of a
#   Python call per torch op).
#   (a) An undeclared one the forward wrote — its version counter moved, it was written
#   through a ``.data`` alias or as a training-mode norm's running statistic, a buffer
#   was rebound on an undeclared module, or a generator's state moved — would be read
#   back written by a replay: raise at the forward. (b) An undeclared tensor the forward
#   read (argument, keyword argument, closure, module attribute) whose version moved
#   before the replay: the replay would compute from the changed value — raise at the
#   replay. "Changed" is witnessed by the version counter, the data pointer (``t.data =
#   new``), the buffer-rebinding log (``m.buf = new`` on an undeclared module) and, for
#   floating tensors that do not require grad, a norm (``t.data.add_(1)``). Both name
#   what they found through ``_reach`` (only when raising); per call the witnesses cost
#   O(tensors the forward read) — a norm only for the floating ones without grad.
# Rule 7 (nesting). A checkpoint entered during a replay is a checkpoint like any other:
#   it saves its inputs through autograd (so the enclosing replay saves exactly what the
#   enclosing forward saved), preserves its declared state as the replay sees it, and
#   replays lazily. The replay's graph is differentiated when the segment itself calls
#   ``torch.autograd.grad`` (through the nested segment); otherwise it dies with the
#   replay, and with it the nested frame.
# Rule 8 (device and precision context). The replay runs under the forward's autocast
#   settings (CPU and the segment's device type) and inside ``fork_rng`` with the stashed
#   states (Rule 1), so the RNG state outside the replay is what it was before it.
#   An enclosing ``with torch.device(...)`` is re-entered for the replay (a fresh one).
#   Python's and NumPy's global generators are replayed like torch's when the segment
#   drew from them (``_host_rng``), and every module the segment reached runs the replay
#   in the ``training`` mode its forward saw (``_state.TrainingModes``).
#   A ``context_fn`` pair (selective activation checkpointing) is entered inside all of
#   this: its first context around the forward, its second around every replay, so a
#   policy chooses which ops are recomputed and the transaction what state they see.
# Rule 9 (module state). A declared module's buffer identities, plain tensor attributes
#   and Python numbers (``training``, a ring pointer) are reinstated to their forward-time
#   values for the replay and put back afterwards (Rule 5), so a replay neither sees the
#   later values nor writes them a second time.
# Rule 10 (what the forward was handed). The replay runs with the parameters, buffers and
#   tensor attributes every reached module held at the forward (``torch.func.functional_call``
#   binds fast weights for the call only; a hypernetwork rebinds generated weights) and
#   with copies of the list, tuple and dict arguments as they were at the call (a caller
#   may append to its list afterwards); ``_bindings``.

#: Values of ``determinism_check``: "default" compares shape, dtype and device of every
#: recomputed tensor with the forward's; "none" skips it.
DETERMINISM_CHECKS = ("default", "none")


class UndeclaredStateError(compat.CheckpointError):
    """The segment wrote, or depends on, state it did not declare (Rule 6).

    A ``torch.utils.checkpoint.CheckpointError`` (hence a ``RuntimeError``): handlers
    written for torch's checkpoint catch it."""


class ReplayError(compat.CheckpointError):
    """A replay could not reproduce the original forward (Rules 3, 5 and the count checks).

    A ``torch.utils.checkpoint.CheckpointError``; where torch raises the same error its
    message leads with torch's sentence."""


StateItem: TypeAlias = torch.Tensor | torch.nn.Module | Region | torch.Generator
PreserveSpec: TypeAlias = str | Mapping[Any, str]
#: ``_declare``'s mode chooser: (declared item, its Region rows or None) -> preserve mode.
_Choose: TypeAlias = Callable[[object, torch.Tensor | None], str]
#: ``_stash_rng``'s result: CPU state, device type, device indices, their states.
_RngState: TypeAlias = tuple[torch.Tensor, str, list[int], list[torch.Tensor]]
#: ``_autocast_state``'s result: (device type, enabled, dtype) per type, and the cache flag.
_AutocastState: TypeAlias = tuple[list[tuple[str, bool, torch.dtype]], bool]

_UNSET: Any = object()  # `state`/`preserve` not passed (see _transaction)


class _StopReplay(Exception):
    """Raised from the replay's pack hook once every needed tensor is recomputed."""


class _Holder:
    """What the original forward leaves in the graph instead of a saved tensor."""

    __slots__ = ("handles", "__weakref__")

    def __init__(self) -> None:
        self.handles: dict[int, _Handle | None] = {}


class _Handle:
    """Key of one recomputed tensor per backward; dies after its one unpack."""

    __slots__ = ("__weakref__",)


class _SaveInputs(torch.autograd.Function):
    """Saves the segment's tensor inputs through autograd, so an enclosing checkpoint
    recomputes rather than retains them (Rule 7), and eager's version check applies."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(*tensors)
        return anchor.new_empty(0)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[None, ...]:
        return (None,) * (1 + len(ctx.saved_tensors))


class _Declared:
    __slots__ = ("name", "tensor", "mode", "rows")

    def __init__(self, name: str, tensor: torch.Tensor, mode: str, rows: torch.Tensor | None):
        self.name, self.tensor, self.mode, self.rows = name, tensor, mode, rows


def checkpoint(
    function: Callable[..., Any] | None = None,
    *args: Any,
    state: Iterable[StateItem] = _UNSET,
    preserve: PreserveSpec = _UNSET,
    use_reentrant: bool | None = False,
    preserve_rng_state: bool = True,
    context_fn: Callable[[], tuple[Any, Any]] = compat.NOOP_CONTEXT_FN,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool = True,
    respect_saved_tensors_hooks: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Checkpoint ``function(*args, **kwargs)`` and replay it as a state transaction.

    Like ``torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False)``, the
    segment's forward runs without keeping the tensors it saves for backward; the first
    backward that needs one re-runs ``function`` (a *replay*) to recompute them. Unlike
    it, the replay sees the *declared state* exactly as the original forward saw it, and
    the state visible outside the replay is reinstated afterwards:

    * ``state`` lists what the segment may read or write besides its arguments: tensors,
      modules (a module declares all its buffers, e.g. BatchNorm running statistics, its
      plain tensor attributes, which tensors its buffers are, and its ``int``/``float``/
      ``bool`` attributes; declare parameters by listing them as tensors),
      ``Region`` objects and ``torch.Generator`` objects (the replay draws what the
      forward drew from ``generator=g``).
    * ``preserve`` chooses how: ``"whole"`` keeps one copy of every declared tensor
      version (segments that declare it unchanged share it) and makes one more,
      temporary, while a replay runs; ``"region"``
      keeps, for each ``Region``, only its rows and their index (and, during a replay,
      the rows' current values), other declared tensors whole; ``"rows"`` journals the
      rows the forward itself writes, learned as it writes them (``written_rows``);
      ``"offload"`` is ``"whole"`` with the snapshot in pinned host memory on CUDA
      (``offload``); ``"stats"`` is ``"whole"`` except that a tensor the forward used only
      as a training-mode norm's running statistic keeps no snapshot (it never reaches the
      output: the replay's norm updates a scratch; ``running_stats``); a mapping
      ``{tensor_or_region: mode}`` chooses per tensor (unlisted tensors: whole).
    * ``preserve_rng_state=True`` stashes the CPU RNG and that of every device the
      segment's inputs, declared state and reachable modules live on, and Python's
      ``random`` and NumPy's global ``np.random`` generator when the segment drew from
      them; the replay draws the same random numbers (dropout masks) and the outside RNG
      is left as it was.
    * Every module the segment reaches (``function`` itself, its bound ``self``, modules
      in its closure, globals and arguments, with their submodules) is replayed in the
      ``train()``/``eval()`` mode its forward saw, even if toggled before backward.
    * A declared module's buffers may be views (torchvision's Swin
      ``relative_position_index``): they are preserved by their bytes, through the view.
    * The replay gets the list, tuple and dict arguments as they were at the call (copies,
      nested: a caller may grow its list afterwards), and runs with the parameters,
      buffers and tensor attributes every reached module held at the forward
      (``torch.func.functional_call``'s fast weights, a hypernetwork's generated weights);
      Rule 10.
    * Tensors the segment allocates are its own, in whatever structure a call returns
      them (``topk``'s named tuple, ``chunk``'s tuple): writing them in place is not a
      state write (NOTE [ The segment's own tensors ] in ``_reads``).

    Guarantees: gradients equal those of running ``function`` without checkpointing,
    even when declared state changes between the forward and the backward (other
    segments, the next step, an optimizer), for any number of backward passes over the
    same graph (``retain_graph=True``, ``torch.autograd.grad``), nested checkpoints, and
    under autocast; the declared tensors' bytes after backward are those they would have
    without checkpointing (a segment's writes happen once), and so are a declared
    generator's state and a declared module's buffer identities and numbers; a declared
    non-leaf tensor keeps eager's ``grad_fn`` and version. Works on CPU and CUDA; the hot
    path issues no host synchronisation.

    Errors instead of wrong gradients: ``UndeclaredStateError`` when the segment
    writes a pre-existing tensor or generator it did not declare (a module's buffer or
    parameter, a closure tensor, an argument; through an in-place op, a ``.data`` alias, a
    training-mode norm's running statistics, or by rebinding an undeclared module's
    buffer) — raised at the forward —, or when a tensor the forward read and did not
    declare (positional or keyword argument, closure, module attribute) changed before the
    replay — in place, through ``.data`` (a new storage, or for a floating tensor that does
    not require grad, its bytes), or, for a buffer, by rebinding it — raised at the replay;
    ``ReplayError`` when the replay saves a different
    number or shape of tensors, or modifies a tensor after saving it.

    Nesting: a checkpoint inside ``function`` works, also when ``function`` calls
    ``torch.autograd.grad`` through it; the enclosing call must declare the state its
    nested calls declare too, because its replay re-runs them (Rule 7) — Rule 6 reports
    it when it does not.

    Drop-in: torch's keywords mean what they mean there — ``context_fn`` (e.g.
    ``create_selective_checkpoint_contexts``: the policy decides which ops are saved,
    the transaction still governs state and RNG), ``debug`` and
    ``set_checkpoint_debug_enabled``, ``set_checkpoint_early_stop``, ``GraphExecGroup``,
    an enclosing ``with torch.device(...)``, the curried form
    ``checkpoint(use_reentrant=False, ...)(fn)``; errors are
    ``torch.utils.checkpoint.CheckpointError`` subclasses and lead with torch's wording.
    Under ``torch.compile`` the call is a graph break: the code around it is compiled,
    the segment and its replay run eagerly. Every other keyword goes to ``function``;
    ``state=``/``preserve=`` are refused (``TypeError``) when ``function`` could take
    that keyword itself (a parameter the positional arguments leave unfilled, or
    ``**kwargs``) — declare through ``transaction`` then.

    Limits:

    * ``use_reentrant=True`` is not supported.
    * Under ``torch.compile`` the call is a graph break, so ``fullgraph=True`` refuses it
      (Dynamo's ``Unsupported`` error); compile the code around the checkpoint instead.
    * Rule 6 learns a segment's reads on the first call of each call shape (function
      code, closure and bound module, module structure and training flags, what is
      declared, autocast, and per argument a tensor's shape, dtype, device, layout and
      ``requires_grad``, small values such as ``int``/``float``/``str``/``bool``, small
      containers element by element) and re-checks them by version counter on the calls
      after it: a tensor read, or silently written, only on some calls of one shape
      (control flow on tensor values or on a Python attribute; an argument object kept
      by type; a list or plain object whose contents are replaced between calls) is
      watched only on calls that record.
      ``set_read_recording("every_call")`` records every call (a Python call per op).
    * Rule 6 sees what the forward passes to torch calls; a kernel that writes a tensor
      without bumping its version is seen only for the known ones (batch/instance norm
      running statistics, ``.data`` aliases).
    * Other argument objects (a dataclass, a config) are passed to the replay as they are
      then: a field changed after the call is read changed (Rule 6b watches their tensors).
    * A declared module's numbers and buffer identities are reinstated for the replay;
      an *undeclared* module's Python attributes are not watched (a pointer moved by an
      undeclared module is not detected; declare the module).
    * Objects reachable only through attributes of plain objects are detected when
      touched but named by shape only.
    * A declared tensor must not be a view (declare its base); a declared module's view
      buffer is fine unless another declared tensor shares its storage (refused).
    * Host generators are learned like Rule 6's reads: a segment that draws from
      ``random``/``np.random`` only on some calls of one call shape is preserved on the
      calls that record. A ``.data`` write outside the segment to a parameter, to an
      integer tensor, or one that keeps the tensor's norm (a permutation) is not seen;
      a replay after more than 4096 buffer rebindings sees only the latest.
    * Under a ``torch.func`` transform (``grad``, ``vmap``) with gradients enabled the call
      is refused (``RuntimeError``). A segment returning a generator is refused
      (``TypeError``). Aliases of a declared
      tensor created before the call (other views of its storage) are not redirected
      during a whole replay.
    * A declared wrapper subclass (``__torch_dispatch__`` with ``__tensor_flatten__``) is
      preserved whole through its inner tensors, also under ``preserve="region"``.
    * A declared non-leaf tensor that requires grad is preserved whole, also under
      ``preserve="region"``.
    * A ``.data`` write to a declared tensor after the segment saved it (eager then
      differentiates the written value) is reproduced only with ``early_stop=False``.
    * Snapshot sharing trusts version counters (NOTE [ Shared snapshots ] in ``preserve``):
      a ``.data`` or fused-norm write outside any segment between two segments declaring
      the same tensor is not seen.
    * A ``Region`` must cover every row written between the forward and the last replay;
      the journal does not detect writes outside it.
    * External effects (I/O, other processes, asynchronous writers) are not made
      transactional. Under ``torch.no_grad`` the function just runs.

    Args:
        function: the segment; called as ``function(*args, **kwargs)``.
        state: tensors, modules and ``Region`` objects the segment may read or write.
        preserve: one of ``PRESERVE_MODES`` or a per-tensor mapping (see above).
        use_reentrant: must be ``False`` (``None`` means ``False``).
        context_fn: returns the (forward, replay) context managers, as in torch.
        debug: torch's operator logs in replay errors (not with a ``context_fn``).
        respect_saved_tensors_hooks: passed to a selective-checkpoint policy, as in torch.
        preserve_rng_state: stash and restore the RNG states around each replay.
        determinism_check: one of ``DETERMINISM_CHECKS``.
        early_stop: stop a replay as soon as every saved tensor is recomputed.
    """
    options: dict[str, Any] = dict(
        use_reentrant=use_reentrant,
        preserve_rng_state=preserve_rng_state,
        context_fn=context_fn,
        determinism_check=determinism_check,
        debug=debug,
        early_stop=early_stop,
        respect_saved_tensors_hooks=respect_saved_tensors_hooks,
    )
    if function is None and not args:  # the curried form, as torch's: checkpoint(use_reentrant=False)(fn)
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        ours = {k: v for k, v in (("state", state), ("preserve", preserve)) if v is not _UNSET}
        return lambda fn: _Checkpointed(fn, ours, options)
    return _checkpoint(function, args, kwargs, state, preserve, **options)


@compat.dynamo_disable
def _checkpoint(
    function: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    state: Iterable[StateItem],
    preserve: PreserveSpec,
    **options: Any,
) -> Any:
    steps = transaction_steps(function, args, kwargs, state, preserve, **options)
    run = next(steps)  # the transaction is open: run the segment's forward inside it
    try:
        out = run(*args, **kwargs)
    except BaseException as e:
        steps.throw(e)  # the transaction's contexts exit with the exception, which propagates
        raise
    next(steps, None)
    if inspect.isgenerator(out) or inspect.isasyncgen(out):
        raise TypeError(
            f"stateaware checkpoint: the segment {getattr(run, '__name__', type(run).__name__)!r} returned a "
            "generator; its body runs lazily, after the checkpoint has returned, so nothing of it is "
            "checkpointed and a replay cannot recompute it. Tip: return a tuple or list (return tuple(...)), "
            "or checkpoint each step the generator yields."
        )
    return out


def transaction_steps(
    function: Any,  # the segment, a Transaction, or checkpoint()'s None (calling it then raises)
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    state: Iterable[StateItem],
    preserve: PreserveSpec,
    *,
    use_reentrant: bool | None,
    preserve_rng_state: bool,
    context_fn: Callable[[], tuple[Any, Any]],
    determinism_check: str,
    debug: bool,
    early_stop: bool,
    respect_saved_tensors_hooks: bool | None,
) -> Generator[Callable[..., Any], None, None]:
    """One checkpointed call as a generator, the shape of torch's
    ``_checkpoint_without_reentrant_generator``: it opens the transaction (Rule 1), yields
    the function the caller must run as the segment's forward (``function``, or a
    ``transaction``'s own), and on the next resumption closes it (Rule 6a, learning).
    An exception the forward raises is thrown in, so the contexts exit with it."""
    if use_reentrant:
        raise ValueError(
            "stateaware.torch_replay.checkpoint supports use_reentrant=False only; the state "
            "transaction is built on saved-tensor hooks. Tip: drop use_reentrant=True."
        )
    if determinism_check not in DETERMINISM_CHECKS:
        raise ValueError(
            f"determinism_check={determinism_check!r}; valid values are: "
            f"{', '.join(DETERMINISM_CHECKS)} (default 'default')"
        )
    if isinstance(function, Transaction):  # every keyword is the function's (see _transaction)
        for key, value in (("state", state), ("preserve", preserve)):
            if value is not _UNSET:
                kwargs[key] = value
        function, state, preserve = function.fn, function.state, function.preserve
    else:
        check_collision(
            function, [k for k, v in (("state", state), ("preserve", preserve)) if v is not _UNSET], len(args)
        )
        state = () if state is _UNSET else state
        preserve = "whole" if preserve is _UNSET else preserve
    declared, modules, generators = _declare(state, preserve)
    ctx = compat.contexts(context_fn, debug, respect_saved_tensors_hooks)
    if not torch.is_grad_enabled():
        yield function
        return
    # What torch's own checkpoint fails on with setup_context's error (a Python call: cheap)
    if torch._C._functorch.peek_interpreter_stack() is not None:
        raise RuntimeError(
            "stateaware checkpoint: called under a torch.func transform (grad, vmap, jacrev, ...); the "
            "replay is built on saved-tensor hooks and autograd, which those transforms do not run "
            "through. Tip: call the function without checkpoint inside torch.func, or checkpoint "
            "around the transformed function."
        )
    yield from _forward(
        function,
        args,
        kwargs,
        declared,
        modules,
        generators,
        preserve_rng_state,
        determinism_check == "default",
        compat.early_stop(early_stop),
        ctx,
    )


class _Checkpointed:
    """``checkpoint(use_reentrant=False, ...)(fn)``: ``fn`` checkpointed on every call."""

    def __init__(self, fn: Callable[..., Any], ours: dict[str, Any], options: dict[str, Any]) -> None:
        self.fn, self.ours, self.options = fn, ours, options
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state, preserve = self.ours.get("state", _UNSET), self.ours.get("preserve", _UNSET)
        return _checkpoint(self.fn, args, kwargs, state, preserve, **self.options)

    def __get__(self, instance: object, owner: type | None = None) -> _Checkpointed:
        # as a method decorator: bind, keep the options
        get = getattr(self.fn, "__get__", None)
        if instance is None or get is None:
            return self
        return _Checkpointed(get(instance, owner), self.ours, self.options)


# --------------------------------------------------------------------------- declaration


def _declare(
    state: Iterable[StateItem], preserve: PreserveSpec
) -> tuple[list[_Declared], list[torch.nn.Module], list[tuple[str, torch.Generator]]]:
    if isinstance(preserve, str):
        if preserve not in PRESERVE_MODES:
            raise ValueError(
                f"preserve={preserve!r}; valid values are: {', '.join(PRESERVE_MODES)} "
                "or a mapping {tensor_or_region: mode} (default 'whole')"
            )
        choose: _Choose = lambda item, rows: "whole" if (preserve == "region" and rows is None) else preserve  # noqa: E731
    elif isinstance(preserve, Mapping):
        bad = sorted({str(v) for v in preserve.values() if v not in PRESERVE_MODES})
        if bad:
            raise ValueError(f"preserve mapping has mode(s) {bad}; valid modes are: {', '.join(PRESERVE_MODES)}")
        by_id = {id(k): v for k, v in preserve.items()}

        def choose(item: object, rows: torch.Tensor | None) -> str:
            mode = by_id.get(id(item), by_id.get(id(getattr(item, "tensor", None)), "whole"))
            if mode == "region" and rows is None:
                raise ValueError(
                    "preserve maps a tensor to 'region' but state does not declare its rows; "
                    "declare it as Region(tensor, rows)"
                )
            return mode
    else:
        raise TypeError(f"preserve must be 'whole', 'region' or a mapping, got {type(preserve).__name__}")

    out: dict[int, _Declared] = {}
    modules: list[torch.nn.Module] = []
    generators: dict[int, tuple[str, torch.Generator]] = {}
    for i, item in enumerate(state):
        entries: list[tuple[str, torch.Tensor, torch.Tensor | None, object]]
        from_module = False
        if isinstance(item, Region):
            entries = [(f"Region(state[{i}])", item.tensor, item.rows, item)]
        elif isinstance(item, torch.Tensor):
            entries = [(f"state[{i}]", item, None, item)]
        elif isinstance(item, torch.nn.Module):
            modules.append(item)
            from_module = True
            entries = _module_entries(item)
        elif isinstance(item, torch.Generator):
            generators.setdefault(id(item), (f"state[{i}] (generator on {item.device})", item))
            continue
        else:
            raise TypeError(
                f"state[{i}] is a {type(item).__name__}; valid items are: torch.Tensor, "
                "torch.nn.Module (its buffers and attributes), stateaware.torch_replay.Region, "
                "torch.Generator"
            )
        for name, t, rows, key in entries:
            is_view = t._base is not None
            if is_view and not from_module:
                raise ValueError(
                    f"declared state {describe(name, t)} is a view; declare the tensor it views (its ._base) instead"
                )
            mode = choose(key, rows)
            if is_view:
                # A module's buffer may view a tensor no module holds (torchvision's Swin:
                # relative_position_index = index.flatten()): it is preserved by its bytes,
                # through the view (a whole snapshot swapped in by `.data`, which keeps the
                # view's layout). Only the view is redirected, so a second declared alias of
                # the same storage would diverge from it during a replay: refused below.
                mode = "whole"
            if mode != "whole" and (_is_wrapper(t) or t.grad_fn is not None):
                mode = "whole"  # preserved through inner tensors / a stand-in (docstring, Limits)
            previous = out.get(id(t))
            if previous is None or (rows is not None and previous.rows is None):
                out[id(t)] = _Declared(name, t, mode, rows if mode == "region" else None)
    declared = list(out.values())
    if any(d.tensor._base is not None for d in declared):
        _check_view_aliases(declared)
    return declared, modules, list(generators.values())


_Entry: TypeAlias = tuple[str, torch.Tensor, torch.Tensor | None, object]

#: declared module -> (its named subtree, shallow copies of each submodule's ``_buffers`` and
#: ``__dict__``, the tensor attributes in them with their ``requires_grad``, its entries)
_entries_cache: weakref.WeakKeyDictionary[torch.nn.Module, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _module_entries(item: torch.nn.Module) -> list[_Entry]:
    """A declared module's buffers and plain tensor attributes as ``_declare``'s entries.

    Listing them walks every submodule's ``__dict__`` in Python; a module declared on every
    call rarely changes, so the list is kept and reused while the subtree is the same
    structure, every submodule's ``_buffers`` and ``__dict__`` hold the same objects under
    the same keys (a rebound buffer or attribute, a swapped class or a flipped flag fails
    this, checked in C), and no plain tensor attribute changed its ``requires_grad`` (which
    decides whether it is state, and changes in place)."""
    named = named_subtree(item)
    cached = _entries_cache.get(item)
    if (
        cached is not None
        and cached[0] is named
        and cached[1] is type(item)
        and all(
            _unchanged(sub._buffers, buffers) and _unchanged(vars(sub), attrs)
            for (_, sub), (buffers, attrs) in zip(named, cached[2], strict=True)
        )
        and [t.requires_grad for t in cached[3]] == cached[4]
    ):
        kept: list[_Entry] = cached[5]
        return kept
    cls = type(item).__name__
    # named_buffers(), through the subtree walk cached per structure (a generator
    # chain per submodule costs more than the rest of the declaration)
    entries: list[_Entry] = [
        (f"{cls}.{path}.{n}" if path else f"{cls}.{n}", b, None, b)
        for path, sub in named
        for n, b in sub._buffers.items()
        if b is not None
    ]
    entries += [(f"{cls}.{n} (plain attribute)", t, None, t) for n, t in plain_tensors(item)]
    tensors = [v for _, sub in named for v in vars(sub).values() if isinstance(v, torch.Tensor)]
    dicts = [(sub._buffers.copy(), vars(sub).copy()) for _, sub in named]
    _entries_cache[item] = (named, type(item), dicts, tensors, [t.requires_grad for t in tensors], entries)
    return entries


def _check_view_aliases(declared: list[_Declared]) -> None:
    """A declared view buffer must be the only declared tensor on its storage (see ``_declare``);
    only called when some declared tensor is a view, so the common path pays nothing."""
    by_storage: dict[int, _Declared] = {}
    for d in declared:
        ptr = _storage_ptr(d.tensor)
        other = by_storage.get(ptr)
        if ptr > 0 and other is not None and (d.tensor._base is not None or other.tensor._base is not None):
            raise ValueError(
                f"declared state {describe(d.name, d.tensor)} and {describe(other.name, other.tensor)} share "
                "storage and one is a view; a replay preserves each through its own object, so writes through "
                "one would not be seen through the other. Tip: register one tensor and derive the other in forward."
            )
        by_storage[ptr] = d


# --------------------------------------------------------------------------- forward


class _Frame:
    """Everything one checkpointed call keeps between its forward and its replays."""

    __slots__ = (
        "fn",
        "kwargs",
        "declared",
        "engines",
        "rng",
        "autocast",
        "check_metadata",
        "early_stop",
        "contexts",
        "args",
        "tensor_slots",
        "input_saver",
        "holders",
        "metadata",
        "watch",
        "recomputed",
        "replayed",
        "counts",
        "replay_saved",
        "region_storages",
        "lives",
        "live_ids",
        "torch_contexts",
        "device_context",
        "forward_completed",
        "partial_replays",
        "rebind_mark",
        "fingerprints",
        "containers",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        kwargs: dict[str, Any],
        declared: list[_Declared],
        engines: list[Engine],
        rng: _RngState | None,
        autocast: _AutocastState,
        check_metadata: bool,
        early_stop: bool,
    ) -> None:
        self.fn, self.kwargs = fn, kwargs
        self.declared, self.engines = declared, engines
        self.rng, self.autocast = rng, autocast
        self.check_metadata, self.early_stop = check_metadata, early_stop
        self.contexts: list[Any] = []  # module states and generators: enter()/exit() like engines
        self.args: list[Any] = []
        self.tensor_slots: list[int] = []
        self.input_saver: torch.Tensor | None = None
        self.holders: list[weakref.ref[_Holder]] = []
        self.metadata: list[dict[str, Any]] = []
        # (tensor, version, argument index, id, data pointer) of each undeclared tensor the forward read
        self.watch: list[tuple[weakref.ref[torch.Tensor], int, int | None, int, int]] = []
        self.recomputed: defaultdict[int, weakref.WeakKeyDictionary[_Handle, torch.Tensor]] = defaultdict(
            weakref.WeakKeyDictionary
        )
        self.replayed: set[int] = set()
        self.counts: defaultdict[int, int] = defaultdict(int)
        self.replay_saved: list[tuple[torch.Tensor, int, int]] = []
        self.region_storages: set[int] = set()
        self.lives = [t for e in engines for t in e.lives()]
        self.live_ids = {id(e.live) for e in engines}
        self.torch_contexts: compat.Contexts | None = None  # context_fn / debug (see _torch_compat)
        self.device_context: Any = None
        self.forward_completed = False
        self.partial_replays: set[Any] = set()
        self.rebind_mark = 0  # _reads.rebind_mark() after the forward
        # (watched floating tensors that do not require grad, their norms after the forward)
        self.fingerprints: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        # Rule 10: the argument positions holding containers ("kwargs": the keywords hold one)
        self.containers: list[int | str] = []
        if kwargs and has_containers(kwargs.values()):
            self.kwargs = frozen(kwargs)
            self.containers.append("kwargs")

    def save_inputs(self, args: tuple[Any, ...], declared_ids: set[int]) -> None:
        self.args, self.tensor_slots, tensors = _split_inputs(args, declared_ids)
        if has_containers(args):  # Rule 10: the replay sees the containers as the forward did
            for i, a in enumerate(self.args):
                if isinstance(a, (list, tuple, dict)):
                    self.args[i] = frozen(a)
                    self.containers.append(i)
        self.input_saver = _SaveInputs.apply(_anchor(), *tensors)

    def inputs(self) -> list[Any]:
        args = list(self.args)
        for i in self.containers:  # a fresh copy per replay: the segment may mutate its own
            if i != "kwargs":
                args[i] = frozen(args[i])  # type: ignore[index]
        # unpacks; may replay an enclosing frame. input_saver is set by save_inputs, and its
        # grad_fn is the _SaveInputs node, whose saved_tensors torch's Node type does not declare
        saved = self.input_saver.grad_fn.saved_tensors  # type: ignore[union-attr]
        for slot, t in zip(self.tensor_slots, saved, strict=True):
            args[slot] = t
        return args


_anchors = threading.local()


def _anchor() -> torch.Tensor:
    # One leaf per thread that makes _SaveInputs record its node; no gradient ever reaches
    # it (the node's output is never used), so sharing it across calls is safe.
    anchor = getattr(_anchors, "anchor", None)
    if anchor is None:
        anchor = _anchors.anchor = torch.empty(0, requires_grad=True)
    return anchor


def _split_inputs(args: tuple[Any, ...], declared_ids: set[int]) -> tuple[list[Any], list[int], list[torch.Tensor]]:
    # Declared tensors stay plain references: the segment writes them, which would trip
    # autograd's version check on a saved input, and Rule 1 preserves them anyway.
    slots: list[int]
    tensors: list[torch.Tensor]
    kept, slots, tensors = list(args), [], []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and id(a) not in declared_ids:
            kept[i] = None
            slots.append(i)
            tensors.append(a)
    return kept, slots, tensors


def _forward(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    declared: list[_Declared],
    modules: list[torch.nn.Module],
    generators: list[tuple[str, torch.Generator]],
    preserve_rng_state: bool,
    check_metadata: bool,
    early_stop: bool,
    ctx: compat.Contexts | None = None,
) -> Generator[Callable[..., Any], None, None]:
    declared_ids = {id(d.tensor) for d in declared}
    device_type, devices = _devices(fn, args, kwargs, declared)
    rng = _stash_rng(device_type, devices) if preserve_rng_state else None
    autocast = _autocast_state(device_type)
    shape = _learned_reads.call_shape(fn, args, kwargs)
    # What the learned profile vouches for depends on what is declared (a declared tensor's
    # silent writes are not watched) and on the autocast settings (another path).
    context = (tuple(id(d.tensor) for d in declared), tuple(id(g) for _, g in generators), *autocast[0], autocast[1])
    touched, key = _learned_reads.observe(*shape, context)
    engines: list[Engine] = []
    for d in declared:  # Rule 1
        engine = make_engine(d.mode, d.tensor, d.name, d.rows)
        prepare = getattr(engine, "prepare", None)  # "stats": a learned call knows its statistics-only
        if prepare is not None:  # tensors before it runs (NOTE [ Running statistics kept by no snapshot ])
            prepare(touched)
        engines.append(engine)

    frame = _Frame(fn, kwargs, declared, engines, rng, autocast, check_metadata, early_stop)
    frame.contexts = [ModuleState(m) for m in modules] + [GeneratorState(g, n) for n, g in generators]
    frame.region_storages = {e.live.untyped_storage().data_ptr() for e in engines if e.kind == "region"}
    frame.torch_contexts, frame.device_context = ctx, compat.device_context()
    reached = _reached_modules(fn, args, kwargs)
    frame.contexts.append(TrainingModes(reached))
    frame.contexts.append(Bindings(reached))  # Rule 10
    frame.save_inputs(args, declared_ids)
    host = _host_rng.capture(touched.host_rng)  # a learned call: only what its profile drew from
    with (
        compat.saved_tensors_hooks(_forward_pack(frame), _forward_unpack(frame)),
        touched,
        compat.entered(ctx.forward if ctx is not None else None),
        recording(engines),
    ):
        yield fn  # the caller runs fn(*args, **kwargs) here
    frame.forward_completed = True
    if isinstance(touched, Touched):
        host = _host_rng.moved(host)  # a recorded call learns which host generators it drew from
    if host and preserve_rng_state:
        frame.contexts.append(_host_rng.HostRngState(host))
    _check_forward(frame, touched, args, declared_ids, modules, {id(g) for _, g in generators})
    for engine in engines:
        settle = getattr(engine, "settle", None)  # "stats": drop what the forward showed needless
        if settle is not None:
            settle(touched)
    _learned_reads.learn(key, touched, shape[1], shape[2], tuple(host))


def _reached_modules(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Every module in the subtrees of the modules the segment reaches (``_roots``: the
    function or its bound ``self``, closure, globals, arguments); cached per structure."""
    roots = [obj for _, obj in _roots(fn, args, kwargs) if isinstance(obj, torch.nn.Module)]
    if len(roots) == 1:
        return subtree(roots[0])
    return tuple(dict.fromkeys(m for r in roots for m in subtree(r)))


def _check_forward(
    frame: _Frame,
    touched: Reads,
    args: tuple[Any, ...],
    declared_ids: set[int],
    modules: list[torch.nn.Module],
    generator_ids: set[int],
) -> None:
    """Rule 6a, then the watch list for Rule 6b."""

    def is_declared(t: torch.Tensor) -> bool:
        return id(t) in declared_ids or (t._base is not None and id(t._base) in declared_ids)

    written = touched.written()
    for t in touched.stat_writes.values():
        note_silent_write(t)  # NOTE [ Shared snapshots ]
    for _, _, owner in touched.data_aliases:
        note_silent_write(owner)
    for t in touched.quiet:  # a learned call: the declared tensors its profile writes silently
        note_silent_write(t)
    problems: list[tuple[object, str]] = [(t, how) for t, how in written if not is_declared(t)]
    problems += [
        (g, "its state moved (it was drawn from)") for g in touched.moved_generators() if id(g) not in generator_ids
    ]
    declared_modules: set[int] = set()
    if touched.rebound:
        declared_modules = {id(m) for root in modules for m in root.modules()}
        problems += [
            (m, f"buffer {name!r} was (re)bound") for m, name in touched.rebound if id(m) not in declared_modules
        ]
    # What a version counter cannot show is learned only when it all concerns declared state
    # (``_learned_reads.learn``): a declared BatchNorm's statistics, not an undeclared `.data` read.
    touched.quiet_undeclared = (
        any(not is_declared(t) for t in touched.stat_writes.values())
        or any(not is_declared(owner) for _, _, owner in touched.data_aliases)
        or any(i not in generator_ids for i in touched.generators)
        or any(id(m) not in declared_modules for m, _ in touched.rebound)
    )
    if problems:
        raise UndeclaredStateError(_undeclared_message(frame.fn, args, frame.kwargs, problems))
    positions = {id(a): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    read = [t for t, _ in touched.tensors.values() if not is_declared(t)]
    # A parameter's storage may be swapped between forward and backward with its values kept:
    # FSDP2 frees the unsharded parameters after forward and gathers them again for backward.
    # So the data pointer witnesses only tensors that do not require grad (-2: not watched).
    frame.watch = [
        (weakref.ref(t), t._version, positions.get(id(t)), id(t), -2 if t.requires_grad else _data_ptr(t)) for t in read
    ]
    frame.rebind_mark = rebind_mark()
    # `.data` writes outside the segment (`t.data.mul_(2)`) bump no version: a floating tensor
    # that does not require grad (a buffer, a mask; parameters are eager's own business, as
    # their `.data` writes reach eager's saved tensors too) is witnessed by its norm.
    plain = [t for t in read if not t.requires_grad and t.is_floating_point() and type(t) is torch.Tensor]
    if plain:
        with torch.no_grad(), _no_dispatch_modes():
            frame.fingerprints = (plain, list(torch._foreach_norm(plain)))


def _forward_pack(frame: _Frame) -> Callable[[torch.Tensor], _Holder]:
    def pack(x: torch.Tensor) -> _Holder:
        holder = _Holder()
        frame.holders.append(weakref.ref(holder))
        if frame.check_metadata:
            frame.metadata.append(compat.metadata_of(x))
        return holder

    return pack


def _forward_unpack(frame: _Frame) -> Callable[[_Holder], torch.Tensor]:
    def unpack(holder: _Holder) -> torch.Tensor:
        gid = compat.graph_group_id()
        if gid not in frame.replayed:
            _replay(frame, gid)
        if gid not in holder.handles:
            raise ReplayError(
                "stateaware checkpoint: a tensor the forward saved was not recomputed by "
                "the replay. Tip: pass early_stop=False if the segment's control flow "
                "depends on state the replay cannot see."
            )
        handle = holder.handles[gid]
        if handle is None:
            raise ReplayError(compat.twice_message())
        value = frame.recomputed[gid][handle]
        holder.handles[gid] = None
        return value

    def unpack_reporting(holder: _Holder) -> torch.Tensor:
        try:
            return unpack(holder)
        except compat.CheckpointError as e:  # debug mode: torch's operator logs around the error
            frame.torch_contexts.on_error(e)  # type: ignore[union-attr, misc]  # both set: only returned then
            raise

    if frame.torch_contexts is not None and frame.torch_contexts.on_error is not None:
        return unpack_reporting
    return unpack


# --------------------------------------------------------------------------- replay


def _replay(frame: _Frame, gid: int) -> None:
    _check_reads_unchanged(frame)  # Rule 6b
    args = frame.inputs()
    lives = frame.lives
    versions = [t._version for t in lives]
    frame.replay_saved = []
    stopped = False
    replay_context = frame.torch_contexts.replay if frame.torch_contexts is not None else None
    with _rng_restored(frame.rng):
        entered: list[Any] = []  # engines and module/generator states
        try:
            with _GradOff():
                for engine in (*frame.contexts, *frame.engines):
                    engine.enter()
                    entered.append(engine)
            with (
                compat.saved_tensors_hooks(_replay_pack(frame, gid), _replay_unpack),
                torch.enable_grad(),
                _autocast_restored(frame.autocast),
                compat.entered(frame.device_context),
                compat.entered(replay_context),
                replaying(),
            ):
                try:
                    frame.fn(*args, **(frozen(frame.kwargs) if "kwargs" in frame.containers else frame.kwargs))
                except _StopReplay:
                    stopped = True
            _check_saved_unchanged(frame)  # Rule 3
        finally:
            with _GradOff():  # the engines' exits, like their enters, are not autograd-visible
                for engine in reversed(entered):  # Rule 5
                    engine.exit()
            frame.replay_saved = []
            if lives:  # Rule 4
                torch._C._autograd._unsafe_set_version_counter(tuple(lives), tuple(versions))
    frame.replayed.add(gid)
    _check_counts(frame, gid, stopped)


def _check_reads_unchanged(frame: _Frame) -> None:
    """Rule 6b: what the forward read and did not declare is what the replay will read.

    Witnessed by the version counter (in-place writes), the data pointer (``t.data = new``;
    tensors that do not require grad only, as FSDP2 regathers parameters into new storage),
    the buffer-rebinding log (``m.buf = new`` on an undeclared module) and, for floating
    tensors that do not require grad, a norm (``t.data.add_(1)``; a change that keeps the
    norm, e.g. a permutation, is not seen).
    """
    changed: list[tuple[torch.Tensor, str, int | None]] = []
    for ref, version, at, _, ptr in frame.watch:
        t = ref()
        if t is None:
            continue
        if t._version != version:
            changed.append((t, f"version {version} -> {t._version}", at))
        elif ptr != -2 and _data_ptr(t) != ptr:
            changed.append((t, "its .data was replaced (a new storage)", at))
    if frame.fingerprints is not None and not changed:
        tensors, norms = frame.fingerprints
        with torch.no_grad(), _no_dispatch_modes():
            now = torch._foreach_norm(tensors)
            for t, before, after in zip(tensors, norms, now, strict=True):
                if not torch.equal(before, after) and not (bool(before.isnan()) and bool(after.isnan())):
                    changed.append((t, "its bytes changed without a version bump (written through .data)", None))
    if changed:
        raise UndeclaredStateError(_changed_message(frame, changed))
    rebound = rebound_since(frame.rebind_mark, {w[3] for w in frame.watch}) if frame.watch else []
    if rebound:
        raise UndeclaredStateError(
            "stateaware checkpoint: the segment's forward read a buffer of a module it did not declare, and "
            "the buffer was rebound before the replay (" + ", ".join(rebound) + "); the replay would read "
            "the new tensor. Tip: declare the module, checkpoint(fn, ..., state=[module]), or do not rebind "
            "it before backward."
        )


def _data_ptr(t: torch.Tensor) -> int:
    try:
        return int(torch._C.TensorBase.data_ptr(t))
    except (RuntimeError, NotImplementedError, TypeError):  # no storage (wrapper subclasses, sparse)
        return -1


def _replay_pack(frame: _Frame, gid: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def pack(x: torch.Tensor) -> torch.Tensor:
        index = frame.counts[gid]
        frame.counts[gid] = index + 1
        if index >= len(frame.holders):
            if not frame.forward_completed:
                # A backward inside the segment's own forward replays the part run so far
                # (early_stop=False runs on past it): what it saves beyond that is not ours.
                frame.partial_replays.add(gid)
                return x.detach() if x.requires_grad else x
            raise ReplayError(
                f"{compat.TORCH_MORE}\n(stateaware checkpoint) the replay saved more than the forward's "
                f"{len(frame.holders)} tensors: the segment is not deterministic in what it computes."
            )
        # What the replay saves, and what backward receives, is a detached alias (the
        # replay's own graph is differentiated only by a backward inside the segment,
        # Rule 7): an op that saves its own output (tanh, sigmoid, ReLU) would otherwise
        # close a cycle through C++ (output -> grad_fn -> saved output) that Python's
        # collector cannot see, and every replay graph would outlive its step.
        # torch.utils.checkpoint detaches here for the same reason.
        alias = x.detach() if x.requires_grad else x
        kept = alias
        if frame.region_storages and _storage_ptr(x) in frame.region_storages:
            with _no_dispatch_modes():  # our copy, not the segment's op (a SAC mode must not count it)
                kept = x.detach().clone()  # Rule 2: the redo will overwrite the live storage
        elif id(x) in frame.live_ids:
            # Rule 2: the declared tensor object itself; its `.data` is swapped back after the
            # replay, so autograd gets an alias that keeps pointing at the replay's storage.
            kept = x.detach()
        frame.replay_saved.append((alias, x._version, index))
        holder = frame.holders[index]()
        if holder is not None:
            handle = _Handle()
            holder.handles[gid] = handle
            frame.recomputed[gid][handle] = kept
        if frame.early_stop and index + 1 == len(frame.holders):
            raise _StopReplay
        return alias

    return pack


def _replay_unpack(x: torch.Tensor) -> torch.Tensor:
    return x


def _check_saved_unchanged(frame: _Frame) -> None:
    for x, version, index in frame.replay_saved:
        if x._version != version:
            raise ReplayError(
                f"stateaware checkpoint: tensor {index} saved for backward by the segment "
                f"(shape {tuple(x.shape)}, {x.dtype}) was modified in place after it was saved "
                f"(version {version} -> {x._version}); eager autograd would refuse this program. "
                "Tip: clone the tensor before modifying it."
            )


def _check_counts(frame: _Frame, gid: Any, stopped: bool) -> None:
    if gid in frame.partial_replays:
        return  # a replay inside the forward itself: the forward had saved fewer tensors so far
    if not stopped and frame.counts[gid] != len(frame.holders):
        raise ReplayError(
            compat.TORCH_COUNT.format(forward=len(frame.holders), replay=frame.counts[gid])
            + "\n(stateaware checkpoint) the segment is not deterministic given its declared state. "
            "Tip: declare every tensor it reads and writes in state=[...]."
        )
    if frame.check_metadata:
        different = []
        for index, holder_ref in enumerate(frame.holders):
            holder = holder_ref()
            handle = holder.handles.get(gid) if holder is not None else None
            if handle is None:
                continue
            got = compat.metadata_of(frame.recomputed[gid][handle])
            if got != frame.metadata[index]:
                different.append(
                    f"tensor at position {index}:\nsaved metadata: {frame.metadata[index]}\n"
                    f"recomputed metadata: {got}\n"
                )
        if different:
            raise ReplayError(
                f"{compat.TORCH_METADATA}\n{''.join(different)}"
                "(stateaware checkpoint) Tip: determinism_check='none' skips this check."
            )


# --------------------------------------------------------------------------- RNG, autocast

_accelerator: list[str | None] = []  # the machine's accelerator type, looked up once


def _devices(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], declared: list[_Declared]
) -> tuple[str, list[int]]:
    if not _accelerator:
        found_type = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        _accelerator.append(found_type.type if found_type is not None else None)
    kind = _accelerator[0]
    # torch.cuda.is_initialized is unannotated in torch (no-untyped-call below, twice)
    if kind is None or (kind == "cuda" and not torch.cuda.is_initialized()):  # type: ignore[no-untyped-call]
        # No tensor can live on an accelerator that was never initialised: CPU only.
        return "cpu", []
    indices: set[int]
    device_type, indices = "cpu", set()
    found = [a.device for a in args if isinstance(a, torch.Tensor)]
    found += [v.device for v in kwargs.values() if isinstance(v, torch.Tensor)]
    found += [d.tensor.device for d in declared]
    for _, obj in _roots(fn, (), {}):  # the function's own modules and closure tensors (cached walk)
        if isinstance(obj, torch.nn.Module):
            found.extend(module_devices(obj))
        elif isinstance(obj, torch.Tensor):
            found.append(obj.device)
    for device in found:
        if device.type != "cpu":
            device_type = device.type
            if device.index is not None:
                indices.add(device.index)
    if device_type == "cpu" and torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        device_type = "cuda"  # a segment may create CUDA tensors from CPU inputs
    if device_type != "cpu":
        module = torch.get_device_module(device_type)
        if getattr(module, "is_initialized", lambda: True)():
            indices.add(module.current_device())
    return device_type, sorted(indices)


def _stash_rng(device_type: str, devices: list[int]) -> _RngState:
    states: list[torch.Tensor] = []
    if devices:
        module = torch.get_device_module(device_type)
        states = [module.get_rng_state(d) for d in devices]
    return torch.get_rng_state(), device_type, devices, states


@contextlib.contextmanager
def _rng_restored(rng: _RngState | None) -> Iterator[None]:
    """The stashed RNG states inside, the outside states back afterwards (Rule 8); what
    ``torch.random.fork_rng`` does, without its per-call argument handling."""
    if rng is None:
        yield
        return
    cpu, device_type, devices, states = rng
    # a device module (torch.cuda, ...): its RNG functions are not on ModuleType
    module: Any = torch.get_device_module(device_type) if devices else None
    outside_cpu = torch.get_rng_state()
    outside = [module.get_rng_state(d) for d in devices] if devices else []
    torch.set_rng_state(cpu)
    for d, state in zip(devices, states, strict=True):
        module.set_rng_state(state, d)
    try:
        yield
    finally:
        torch.set_rng_state(outside_cpu)
        for d, state in zip(devices, outside, strict=True):
            module.set_rng_state(state, d)


_autocast_types: dict[str, tuple[str, ...]] = {}


def _autocast_state(device_type: str) -> _AutocastState:
    types = _autocast_types.get(device_type)
    if types is None:
        types = _autocast_types[device_type] = tuple(
            t for t in dict.fromkeys(("cpu", device_type)) if torch.amp.is_autocast_available(t)
        )
    return [
        (t, torch.is_autocast_enabled(t), torch.get_autocast_dtype(t)) for t in types
    ], torch.is_autocast_cache_enabled()


def _autocast_restored(state: _AutocastState) -> contextlib.AbstractContextManager[object]:
    settings, cache = state
    if cache == torch.is_autocast_cache_enabled() and all(
        (enabled, dtype) == (torch.is_autocast_enabled(t), torch.get_autocast_dtype(t))
        for t, enabled, dtype in settings
    ):
        return contextlib.nullcontext()  # the backward already runs under the forward's settings
    stack = contextlib.ExitStack()
    for device_type, enabled, dtype in settings:
        stack.enter_context(torch.autocast(device_type=device_type, dtype=dtype, enabled=enabled, cache_enabled=cache))
    return stack


# --------------------------------------------------------------------------- helpers


class _GradOff:
    """``torch.no_grad()`` for our own bookkeeping, without its decorator machinery: it is
    entered on every replay, and ``torch.no_grad()``'s construction costs several times
    the switch itself."""

    __slots__ = ("previous",)

    def __enter__(self) -> None:
        self.previous = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        torch._C._set_grad_enabled(self.previous)


def _no_dispatch_modes() -> contextlib.AbstractContextManager[object]:
    """Bookkeeping ops of ours run below any dispatch mode the segment runs under (SAC)."""
    return _disable_current_modes()


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # tensors without storage (e.g. nested, meta)
        return -1


def _namer(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[Any], str]:
    """Names for the objects in an error message; the walk runs only when raising."""
    table: dict[int, str] | None = None
    positions = {id(a): f"argument {i}" for i, a in enumerate(args) if isinstance(a, torch.Tensor)}

    def name(obj: Any) -> str:
        nonlocal table
        if id(obj) in positions:
            return positions[id(obj)]
        if isinstance(obj, torch.nn.Module):
            return type(obj).__name__
        if table is None:
            table = names(fn, args, kwargs)
        base = getattr(obj, "_base", None)
        if id(obj) not in table and base is not None and id(base) in table:
            return f"a view of {table[id(base)]}"
        return table.get(id(obj), "a tensor the segment reached")

    return name


def _what(name: str, obj: Any) -> str:
    return describe(name, obj) if isinstance(obj, torch.Tensor) else name


def _undeclared_message(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], problems: list[tuple[object, str]]
) -> str:
    name = _namer(fn, args, kwargs)
    lines = [f"  {_what(name(obj), obj)}: {how}" for obj, how in problems]
    return (
        "stateaware checkpoint: the segment wrote state it did not declare, so a replay would read "
        "the written value instead of the one the forward read:\n" + "\n".join(lines) + "\n"
        "Tip: declare it, checkpoint(fn, ..., state=[tensor, module, generator or Region(tensor, rows)]) "
        "(a module declares its buffers, attributes and numbers), or move the write out of the segment."
    )


def _changed_message(frame: _Frame, changed: list[tuple[torch.Tensor, str, int | None]]) -> str:
    name = _namer(frame.fn, (), frame.kwargs)
    lines = [f"  {_what(f'argument {at}' if at is not None else name(t), t)}: {how}" for t, how, at in changed]
    return (
        "stateaware checkpoint: the segment's forward read state it did not declare, and it was modified "
        "in place before the replay; the replay would compute from (and differentiate) the modified "
        "value:\n" + "\n".join(lines) + "\n"
        "Tip: declare it, checkpoint(fn, ..., state=[that tensor or its module]), or do not modify it "
        "before backward."
    )
