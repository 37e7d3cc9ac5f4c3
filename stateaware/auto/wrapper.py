"""``apply``: run each segment of a model under its planned option, in place.

Each segment module gets an instance ``forward`` that calls ``run_segment`` with the
option the plan chose and the state its card discovered. Nothing is registered as a
parameter, buffer or submodule, so ``state_dict()`` keys and values are unchanged and a
checkpoint file loads into the model either way; ``copy.deepcopy`` of an applied model is
applied too (the plan is plain data on the module, resolved by name at each call).
Applying again replaces the previous plan; ``remove`` undoes it. A card profiled with
``compile=`` makes each segment run its compiled forward under its option, and the model's
own forward run compiled between the segments (``stateaware.auto.compiled``); ``remove``
undoes that too.

Under data parallelism stateaware goes inside: apply it to the plain model first, then
wrap that with ``DistributedDataParallel`` or ``fully_shard`` (``refuse_distributed``).
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from stateaware.auto.compiled import compile_between, compiled_option, uncompile_between
from stateaware.auto.discover import StateEntry
from stateaware.auto.fit import no_option_message
from stateaware.auto.segment import SEGMENT_OPTIONS, relative, run_segment
from stateaware.torch_replay._torch_compat import dynamo_disable

__all__ = ["apply", "apply_policy", "remove", "original_forward", "card_segments", "refuse_distributed"]

_ATTR = "_stateaware_segment"


@dataclass(frozen=True)
class _SegmentPlan:
    option: str
    state: tuple[tuple[str, StateEntry], ...]  # names relative to the segment
    compile: dict[str, Any] | None = None  # torch.compile keywords (the card's), or None: eager code


@dynamo_disable  # under torch.compile, a segment's call is a graph break (NOTE [ Compiled segments ])
def _planned_forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    plan: _SegmentPlan = self.__dict__[_ATTR]
    if plan.compile is None:
        return run_segment(self, original_forward(self), plan.option, plan.state, args, kwargs)
    forward, option = compiled_option(self, plan.compile, plan.option)
    return run_segment(self, forward, option, plan.state, args, kwargs)


def original_forward(module: torch.nn.Module) -> Any:
    """The segment's own ``forward`` (the class's), bound to ``module``, whether or not a
    plan was applied to it."""
    return types.MethodType(type(module).forward, module)


def card_segments(card: Any) -> tuple[list[str], list[list[StateEntry]]]:
    """The segment names and their state entries that ``profile`` put in ``card``.

    ``ValueError`` for a card without them (one not made by ``stateaware.auto.profile``).
    """
    auto = card.provenance.get("auto")
    if not isinstance(auto, dict) or "segments" not in auto or "state" not in auto:
        raise ValueError(
            "the plan's card has no provenance['auto'] (segment names and state); apply needs a card "
            "made by stateaware.auto.profile. Tip: profile the model, then plan that card."
        )
    return list(auto["segments"]), [[StateEntry.from_dict(e) for e in seg] for seg in auto["state"]]


def apply(model: torch.nn.Module, plan: Any) -> torch.nn.Module:
    """Wrap each segment of ``model`` to run under ``plan.policy``'s option; returns ``model``.

    ``plan`` is what ``stateaware.auto.plan`` returns (a planner ``Plan`` carrying its
    card). ``ValueError`` for an infeasible plan, a policy whose length is not the card's
    segment count, or a segment name the model lacks; ``refuse_distributed``'s
    ``ValueError`` for a model already wrapped for data parallelism.
    """
    refuse_distributed(model, "apply")
    if not plan.feasible and plan.min_peak_bytes is None:
        raise ValueError(f"nothing to apply: {no_option_message(plan.card, plan.planner)}")
    if not plan.feasible:
        raise ValueError(
            f"the plan is infeasible at budget {plan.budget_bytes} bytes (least achievable peak "
            f"{plan.min_peak_bytes} bytes); nothing to apply. Tip: raise the budget."
        )
    return apply_policy(model, plan.card, plan.policy)


def apply_policy(model: torch.nn.Module, card: Any, policy: Sequence[str]) -> torch.nn.Module:
    """``apply`` of one policy (an option per segment of ``card``), feasible or not: what
    the budget loop measures. ``ValueError`` as ``apply``'s, but for feasibility."""
    names, states = card_segments(card)
    compile = card.provenance["auto"].get("compile")
    if len(policy) != len(names):
        raise ValueError(f"the plan has {len(policy)} options for {len(names)} segments")
    modules = dict(model.named_modules())
    for name, option, entries in zip(names, policy, states, strict=True):
        if name not in modules:
            raise ValueError(f"segment {name!r} of the plan is not a submodule of {type(model).__name__}")
        if option not in SEGMENT_OPTIONS:
            raise ValueError(f"segment {name!r}: option {option!r}; valid options are: {', '.join(SEGMENT_OPTIONS)}")
        module = modules[name]
        pairs = tuple((relative(name, e.name), e) for e in entries)
        module.__dict__[_ATTR] = _SegmentPlan(option, pairs, compile)
        module.forward = types.MethodType(_planned_forward, module)
    uncompile_between(model)  # a plan applied before, compiled, is replaced
    if compile is not None:
        compile_between(model, names, compile)
    return model


