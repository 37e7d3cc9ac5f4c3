"""Run one segment under one planner option — the same call for profiling and for training.

``eager`` calls the segment's forward. The three recomputing options call our
transactional checkpoint with the segment's discovered state declared:

=========  =====================================================================
option     preservation of the segment's state tensors
=========  =====================================================================
whole      ``"whole"`` for every state tensor (a device copy)
region     ``"rows"`` for tensors written only in rows (the rows journal keeps the
           rows the forward wrote), ``"whole"`` for the rest
offload    ``"offload"`` for every state tensor (a pinned host copy on CUDA)
=========  =====================================================================

Python number attributes the segment changes (a ring pointer) must read, during a replay,
what the original forward read, and be left as the forward left them: ``_with_numbers``
does that around the segment's function (see its docstring).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from stateaware.auto.discover import StateEntry
from stateaware.torch_replay import checkpoint

__all__ = ["SEGMENT_OPTIONS", "run_segment", "relative"]

#: The options a segment can run under (the planner's card options).
SEGMENT_OPTIONS = ("eager", "whole", "region", "offload")

_MODES = {"whole": lambda e: "whole", "region": lambda e: "rows" if e.write == "rows" else "whole",
          "offload": lambda e: "offload"}


def relative(segment: str, name: str) -> str:
    """``name`` (qualified from the model root) relative to the module ``segment``."""
    if segment and not name.startswith(segment + "."):
        raise ValueError(f"state {name!r} lies outside segment {segment!r}; a segment's state must be in its "
                         "own submodule tree. Tip: register it as a buffer of that submodule.")
    return name[len(segment) + 1:] if segment else name


def _owner(module: torch.nn.Module, name: str) -> tuple[Any, str]:
    path, _, attr = name.rpartition(".")
    return (module.get_submodule(path) if path else module), attr


def run_segment(module: torch.nn.Module, forward: Callable[..., Any], option: str,
                state: Sequence[tuple[str, StateEntry]], args: tuple, kwargs: dict) -> Any:
    """``forward(*args, **kwargs)`` under ``option`` with ``state``: (name relative to
    ``module``, entry) pairs. Under ``torch.no_grad`` every option just runs."""
    if option not in SEGMENT_OPTIONS:
        raise ValueError(f"option {option!r}; valid options are: {', '.join(SEGMENT_OPTIONS)}")
    if option == "eager" or not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    tensors, preserve, numbers = [], {}, []
    for name, entry in state:
        owner, attr = _owner(module, name)
        if entry.kind == "python":
            numbers.append((owner, attr))
            continue
        t = getattr(owner, attr)
        tensors.append(t)
        preserve[t] = _MODES[option](entry)
    # The user's keywords travel inside the function, so none can collide with ours.
    fn = functools.partial(forward, **kwargs) if kwargs else forward
    if numbers:
        fn = _with_numbers(fn, numbers)
    return checkpoint(fn, *args, state=tensors, preserve=preserve)


def _with_numbers(fn: Callable[..., Any], numbers: list[tuple[Any, str]]) -> Callable[..., Any]:
    """``fn`` whose replays see the Python attributes ``numbers`` as its first call saw them.

    The first call is the original forward: it records the attributes' values on entry.
    Every later call is a replay: it sets them to those values, runs, and puts back the
    values they held before the replay — so the segment's change happens once, as eager.
    """
    seen: list[tuple[Any, ...]] = []

    def run(*args: Any) -> Any:
        values = tuple(getattr(owner, attr) for owner, attr in numbers)
        if not seen:
            seen.append(values)
            return fn(*args)
        for (owner, attr), value in zip(numbers, seen[0]):
            setattr(owner, attr, value)
        try:
            return fn(*args)
        finally:
            for (owner, attr), value in zip(numbers, values):
                setattr(owner, attr, value)

    return run
