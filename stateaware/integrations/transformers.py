"""Hugging Face transformers: our transactional checkpoint as the model's own layer checkpoint.

transformers checkpoints a model's repeated blocks itself. Each ``GradientCheckpointingLayer``
(a decoder or encoder layer) whose ``gradient_checkpointing`` flag is set runs, in training
with gradients enabled, as ``layer._gradient_checkpointing_func(partial(forward, layer,
**kwargs), *args)`` — after turning its key/value cache off (``use_cache=False``,
``cache=None``), since a cache written in the forward would be written again by the
replay. ``enable`` goes through that door: HF's ``activation_checkpointing_enable`` (or
``gradient_checkpointing_enable``) sets the flags and the input-gradient hook as always,
then every module's ``_gradient_checkpointing_func`` becomes ours
(``stateaware.torch_replay.checkpoint``) and, with a ``budget``, only the layers the
planner chose keep their flag.

What each checkpointed layer declares as its state:

* ``state="auto"`` with a ``budget`` (or ``example_inputs``): the state
  ``stateaware.auto``'s discovery found the layer writing, preserved as the plan's option
  says (``whole``, ``region`` or ``offload``);
* ``state="auto"`` without inputs to trace: the layer module itself (its buffers, plain
  tensor attributes and Python numbers, preserved whole) — nothing to trace, so the
  whole module is declared; undeclared writes elsewhere still raise ``UndeclaredStateError``;
* ``state=[...]`` (the layers' tensors or submodules): checked against discovery when
  profiling, declared by every checkpointed layer otherwise; ``state=[]`` declares
  nothing (a layer that writes state then raises ``UndeclaredStateError``).

Later calls of ``model.activation_checkpointing_enable()`` / ``gradient_checkpointing_enable()``
(``Trainer`` makes one when ``activation_checkpointing``/``gradient_checkpointing`` is on)
keep our function and layer choice instead of replacing them, and refuse options we
cannot honour (``use_reentrant=True``, ``every_n_layers``, ``offload``); the ``*_disable``
methods undo ``enable``, as ``disable`` does.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import stateaware.auto as auto
from stateaware.auto.discover import StateEntry, trace
from stateaware.auto.fit import DEFAULT_PLANNER
from stateaware.auto.model_snapshot import ModelSnapshot
from stateaware.auto.profiler import check_arguments, profile
from stateaware.auto.progress import progress_line
from stateaware.auto.segment import relative, run_segment
from stateaware.auto.wrapper import card_segments
from stateaware.planner import card_from_dict
from stateaware.planner.budget import parse_budget_text
from stateaware.torch_replay import checkpoint, transaction

__all__ = ["enable", "disable", "Enabled"]

_ATTR = "_stateaware_layer"  # the layer's plan, plain data in the module's __dict__
_GUARDED = (
    "activation_checkpointing_enable",
    "gradient_checkpointing_enable",
    "activation_checkpointing_disable",
    "gradient_checkpointing_disable",
)
_ENABLED = "_stateaware_enabled"


@dataclass(frozen=True)
class Enabled:
    """What ``enable`` did: every ``GradientCheckpointingLayer`` of the model (qualified
    names, in module order), the option each runs under (``"eager"``: not checkpointed;
    ``"whole"``, ``"region"``, ``"offload"``: our checkpoint, state preserved so), and
    the planner's ``AutoPlan`` when a ``budget`` was given (else None)."""

    layers: tuple[str, ...]
    options: tuple[str, ...]
    plan: Any = None

    @property
    def checkpointed(self) -> tuple[str, ...]:
        """The layers our checkpoint runs (the option is not ``"eager"``)."""
        return tuple(n for n, o in zip(self.layers, self.options, strict=True) if o != "eager")


@dataclass(frozen=True)
class _LayerPlan:
    option: str
    # (name relative to the layer, entry) pairs discovered by stateaware.auto, or None:
    # declare the items of `declared` (None: the layer itself; () declares nothing)
    state: tuple[tuple[str, StateEntry], ...] | None
    declared: tuple[Any, ...] | None = None


