"""The seven methods of the cost runtime, all through the transactional checkpoint.

A method runs one training step of a workload: the forward of every segment, the loss,
and (by the caller) the backward. Per segment it applies one of three *options*:

``eager``   run the segment; autograd keeps what it saves (no recompute).
``whole``   ``stateaware.torch_replay.checkpoint`` with ``preserve="whole"``.
``region``  the same with ``Region(state, rows)``, ``rows`` the union of this segment's
            and every later segment's writes in the step (paper §3.1).

Methods (names as the records give them): ``eager``, ``whole`` and ``regions`` use one
option for every segment; ``agnostic``, ``eager_whole`` and ``joint`` use the per-segment
policy a planner chose; ``functional`` keeps the state out of place (each write makes a
new tensor, passed to the next segment as an argument) and checkpoints every segment with
nothing declared — the state versions themselves are the preserved history.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from stateaware.cost_runtime import METHODS
from stateaware.cost_runtime.workloads import StepRows, Workload, loss_of, segment_forward
from stateaware.torch_replay import Region, checkpoint

__all__ = ["METHODS", "UNIFORM", "PLANNED", "OPTIONS", "FUNCTIONAL", "uniform_policy", "forward"]

#: Every method, in the order the records and tables list them.

#: Methods that apply one option to every segment, and that option.
UNIFORM = {"eager": "eager", "whole": "whole", "regions": "region"}

#: Methods whose per-segment policy a planner chooses, and the planner's name.
PLANNED = {"agnostic": "agnostic", "eager_whole": "eager_whole", "joint": "joint"}

#: Per-segment options (as in the profile card).
OPTIONS = ("eager", "whole", "region")

#: The policy value that selects out-of-place state (the ``functional`` method).
FUNCTIONAL = "functional"


def uniform_policy(method: str, segments: int) -> tuple[str, ...] | str:
    """The policy of a non-planned method: ``FUNCTIONAL`` or one option repeated."""
    if method == "functional":
        return FUNCTIONAL
    if method not in UNIFORM:
        raise ValueError(
            f"method {method!r} has no fixed policy; fixed-policy methods are: functional, {', '.join(UNIFORM)}"
        )
    return (UNIFORM[method],) * segments


def forward(
    workload: Workload, rows: StepRows, policy: Sequence[str] | str, *, checkpointed: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run every segment under ``policy``; return ``(loss, last output)``.

    ``policy`` is ``FUNCTIONAL`` or one option per segment. With ``FUNCTIONAL``, ``workload.state``
    is rebound to the final version at the end, so every method leaves the same state bytes
    behind; ``checkpointed=False`` runs the functional program without any checkpoint (the
    semantic reference).
    """
    shape = workload.shape
    x = workload.x0
    if isinstance(policy, str):
        if policy != FUNCTIONAL:
            raise ValueError(
                f"policy={policy!r}: a string policy must be {FUNCTIONAL!r}; "
                f"otherwise give one of {', '.join(OPTIONS)} per segment"
            )
        state = workload.state
        for i, (u, v) in enumerate(workload.weights):
            args = (shape, state, u, v, x, rows.reads[i], rows.writes[i])
            if checkpointed:
                x, state = checkpoint(segment_forward, *args, functional=True)
            else:
                x, state = segment_forward(*args, functional=True)
        # Rebind, never copy_: the first version is saved as segment 0's input, and an
        # in-place write into it would fail autograd's version check at backward.
        workload.state = state
        return loss_of(x), x
    if len(policy) != shape.live_segments:
        raise ValueError(f"policy has {len(policy)} entries for {shape.live_segments} segments")
    state = workload.state
    for i, ((u, v), option) in enumerate(zip(workload.weights, policy, strict=True)):
        args = (shape, state, u, v, x, rows.reads[i], rows.writes[i])
        if option == "eager":
            x = segment_forward(*args)
        elif option == "whole":
            x = checkpoint(segment_forward, *args, state=[state], preserve="whole")
        elif option == "region":
            x = checkpoint(segment_forward, *args, state=[Region(state, rows.regions[i])], preserve="region")
        else:
            raise ValueError(f"policy[{i}]={option!r}; valid options are: {', '.join(OPTIONS)}")
    return loss_of(x), x
