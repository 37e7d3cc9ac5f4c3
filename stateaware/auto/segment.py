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
what the original forward read, and be left as the forward left them: their owner
modules are declared too, and the checkpoint reinstates a declared module's Python
numbers and buffer identities around each replay (``torch_replay._state``). Declaring a
module declares all its buffers; those the segment does not write are preserved as its
option says too (and profiling measures that cost, as it measures everything else).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from stateaware.auto.discover import StateEntry
from stateaware.torch_replay import checkpoint, transaction

__all__ = ["SEGMENT_OPTIONS", "run_segment", "relative"]

#: The options a segment can run under (the planner's card options).
SEGMENT_OPTIONS = ("eager", "whole", "region", "offload")


def _mode(option: str, write: str) -> str:
    """The ``preserve`` mode of a state tensor written ``write`` ("whole" | "rows") under ``option``."""
    if option == "region":
        return "rows" if write == "rows" else "whole"
    return option  # "whole" or "offload"


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
    return checkpoint(transaction(forward, state=items, preserve=preserve), *args, **kwargs)