def remove(model: torch.nn.Module) -> torch.nn.Module:
    """Undo ``apply``: every segment runs its own ``forward`` again, and the model its own
    uncompiled one; returns ``model``."""
    uncompile_between(model)
    for module in model.modules():
        if _ATTR in module.__dict__:
            del module.__dict__[_ATTR]
            module.__dict__.pop("forward", None)
    return model


def _distributed_wrapper(model: torch.nn.Module) -> str | None:
    """What makes ``model`` a data-parallel model, in words, or None."""
    if not torch.distributed.is_available():
        return None
    # lazy: torch.distributed may be absent from a torch build (is_available above)
    from torch.distributed.tensor import DTensor

    fsdp_classes: tuple[type, ...] = ()
    try:
        # lazy: FSDP may be absent from this torch (the ImportError below)
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

        fsdp_classes = (FSDPModule, FullyShardedDataParallel)
    except ImportError:  # a torch without FSDP2: DTensor parameters still tell
        pass
    for name, module in model.named_modules():
        where = f"its submodule {name!r}" if name else "the model"
        if isinstance(module, DistributedDataParallel):
            return f"{where} is a DistributedDataParallel"
        if fsdp_classes and isinstance(module, fsdp_classes):
            return f"{where} is managed by FSDP ({type(module).__name__})"
    for name, p in model.named_parameters():
        if isinstance(p, DTensor):
            return f"its parameter {name!r} is a DTensor (sharded, e.g. by fully_shard)"
    return None


def refuse_distributed(model: torch.nn.Module, what: str) -> None:
    """``ValueError`` when ``model`` is already wrapped for data parallelism: a
    ``DistributedDataParallel`` (itself or a submodule), a module ``fully_shard`` or FSDP
    manages, or one with ``DTensor`` parameters.

    Why: profiling runs each segment's backward several times in isolation, which DDP's
    gradient hooks refuse ("marked as ready twice") and sharded parameters cannot be
    compared or copied as plain tensors. Applied first, stateaware lives inside each
    segment's ``forward`` and DDP/FSDP wrap it as any module; that trains as eager does.
    ``what`` names the caller (``"profile"``, ``"apply"``, ``"wrap"``) for the message.
    """
    cause = _distributed_wrapper(model)
    if cause is not None:
        raise ValueError(
            f"stateaware.auto.{what} got a model already wrapped for data parallelism: {cause}. "
            "Tip: apply stateaware first, then wrap: model, plan = auto.wrap(model, ...); "
            "model = DistributedDataParallel(model) (or fully_shard(block) per block, then fully_shard(model))."
        )