def _layer_of(function: Any) -> torch.nn.Module | None:
    """The module HF's ``partial(forward, layer, **kwargs)`` (or a bound method) runs."""
    if isinstance(function, functools.partial) and function.args and isinstance(function.args[0], torch.nn.Module):
        return function.args[0]
    owner = getattr(function, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        return owner
    return function if isinstance(function, torch.nn.Module) else None


def _checkpoint_layer(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Our ``_gradient_checkpointing_func``: the layer's call under its plan."""
    if kwargs.pop("use_reentrant", False):
        raise ValueError(
            "stateaware's layer checkpoint got use_reentrant=True; our checkpoint is non-reentrant only. "
            "Tip: drop use_reentrant from gradient_checkpointing_kwargs."
        )
    layer = _layer_of(function)
    plan = None if layer is None else layer.__dict__.get(_ATTR)
    if plan is not None and plan.state is not None:
        return run_segment(layer, function, plan.option, plan.state, args, kwargs)  # type: ignore[arg-type]
    given = None if plan is None else plan.declared
    # Nothing traced and nothing listed: the layer module itself is its state.
    declared: list[Any] = list(given) if given is not None else ([layer] if layer is not None else [])
    option = "whole" if plan is None else plan.option
    return checkpoint(transaction(function, state=declared, preserve=option), *args, **kwargs)


#: HF's layer base class, recognised by its qualified name: the model the user passes already
#: brings transformers, so this module never imports it (stateaware needs the core alone).
_LAYER_BASE = ("transformers.modeling_layers", "GradientCheckpointingLayer")


def _gc_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The model's ``GradientCheckpointingLayer`` s (qualified name, module), in module order."""
    return [
        (n, m)
        for n, m in model.named_modules()
        if any((c.__module__, c.__qualname__) == _LAYER_BASE for c in type(m).__mro__)
    ]


class _Call(torch.nn.Module):
    """``model(**dict(zip(keys, values)), **fixed)``: a Hugging Face call as positional inputs
    (what ``stateaware.auto.profile`` takes); the model is the submodule ``m``."""

    def __init__(self, model: torch.nn.Module, keys: Sequence[str], fixed: dict[str, Any]) -> None:
        super().__init__()
        self.m = model
        self.keys = list(keys)
        self.fixed = dict(fixed)

    def forward(self, *values: Any) -> Any:
        return self.m(**dict(zip(self.keys, values, strict=True)), **self.fixed)


def _resolve(model: torch.nn.Module, state: Sequence[Any], prefix: str) -> list[Any]:
    """Explicit state items with each string name resolved (to a submodule, parameter or buffer)
    or, for profiling the ``_Call`` wrapper, prefixed."""
    out: list[Any] = []
    for item in state:
        if isinstance(item, str):
            out.append(prefix + item if prefix else _named(model, item))
        else:
            out.append(item)
    return out


def _named(model: torch.nn.Module, name: str) -> Any:
    for get in (model.get_submodule, model.get_parameter, model.get_buffer):
        try:
            return get(name)
        except (AttributeError, KeyError):
            continue
    raise ValueError(f"state names {name!r}, which is no submodule, parameter or buffer of {type(model).__name__}")


def _unprefixed(card: Any) -> Any:
    """``card`` (profiled through ``_Call``, names under ``m.``) naming the model's own modules."""
    doc = card.to_dict()
    found = dict(doc["provenance"]["auto"])  # a copy: ``card`` keeps its own names
    doc["provenance"] = {**doc["provenance"], "auto": found}
    found["segments"] = [n.removeprefix("m.") for n in found["segments"]]
    found["state"] = [[{**e, "name": e["name"].removeprefix("m.")} for e in entries] for entries in found["state"]]
    found["eager_only"] = {k.removeprefix("m."): v for k, v in found.get("eager_only", {}).items()}
    return card_from_dict(doc)


def _set_layers(model: torch.nn.Module, enabled: Enabled) -> None:
    """Our function on every module HF checkpoints through; flags as ``enabled`` chose."""
    chosen = dict(zip(enabled.layers, enabled.options, strict=True))
    for name, module in model.named_modules():
        if name in chosen:
            module.__dict__["gradient_checkpointing"] = chosen[name] != "eager"
            module.__dict__["_gradient_checkpointing_func"] = _checkpoint_layer
        elif hasattr(module, "gradient_checkpointing"):
            # A model-level flag (GPT2Model turns its layers' cache off under it); its function,
            # if an older modeling file calls it, runs ours declaring the layer it is given.
            module.__dict__["_gradient_checkpointing_func"] = _checkpoint_layer


def _guard(model: torch.nn.Module, method: str) -> Callable[..., Any]:
    def enable_again(
        self: torch.nn.Module,
        activation_checkpointing_kwargs: dict[str, Any] | None = None,
        every_n_layers: int = 1,
        offload: bool = False,
        **kwargs: Any,
    ) -> None:
        given = dict(activation_checkpointing_kwargs or kwargs.pop("gradient_checkpointing_kwargs", None) or {})
        refused = {k: v for k, v in given.items() if not (k == "use_reentrant" and not v)}
        if every_n_layers != 1:
            refused["every_n_layers"] = every_n_layers
        if offload:
            refused["offload"] = offload
        refused.update(kwargs)
        if refused:
            raise ValueError(
                f"{type(self).__name__}.{method}({', '.join(f'{k}={v!r}' for k, v in refused.items())}): "
                "stateaware.integrations.transformers.enable already chose this model's checkpoint function and "
                "layers, and these options would change them. Tip: drop them (a Trainer's "
                "gradient_checkpointing_kwargs included) to keep stateaware's, or call "
                "stateaware.integrations.transformers.disable(model) first to use Hugging Face's."
            )
        _set_layers(self, self.__dict__[_ENABLED])

    def disable_again(self: torch.nn.Module) -> None:
        disable(self)

    return enable_again if method.endswith("_enable") else disable_again


def enable(
    model: torch.nn.Module,
    *,
    budget: int | str | None = None,
    state: str | Sequence[Any] = "auto",
    example_inputs: dict[str, Any] | None = None,
    planner: str = DEFAULT_PLANNER,
    repeats: int = 3,
    progress: bool | None = None,
) -> Enabled:
    """Checkpoint ``model``'s ``GradientCheckpointingLayer`` s with our transactional checkpoint.

    ``model`` is a transformers ``PreTrainedModel`` that supports gradient checkpointing.
    Without ``budget`` every layer is checkpointed (as HF's ``gradient_checkpointing_enable``
    does). With ``budget`` (bytes, ``"8GiB"`` or ``"50%"``, as ``stateaware.auto.plan``),
    each layer is profiled as a segment by ``stateaware.auto`` on ``example_inputs`` (the
    model's keyword arguments, e.g. ``{"input_ids": ids, "labels": ids}``; default
    ``model.dummy_inputs``, a 3×5 batch, where only a relative budget means anything),
    called with ``use_cache=False``, and only the layers the planner chose are checkpointed.
    ``state``: see the module docstring; ``repeats``: timed runs per option when
    profiling; ``progress``: one line on stderr counting profiling's and the budget loop's
    measurements, with an ETA (None: only when stderr is a terminal; False: never). The
    model's parameters, buffers and RNG state are left as they were by profiling. Returns
    an ``Enabled`` (layers, options, plan).

    As with HF's own checkpointing, only training calls (``model.train()``, gradients
    enabled) checkpoint, and a checkpointed layer runs without its key/value cache.
    With a budget the layers are chosen by ``stateaware.auto``'s budget loop (each choice
    measured for one step on the example inputs; ``stateaware.auto.fit``): ``Enabled.plan``
    says what was measured, its card names the model's own layers. ``ValueError`` for a
    model without such layers; ``stateaware.auto.fit.BudgetNotKept`` (a ``ValueError``)
    for a budget no plan keeps.
    """
    hf_enable = getattr(type(model), "activation_checkpointing_enable", None) or getattr(
        type(model), "gradient_checkpointing_enable", None
    )
    layers = _gc_layers(model)
    inner = getattr(model, "module", None)  # DistributedDataParallel, DataParallel, FSDP1 hold it there
    if hf_enable is None and isinstance(inner, torch.nn.Module) and _gc_layers(inner):
        raise ValueError(
            f"{type(model).__name__} wraps the {type(inner).__name__}; stateaware.integrations.transformers.enable "
            f"needs the transformers model itself. Tip: enable the wrapped model, enable({type(model).__name__}"
            ".module, ...), and keep training through the wrapper (or call enable before wrapping)."
        )
    if hf_enable is None or not getattr(model, "supports_gradient_checkpointing", False) or not layers:
        raise ValueError(
            f"{type(model).__name__} has no Hugging Face gradient checkpointing (supports_gradient_checkpointing "
            "and GradientCheckpointingLayer blocks); stateaware.integrations.transformers.enable needs a "
            "transformers PreTrainedModel that has them. Tip: for any other module use stateaware.auto.wrap."
        )
    if not (state == "auto" or (not isinstance(state, str) and isinstance(state, Sequence))):
        raise ValueError(f"state={state!r}; valid values are 'auto' or a list of the model's tensors or submodules")
    if budget is not None:  # a misread budget costs no profiling and changes nothing
        parse_budget_text(budget, field="budget", warn=False)
    disable(model)  # a second enable starts afresh
    for module in model.modules():  # profiling must see every layer run eagerly (HF's own flags too)
        if hasattr(module, "gradient_checkpointing"):
            module.__dict__["gradient_checkpointing"] = False
    names = [n for n, _ in layers]
    plans: dict[str, _LayerPlan] = {}
    chosen = None
    declared = tuple(_resolve(model, state, "")) if state != "auto" else None
    if budget is not None or example_inputs is not None:
        dummy: dict[str, Any] = getattr(model, "dummy_inputs", {})
        given = dict(example_inputs if example_inputs is not None else dummy)
        params = inspect.signature(model.forward).parameters
        fixed = {"use_cache": False} if "use_cache" in params and "use_cache" not in given else {}
        call = _Call(model, list(given), fixed)
        inputs = tuple(given.values())
        segments = [f"m.{n}" for n in names]
        if budget is not None:
            line, _ = progress_line(progress, 0, "stateaware.auto")
            try:
                card = profile(
                    call,
                    inputs,
                    segments=segments,
                    state=state if state == "auto" else _resolve(model, state, "m."),
                    repeats=repeats,
                    progress=line,
                )
                # BudgetNotKept: nothing fits
                measured = auto.fit_applied(call, inputs, card, budget, planner, progress=line)
            finally:
                line.close()
            chosen = dataclasses.replace(measured, card=_unprefixed(card))
            found_names, found_state = card_segments(card)
            options = list(chosen.policy)
        else:
            snapshot = ModelSnapshot(call, rng=True)
            try:
                found = trace(call, inputs, segments)
            finally:
                snapshot.restore()
            for segment, (args, kwargs) in zip(found.names, found.inputs, strict=True):
                check_arguments(segment, args, kwargs)
            found_names, found_state = found.names, found.state
            options = ["whole"] * len(found_names)
        for segment, option, entries in zip(found_names, options, found_state, strict=True):
            pairs = tuple((relative(segment, e.name), e) for e in entries)
            plans[segment[2:]] = _LayerPlan(option, pairs)
    else:
        plans = {n: _LayerPlan("whole", None, declared) for n in names}
    hf_enable(model, {"use_reentrant": False})  # HF's flags and input-gradient hook, as HF sets them
    modules = dict(layers)
    for name in names:
        modules[name].__dict__[_ATTR] = plans[name]
    enabled = Enabled(tuple(names), tuple(plans[n].option for n in names), chosen)
    model.__dict__[_ENABLED] = enabled
    _set_layers(model, enabled)
    for method in _GUARDED:
        if hasattr(type(model), method):  # instance attributes: HF's own later calls reach them
            model.__dict__[method] = types.MethodType(_guard(model, method), model)
    return enabled


def disable(model: torch.nn.Module) -> torch.nn.Module:
    """Undo ``enable``: no layer is checkpointed and HF's own methods are HF's again; returns ``model``.

    A model ``enable`` never touched is left as it is.
    """
    if _ENABLED not in model.__dict__:
        return model
    for method in _GUARDED:
        model.__dict__.pop(method, None)
    del model.__dict__[_ENABLED]
    for module in model.modules():
        module.__dict__.pop(_ATTR, None)
    hf_disable = getattr(type(model), "activation_checkpointing_disable", None) or getattr(
        type(model), "gradient_checkpointing_disable", None
    )
    if hf_disable is not None:
        hf_disable(model)
    return model
