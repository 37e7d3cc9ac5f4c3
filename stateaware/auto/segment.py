"""Run one segment under one planner option — the same call for profiling and for training.

``eager`` calls the segment's forward. The three recomputing options call our
transactional checkpoint with the segment's discovered state declared:

=========  =====================================================================
option     preservation of the segment's state tensors
=========  =====================================================================
whole      ``"stats"`` for every state tensor: a device copy, except for running
           statistics that only training-mode norms use (none: the replay updates
           a scratch instead)
region     ``"rows"`` for tensors written only in rows (the rows journal keeps the
           rows the forward wrote), ``"stats"`` for the rest
offload    ``"offload"`` for every state tensor (a pinned host copy on CUDA)
selective  ``"stats"`` for every state tensor; the replay keeps the outputs of the
           expensive ops (matmul, convolution, attention) from the forward and
           recomputes only the rest (``torch_replay.selective.keep_expensive``)
=========  =====================================================================

Why ``"stats"`` (NOTE [ Running statistics kept by no snapshot ] in
``torch_replay.running_stats``): a BatchNorm's running statistics never reach its
training-mode output, so keeping them exact (updated once per step, where torch's
checkpoint updates them twice) costs no snapshot; a plan that recomputes every block
then retains no more than torch's checkpoint on every block does. ``checkpoint``'s own
default stays ``"whole"`` (the cohorts' records count its bytes).

Python number attributes the segment changes (a ring pointer) must read, during a replay,
what the original forward read, and be left as the forward left them: their owner
modules are declared too, and the checkpoint reinstates a declared module's Python
numbers and buffer identities around each replay (``torch_replay._state``). Declaring a
module declares all its buffers; those the segment does not write are preserved as its
option says too (and profiling measures that cost, as it measures everything else).

``select_segments`` turns the ``segments=`` argument of ``stateaware.auto`` (names, block
classes, a predicate or ``"repeated"``) into the qualified names of the segment modules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

import torch

from stateaware.auto.discover import StateEntry
from stateaware.torch_replay import checkpoint, keep_expensive, transaction

__all__ = ["SEGMENT_OPTIONS", "SegmentSpec", "REPEATED", "run_segment", "relative", "select_segments"]

#: The options a segment can run under (the planner's card options).
SEGMENT_OPTIONS = ("eager", "whole", "region", "offload", "selective")


def _mode(option: str, write: str) -> str:
    """The ``preserve`` mode of a state tensor written ``write`` ("whole" | "rows") under ``option``."""
    if option == "region":
        return "rows" if write == "rows" else "stats"
    return "offload" if option == "offload" else "stats"  # "whole" or "selective"


def relative(segment: str, name: str) -> str:
    """``name`` (qualified from the model root) relative to the module ``segment``."""
    if segment and not name.startswith(segment + "."):
        raise ValueError(
            f"state {name!r} lies outside segment {segment!r}; a segment's state must be in its "
            "own submodule tree. Tip: register it as a buffer of that submodule."
        )
    return name[len(segment) + 1 :] if segment else name


def _owner(module: torch.nn.Module, name: str) -> tuple[Any, str]:
    path, _, attr = name.rpartition(".")
    return (module.get_submodule(path) if path else module), attr


def run_segment(
    module: torch.nn.Module,
    forward: Callable[..., Any],
    option: str,
    state: Sequence[tuple[str, StateEntry]],
    args: tuple,
    kwargs: dict,
) -> Any:
    """``forward(*args, **kwargs)`` under ``option`` with ``state``: (name relative to
    ``module``, entry) pairs. Under ``torch.no_grad`` every option just runs."""
    if option not in SEGMENT_OPTIONS:
        raise ValueError(f"option {option!r}; valid options are: {', '.join(SEGMENT_OPTIONS)}")
    if option == "eager" or not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    items: list[Any] = []
    preserve: dict[Any, str] = {}
    owners: dict[int, torch.nn.Module] = {}
    for name, entry in state:
        owner, attr = _owner(module, name)
        if entry.kind == "python":
            owners[id(owner)] = owner
            continue
        t = getattr(owner, attr)
        items.append(t)
        preserve[t] = _mode(option, entry.write)
    for owner in owners.values():
        items.append(owner)
        for b in owner.buffers():  # the owner's other buffers: as the option preserves state
            preserve.setdefault(b, _mode(option, "whole"))
    # Declared through a transaction, so every keyword of the call (a user's `state=`
    # included) goes to the segment's forward.
    replay = transaction(forward, state=items, preserve=preserve)
    if option == "selective":
        return checkpoint(replay, *args, context_fn=keep_expensive, **kwargs)
    return checkpoint(replay, *args, **kwargs)


#: What ``segments=`` accepts: qualified names, a module class or a tuple of classes, a
#: predicate ``(qualified name, module) -> bool`` (as ``check_fn`` of torch's
#: ``apply_activation_checkpointing``), ``"repeated"``, or None (the default).
SegmentSpec: TypeAlias = (
    Sequence[str]
    | type[torch.nn.Module]
    | tuple[type[torch.nn.Module], ...]
    | Callable[[str, torch.nn.Module], bool]
    | None
)

#: ``segments="repeated"``: the children of every outermost ``ModuleList``/``Sequential``
#: holding at least two modules of one class (a model's repeated blocks).
REPEATED = "repeated"


def select_segments(model: torch.nn.Module, segments: SegmentSpec | str) -> list[str]:
    """The qualified names of ``model``'s segment modules that ``segments`` selects.

    * None: an ``nn.Sequential``'s children (unchanged); any other model, ``"repeated"``.
    * ``"repeated"``: the children of each ``nn.ModuleList``/``nn.Sequential`` that holds at
      least two modules of one class and lies inside no other such container (torchvision
      ResNet's ``layer1``..``layer4`` give their blocks, timm ViT's ``blocks`` and GPT-2's
      ``transformer.h`` theirs; EfficientNet's ``features`` gives its stages).
    * a class or tuple of classes: the submodules that are instances of one of them;
    * a predicate ``fn(name, module)``: the submodules for which it is true;
    * a sequence of names: those names, as given (checked by the profiler: each must be a
      submodule, none repeated, none inside another).

    For classes and predicates the outermost match wins: the submodules of a match are not
    looked at (a replay of the outer segment re-runs the inner). The root module is never a
    segment. Names come in ``named_modules()`` order; the profiler orders the card's segments
    as the forward runs them. ``ValueError`` in one message when nothing matches (listing the
    classes and containers the model has) or for a string other than ``"repeated"``;
    ``TypeError`` for a value of another type.
    """
    if segments is None:
        if isinstance(model, torch.nn.Sequential):
            return [name for name, _ in model.named_children()]
        segments = REPEATED
    if isinstance(segments, str):
        if segments != REPEATED:
            raise ValueError(
                f"segments={segments!r}; a string must be {REPEATED!r}. Tip: to name one submodule, "
                f"pass a list: segments=[{segments!r}]."
            )
        return _matched(model, _repeated_containers(model), "segments='repeated'", children=True)
    if isinstance(segments, type) or (
        isinstance(segments, tuple) and segments and all(isinstance(c, type) for c in segments)
    ):
        classes = segments if isinstance(segments, tuple) else (segments,)
        _check_module_classes(classes)
        label = "segments=" + ", ".join(c.__name__ for c in classes)
        return _matched(model, _outermost(model, lambda _n, m: isinstance(m, classes)), label)
    if callable(segments):
        return _matched(model, _outermost(model, _checked_predicate(segments)), "the segments predicate")
    if isinstance(segments, Sequence) and all(isinstance(s, str) for s in segments):
        return [str(s) for s in segments]
    raise TypeError(
        f"segments is a {type(segments).__name__}; valid values are None, 'repeated', a module class or a "
        "tuple of classes, a predicate fn(name, module) -> bool, or a list of qualified submodule names"
    )


def _check_module_classes(classes: tuple[type, ...]) -> None:
    for c in classes:
        if not issubclass(c, torch.nn.Module):
            raise TypeError(f"segments names the class {c.__name__}, which is not an nn.Module subclass")


def _checked_predicate(fn: Callable[[str, torch.nn.Module], bool]) -> Callable[[str, torch.nn.Module], bool]:
    def check(name: str, module: torch.nn.Module) -> bool:
        answer = fn(name, module)
        if not isinstance(answer, bool):  # a predicate returning a module or None is a bug, not a choice
            raise TypeError(
                f"the segments predicate returned a {type(answer).__name__} for {name!r}; it must return a bool"
            )
        return answer

    return check


def _outermost(model: torch.nn.Module, match: Callable[[str, torch.nn.Module], bool]) -> Iterator[str]:
    """Names of the submodules ``match`` accepts, not descending into a match."""

    def walk(prefix: str, module: torch.nn.Module) -> Iterator[str]:
        for child_name, child in module.named_children():
            name = f"{prefix}.{child_name}" if prefix else child_name
            if match(name, child):
                yield name
            else:
                yield from walk(name, child)

    return walk("", model)


def _repeats_a_class(module: torch.nn.Module) -> bool:
    if not isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
        return False
    counts = Counter(type(child) for child in module.children())
    return bool(counts) and max(counts.values()) >= 2


def _repeated_containers(model: torch.nn.Module) -> Iterator[str]:
    if _repeats_a_class(model):  # the root itself: its children are the segments
        yield ""
        return
    yield from _outermost(model, lambda _n, m: _repeats_a_class(m))


def _matched(model: torch.nn.Module, found: Iterator[str], label: str, *, children: bool = False) -> list[str]:
    names = list(found)
    if children:  # containers: their children are the segments
        names = [f"{c}.{n}" if c else n for c in names for n, _ in model.get_submodule(c).named_children()]
    if not names:
        raise ValueError(
            f"{label} matches no submodule of {type(model).__name__}; it has {_inventory(model)}. Tip: pass a "
            "class it has (segments=Block), a predicate fn(name, module) -> bool, or qualified names."
        )
    return names


def _inventory(model: torch.nn.Module, most: int = 12) -> str:
    """The model's submodule classes with counts, and its ModuleList/Sequential containers."""
    counts = Counter(type(m).__name__ for name, m in model.named_modules() if name)
    classes = ", ".join(f"{c} x{k}" for c, k in counts.most_common(most))
    more = f" and {len(counts) - most} more classes" if len(counts) > most else ""
    containers = [
        f"{name} ({len(m)})"
        for name, m in model.named_modules()
        if name and isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential))
    ]
    listed = ", ".join(containers[:most]) or "none"
    return f"the classes {classes or 'none'}{more}; containers (ModuleList/Sequential): {listed}"
