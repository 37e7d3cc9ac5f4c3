"""``profile``: measure a user's model into a planner card (paper eq. 3), as the cost runtime does.

Per segment and option (``eager``, ``whole``, ``region`` where some state is written in
rows, ``offload`` where the segment has state tensors, ``selective``: the replay keeping
the expensive ops' outputs, ``stateaware.auto.segment``), the segment runs in isolation on
the input the model's own forward gave it and on the state it had at the step's start,
and the pass measures, exactly as ``stateaware.cost_runtime.profile`` defines them:

``retained_bytes`` (r)  bytes still allocated after the segment's forward (its output, what
                        it saved for backward, its preserved state);
``temp_bytes`` (q)      the peak above that during forward and backward (recompute,
                        snapshot copies, journal undo/redo, input gradients);
``ms`` (c)              the least wall time of forward plus backward over ``repeats`` runs.

``state_*`` parts are each replay option's excess over a replay that preserves nothing
(``torch.utils.checkpoint``), which is what the state-agnostic planner omits;
``selective`` preserves by the same whole snapshot as ``whole`` and shares its parts. Bytes come
from the CUDA allocator or the CPU profiler's raw memory records
(``cost_runtime.measure.allocated_window``), never from shapes. The backward of a segment's
output is driven by a constant gradient ``1/numel`` (the loss is the user's, not ours).

``persistent_bytes`` (P) counts the model's parameters, buffers and tensor attributes,
one gradient per parameter that requires one (kept allocated during profiling, as
after a training step), and the example inputs. Optimizer state is not part of the
model and not counted.

Each segment runs, for every measurement, on the arguments the traced forward passed it:
tensors (fresh leaves whose bytes and ``.grad`` are put back before every run), containers
of them and values no forward can change (``IMMUTABLE``). Any other object — a key/value
cache, a list the segment appends to, an object of the user's — would be changed by each
run (and hold the traced forward's graph), so ``profile`` refuses it, naming the argument.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from stateaware.auto.compiled import compile_options, compiled_option, random_op, segments_compiled
from stateaware.auto.discover import StateEntry, explicit_names, leaf_copy, map_tensors, resolve_segments, trace
from stateaware.auto.errors import model_step_error
from stateaware.auto.model_snapshot import ModelSnapshot
from stateaware.auto.progress import Progress, progress_line
from stateaware.auto.segment import relative, run_segment
from stateaware.auto.wrapper import apply_policy, original_forward, remove
from stateaware.cost_runtime.measure import allocated_window, live_bytes, synchronize
from stateaware.cost_runtime.profile import add_state_parts, measurement_provenance
from stateaware.planner import card_from_dict
from stateaware.torch_replay import UndeclaredStateError
from stateaware.torch_replay.offload import host_is_device

__all__ = [
    "profile",
    "persistent_bytes",
    "step_peak_bytes",
    "measure_step",
    "backward_of",
    "IMMUTABLE",
    "check_arguments",
    "floor_policy",
]

#: Argument values besides tensors and containers of them that profiling may pass to a
#: segment again and again: no forward can change them. Anything else is refused
#: (``check_arguments``): an allow-list, because a mutable object can be of any type.
IMMUTABLE: tuple[type, ...] = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(Ellipsis),
    slice,
    range,
    enum.Enum,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


def _model_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    out = [*model.parameters(), *model.buffers()]
    out += [t for m in model.modules() for t in vars(m).values() if isinstance(t, torch.Tensor)]
    return out


def _flat_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat_tensors(v)]
    return []


def persistent_bytes(model: torch.nn.Module, example_inputs: Sequence[Any]) -> int:
    """P: distinct storages of the model's tensors and the inputs, plus one gradient per
    parameter that requires grad (see the module docstring)."""
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return live_bytes(_model_tensors(model) + _flat_tensors(tuple(example_inputs))) + grads


def backward_of(output: Any) -> None:
    """Backward of every floating output that requires grad, with gradient ``1/numel``."""
    outs = [t for t in _flat_tensors(output) if t.requires_grad]
    if outs:
        torch.autograd.backward(outs, [torch.full_like(t, 1.0 / max(t.numel(), 1)) for t in outs])


def _grads_allocated(model: torch.nn.Module) -> None:
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def step_peak_bytes(
    model: torch.nn.Module, example_inputs: Sequence[Any], step: Callable[[], None] | None = None
) -> int:
    """The measured peak of one training step's forward and backward: bytes live at its
    start (``persistent_bytes``, gradients allocated) plus the window peak; on CUDA the
    allocator's peak. ``step`` defaults to ``backward_of(model(*example_inputs))``. On a CPU
    the step runs ``WINDOWS`` times and the least peak is kept (see ``WINDOWS``). The
    model's state advances as the steps advance it; the caller restores it if needed."""
    _grads_allocated(model)
    device = _device(model, example_inputs)
    run = step or (lambda: backward_of(model(*example_inputs)))
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        run()
        synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    start = persistent_bytes(model, example_inputs)
    peak, _ = _least_window(run, lambda: None, device)
    return start + peak


def measure_step(model: torch.nn.Module, inputs: tuple[Any, ...], *, first: bool = False) -> int:
    """``step_peak_bytes`` of ``backward_of(model(*inputs))``, each window from the inputs as
    given, leaving the model (bytes, gradients, attributes), the RNG states, the inputs and
    their ``.grad`` as they were: what profiling and the budget loop measure.

    ``first``: this is the first run of the model in plain eager (profiling's all-eager
    step), so an exception its forward or backward raises is the model's own and is
    raised as ``ModelStepError`` from it (NOTE [ The model's own failure ] in
    ``stateaware.auto.errors``); stateaware's own exceptions pass through."""
    snapshot = ModelSnapshot(model, rng=True)
    with _inputs_kept(inputs) as given:

        def step() -> None:
            _put_back(inputs, given)
            try:
                backward_of(model(*inputs))
            except Exception as error:
                if not first or type(error).__module__.startswith("stateaware."):
                    raise
                raise model_step_error(model, error) from error

        try:
            return step_peak_bytes(model, inputs, step)
        finally:
            snapshot.restore()


@contextlib.contextmanager
def _inputs_kept(inputs: tuple[Any, ...]) -> Iterator[Any]:
    """Yield ``_leaf(inputs)`` (their bytes: a forward may write its inputs in place); on
    exit put those bytes back, and each leaf input's ``.grad`` as it was."""
    given = _leaf(inputs)
    grads = [(t, t.grad, None if t.grad is None else t.grad.clone()) for t in _flat_tensors(inputs) if t.is_leaf]
    try:
        yield given
    finally:
        _put_back(inputs, given)
        for t, grad, kept in grads:  # backward accumulates into an input's .grad, in place when it can
            t.grad = grad
            if grad is not None and kept is not None:
                grad.data.copy_(kept)


def _device(model: torch.nn.Module, example_inputs: Sequence[Any]) -> torch.device:
    for t in [*model.parameters(), *model.buffers(), *_flat_tensors(tuple(example_inputs))]:
        return t.device
    return torch.device("cpu")


def _mutable_part(value: Any, where: str) -> tuple[str, Any] | None:
    """(where, object) of the first part of ``value`` that is neither a tensor, a list,
    tuple or dict, nor an ``IMMUTABLE`` value; None when there is none."""
    if isinstance(value, (torch.Tensor, *IMMUTABLE)):
        return None
    if isinstance(value, (list, tuple)):
        parts: Any = enumerate(value)
    elif isinstance(value, dict):
        parts = value.items()
    else:
        return where, value
    for key, item in parts:
        found = _mutable_part(item, f"{where}[{key!r}]")
        if found is not None:
            return found
    return None


def check_arguments(segment: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a segment's arguments that profiling could not pass again unchanged.

    ``ValueError`` naming the first argument (its position or keyword, and type) that is
    not a tensor, a list/tuple/dict of them or an ``IMMUTABLE`` value: each profiling run
    would change it (a Hugging Face ``Cache`` grows by one step per run and keeps the
    traced graph, so a later backward fails and every cost would be wrong).
    """
    named = [(f"positional argument {i}", v) for i, v in enumerate(args)]
    named += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for where, value in named:
        found = _mutable_part(value, where)
        if found is None:
            continue
        part, obj = found
        raise ValueError(
            f"segment {segment!r} receives {part}, a {type(obj).__module__}.{type(obj).__qualname__}: an object "
            "that is neither a tensor, a list/tuple/dict of tensors nor an immutable value, so each profiling run "
            "of the segment could change it (a key/value cache grows and keeps the traced graph). Tip: do not pass "
            "it to the segments while profiling — for a Hugging Face model pass use_cache=False in the call "
            "(model(..., use_cache=False); model.config.use_cache = False does not reach submodules that keep "
            "their own config, such as T5's decoder), or let stateaware.integrations.transformers.enable(model, "
            "...) checkpoint its decoder layers, which turns their cache off."
        )


def _leaf(value: Any) -> Any:
    """``value`` with each tensor a fresh leaf (a copy) that requires grad as the traced one did."""
    return map_tensors(value, leaf_copy)


def _entry(t: torch.Tensor) -> torch.Tensor:
    # A non-leaf copy of a leaf that requires grad, as the previous segment's output is: a
    # segment may write its input in place (an in-place activation), which a leaf refuses.
    return t.clone() if t.requires_grad else t


class _Rerun:
    """One segment run again and again on the inputs the traced forward gave it.

    ``reset()`` puts the segment's subtree, the RNG and the input leaves back as they were
    (the traced bytes, no ``.grad``) and makes the next run's arguments (``_entry`` of each
    leaf) before the measured window, as the real input exists before the segment runs.
    """

    def __init__(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.snapshot = ModelSnapshot(module, rng=True)
        self.traced = (args, kwargs)
        self.leaves = _leaf(self.traced)
        self.reset()

    def reset(self) -> None:
        self.snapshot.restore()
        _restore_leaves(self.leaves, self.traced)
        with torch.enable_grad():
            self.args, self.kwargs = map_tensors(self.leaves, _entry)

    def runner(self, fn: Callable[..., Any], *front: Any) -> Callable[[], Any]:
        """``fn(*front, args, kwargs)`` on the arguments of the current run."""
        return lambda: fn(*front, self.args, self.kwargs)


def _put_back(inputs: Any, saved: Any) -> None:
    """Write ``saved`` (``_leaf(inputs)`` taken before) back into the tensors of ``inputs``."""
    with torch.no_grad():
        for t, kept in zip(_flat_tensors(inputs), _flat_tensors(saved), strict=True):
            if t.shape == kept.shape and t.stride() == kept.stride():
                t.data.copy_(kept)
            else:
                t.data = kept.detach().clone()


def _restore_leaves(leaves: Any, traced: Any) -> None:
    """Put each leaf of ``_leaf(traced)`` back as ``_leaf`` made it: the traced bytes, no ``.grad``.

    A segment may write its input in place and its backward accumulates into ``.grad``;
    without this each run would start from what the previous one left.
    """
    with torch.no_grad():
        for leaf, source in zip(_flat_tensors(leaves), _flat_tensors(traced), strict=True):
            if leaf.shape == source.shape and leaf.stride() == source.stride():
                leaf.data.copy_(source)
            else:
                leaf.data = source.detach().clone()
            leaf.grad = None


def _selective_refused(option: str, error: RuntimeError) -> bool:
    """Whether ``error`` is torch's selective checkpointing refusing the segment: a kept
    output written in place afterwards (a convolution's output through an in-place ReLU)
    would be replayed with the written value, so torch raises at the replay. That segment
    is offered no ``selective`` option; running out of memory is not a refusal."""
    return (
        option == "selective"
        and not isinstance(error, (UndeclaredStateError, torch.OutOfMemoryError))
        and "selective activation checkpoint" in str(error)
    )


def _oblivious(forward, args, kwargs):
    return torch_checkpoint(lambda *a: forward(*a, **kwargs), *args, use_reentrant=False)


def _share_whole_state(selective: dict[str, Any], whole: dict[str, Any]) -> None:
    """``selective``'s ``state_*`` parts: ``whole``'s, each within its own total.

    Both preserve the segment's state by the same whole snapshot, restored around the
    same replay transaction; a second replay blind to state, under the selective policy,
    would cost one more measurement per stateful segment to find the same bytes.
    """
    for part, total in (
        ("state_retained_bytes", "retained_bytes"),
        ("state_temp_bytes", "temp_bytes"),
        ("state_ms", "ms"),
    ):
        selective[part] = type(selective[total])(min(whole.get(part, 0), selective[total]))


#: Each memory window is measured this many times and the least kept: what else the
#: process allocates meanwhile (the profiler's own buffers, another thread) only ever
#: adds bytes, and one such allocation in a segment's window would inflate its q.
WINDOWS = 2


def _least_window(fn: Callable[[], Any], reset: Callable[[], None], device: torch.device) -> tuple[int, int]:
    peaks, ends = [], []
    for _ in range(WINDOWS):
        reset()
        peak, end = allocated_window(fn, device)
        peaks.append(peak)
        ends.append(end)
    return min(peaks), min(ends)


def _measure(
    run: Callable[[], Any], reset: Callable[[], None], *, repeats: int, device: torch.device
) -> dict[str, Any]:
    box: dict[str, Any] = {}

    def forward() -> None:
        box["y"] = run()

    def clear() -> None:
        box.pop("y", None)
        reset()

    peak_f, retained = _least_window(forward, clear, device)
    box.pop("y", None)
    # Forward and backward in one window: the CPU profiler drops frees of blocks allocated
    # before its window (cost_runtime.measure NOTE), so the backward is never measured alone.
    peak_fb, _ = _least_window(lambda: backward_of(run()), reset, device)
    times = []
    for _ in range(repeats):
        reset()
        synchronize(device)
        start = time.perf_counter()
        backward_of(run())
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    reset()
    retained = max(int(retained), 0)
    return {"retained_bytes": retained, "temp_bytes": int(max(peak_f, peak_fb) - retained), "ms": float(min(times))}


def _call(
    module: torch.nn.Module, forward: Callable[..., Any], options: dict[str, Any] | None, option: str
) -> tuple[Callable[..., Any], str]:
    """The forward and ``run_segment`` option that run ``option`` on ``module``: its eager
    ``forward``, or compiled with ``options`` (``stateaware.auto.compiled.compiled_option``)."""
    return (forward, option) if options is None else compiled_option(module, options, option)


def _no_grad(forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    with torch.no_grad():
        return forward(*args, **kwargs)


def _options(entries: list[StateEntry]) -> list[str]:
    """The options profiled for a segment with state ``entries``. Compiled, ``selective``
    is the compiler's partitioner's selection (``stateaware.auto.compiled``), not ours."""
    options = ["eager", "whole"]
    if any(e.write == "rows" for e in entries):
        options.append("region")
    if any(e.kind != "python" and e.bytes for e in entries):
        options.append("offload")
    options.append("selective")
    return options


def _check_explicit(model: torch.nn.Module, names: list[str], found: list[list[StateEntry]], state: Any) -> None:
    covered = explicit_names(model, state)
    for segment, entries in zip(names, found, strict=True):
        for entry in entries:
            if entry.name not in covered:
                what = "Python attribute" if entry.kind == "python" else f"{entry.kind} ({entry.bytes} bytes)"
                raise UndeclaredStateError(
                    f"segment {segment!r} writes {entry.name!r}, a {what} not in state=[...]; a replay would "
                    f"read the written value. Tip: add it (the tensor, its module or the string {entry.name!r}) "
                    "to state, or pass state='auto'."
                )


def profile(
    model: torch.nn.Module,
    example_inputs: Sequence[Any] | Any,
    *,
    segments: Sequence[str] | None = None,
    state: str | Sequence[Any] = "auto",
    repeats: int = 3,
    compile: bool | dict[str, Any] = False,
    progress: bool | None | Progress = None,
) -> Any:
    """Measure ``model``'s segments into a ``ProfileCard`` (see the module docstring).

    ``example_inputs`` is the tuple of positional arguments of ``model`` (a lone tensor is
    taken as ``(tensor,)``). ``segments``: None for an ``nn.Sequential`` (its children), or
    the qualified names of submodules the model's own ``forward`` runs once each, in
    order. ``state="auto"`` discovers what each segment writes (``stateaware.auto.discover``);
    an explicit list (tensors, submodules or qualified names) is checked against that, and
    anything written but not listed raises ``UndeclaredStateError`` naming it.
    ``ValueError`` (``check_arguments``) when the model's forward passes a segment an
    argument profiling cannot pass again unchanged: a mutable object such as a Hugging
    Face ``Cache`` (call the model with ``use_cache=False``).

    The card's provenance ``"auto"`` holds the segment names and, per segment, its state
    entries (name, kind, bytes, whole/rows/value) — what ``apply`` declares — and
    ``eager_only``: the segments our checkpoint refuses (one that writes its own input in
    place, as an in-place activation does), which get only the ``eager`` option;
    ``selective_refused``: the segments torch's selective policy refuses (a kept output
    written in place later) and, compiled, those that draw random numbers
    (``stateaware.auto.compiled.random_op``), which get no ``selective`` option; it also says
    where offloaded snapshots live and the measured eager step peak, and ``floor_policy``
    (``floor_policy``: every segment recomputed that can be) with its measured step peak
    ``floor_step_peak_bytes``, the budget loop's second anchor. Profiling leaves no
    trace: afterwards parameters, buffers, gradients, Python attributes and the global RNG
    states are what they were, and so are the example inputs. Its first run of the model
    is the measured all-eager step, in plain eager: an exception there is the model's own
    and is raised as ``stateaware.auto.ModelStepError`` from it, with nothing changed
    (``stateaware.auto.errors``; compiled, the step is measured last and this does not apply).

    ``compile``: True or a dict of ``torch.compile`` keywords (``compile_options``) measures
    each segment compiled regionally (``stateaware.auto.compiled``), the all-eager step
    included, and records the keywords as ``provenance["auto"]["compile"]``, from which
    ``apply`` compiles; the segments' state is still discovered on the eager code.

    ``progress``: a line on stderr counting the measurements, with an ETA
    (``stateaware.auto.progress``): None shows it when stderr is a terminal, True always,
    False never; a ``Progress`` is shared (``wrap`` counts its budget loop on the same line).
    """
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    options = compile_options(compile)
    if not (state == "auto" or (not isinstance(state, str) and isinstance(state, Sequence))):
        raise ValueError(
            f"state={state!r}; valid values are 'auto' or a list of the model's tensors, submodules or qualified names"
        )
    names = resolve_segments(model, segments)
    device = _device(model, inputs)
    line, owned = progress_line(progress, 1 + (options is None), "stateaware.auto: profiling")
    snapshot = ModelSnapshot(model, rng=True)
    with _inputs_kept(inputs) as given:  # the forward may write the example inputs in place
        try:
            line.at("the model's own eager step")
            # The all-eager step first: the model's own bugs surface as its own, before any
            # of our machinery ran (NOTE [ The model's own failure ]). Compiled, it is
            # measured last, after each segment's warm-up compiled its graphs.
            eager_peak = measure_step(model, inputs, first=True) if options is None else None
            if options is None:
                line.step()
            line.at("tracing the forward for state")
            found = trace(model, inputs, names)
            line.step()
            line.add(_measurements(found.state, options is not None))
            snapshot.restore()
            _put_back(inputs, given)
            for name, (args, kwargs) in zip(found.names, found.inputs, strict=True):
                check_arguments(name, args, kwargs)
            if state != "auto":
                _check_explicit(model, found.names, found.state, state)
            segments_doc = []
            eager_only: dict[str, str] = {}  # segment -> why our checkpoint refuses it
            selective_refused: dict[str, str] = {}  # segment -> why it gets no selective option
            _grads_allocated(model)
            warmed = False
            for index, (name, entries, (args, kwargs)) in enumerate(
                zip(found.names, found.state, found.inputs, strict=True)
            ):
                counted = line.done + _segment_measurements(entries)
                where = f"segment {index + 1}/{len(found.names)} {name!r}"
                module = model.get_submodule(name)
                forward = original_forward(module)
                pairs = [(relative(name, e.name), e) for e in entries]
                rerun = _Rerun(module, args, kwargs)
                offered = _options(entries)
                if options is not None:
                    drawn = random_op(rerun.runner(_no_grad, forward))
                    rerun.reset()
                    if drawn is not None:
                        offered.remove("selective")
                        selective_refused[name] = (
                            f"it draws random numbers ({drawn}); compiled at a memory budget, the partitioner "
                            "may recompute them in backward as other numbers"
                        )
                measured = {}
                # The first calls of each path (allocator, kernels; compilation for each compiled
                # segment's graphs) are slower: discard them.
                if not warmed or options is not None:
                    for option in offered:
                        runner = rerun.runner(run_segment, module, *_call(module, forward, options, option), pairs)
                        try:
                            _measure(runner, rerun.reset, repeats=1, device=device)
                        except UndeclaredStateError:  # a refused option is found below
                            break
                        except RuntimeError as error:
                            if not _selective_refused(option, error):
                                raise
                    rerun.reset()
                    warmed = True
                for option in offered:
                    runner = rerun.runner(run_segment, module, *_call(module, forward, options, option), pairs)
                    line.at(f"{where}: {option}")
                    try:
                        measured[option] = _measure(runner, rerun.reset, repeats=repeats, device=device)
                        line.step()
                    except UndeclaredStateError as error:
                        if option == "eager":
                            raise
                        # Our checkpoint refuses this segment (it writes its own input in place, as
                        # an in-place activation does): a replay would read the written value. It
                        # runs eagerly; the card says why.
                        rerun.reset()
                        eager_only[name] = str(error).splitlines()[1].strip()
                        measured = {"eager": measured["eager"]}
                        break
                    except RuntimeError as error:
                        if not _selective_refused(option, error):
                            raise
                        rerun.reset()
                        selective_refused[name] = str(error).strip().splitlines()[0]
                if entries and len(measured) > 1:
                    line.at(f"{where}: a replay blind to state")
                    try:
                        oblivious, _ = _call(module, forward, options, "whole")
                        base = _measure(
                            rerun.runner(_oblivious, oblivious), rerun.reset, repeats=repeats, device=device
                        )
                    except Exception:  # a replay blind to state may fail outright; then no share is known
                        base = None
                    for option in measured:
                        if option not in ("eager", "selective") and base is not None:
                            add_state_parts(measured[option], base)
                    if "selective" in measured and "whole" in measured and options is None:
                        # compiled, selective replays nothing of ours: it preserves nothing
                        _share_whole_state(measured["selective"], measured["whole"])
                segments_doc.append(measured)
                line.reach(counted)  # options refused or skipped count as done
            snapshot.restore()
            if eager_peak is None:
                line.at("the model's compiled step")
                with segments_compiled(model, found.names, options):
                    eager_peak = measure_step(model, inputs)
                line.step()
            doc: dict[str, Any] = {
                "persistent_bytes": persistent_bytes(model, inputs),
                "segments": segments_doc,
                "provenance": {
                    "workload": f"auto:{type(model).__name__}",
                    **measurement_provenance(device, repeats, eager_peak),
                    "offload_memory": (
                        "host and device are the same memory (cpu): offload costs what whole costs"
                        if host_is_device(device)
                        else "pinned host memory"
                    ),
                    "auto": {
                        "segments": list(found.names),
                        "state_discovery": "auto" if state == "auto" else "explicit",
                        "state": [[e.to_dict() for e in entries] for entries in found.state],
                        "eager_only": eager_only,
                        "selective_refused": selective_refused,
                        **({} if options is None else {"compile": options}),
                    },
                },
            }
            line.at("the step with every segment recomputed")
            doc["provenance"]["auto"].update(_floor_anchor(model, inputs, card_from_dict(doc)))
            line.step()
        finally:
            snapshot.restore()
            if owned:
                line.close()
    return card_from_dict(doc)


def _measurements(state: list[list[StateEntry]], compiled: bool) -> int:
    """The measurements ``profile`` makes after its trace (the progress line's total): each
    segment's (``_segment_measurements``), the compiled step, the all-recomputed step."""
    return sum(_segment_measurements(entries) for entries in state) + compiled + 1


def _segment_measurements(entries: list[StateEntry]) -> int:
    """Each option, and a replay blind to state where the segment has state."""
    return len(_options(entries)) + bool(entries)


def floor_policy(card: Any) -> tuple[str, ...]:
    """Per segment the option that retains least (ties: the least temporary bytes): every
    segment that can be is recomputed, the last included. The card's second anchor."""
    return tuple(
        min(segment, key=lambda o: (segment[o].retained_bytes, segment[o].temp_bytes)) for segment in card.segments
    )


def _floor_anchor(model: torch.nn.Module, inputs: tuple[Any, ...], card: Any) -> dict[str, Any]:
    """``floor_policy`` and its measured step peak, for ``provenance["auto"]``.

    The budget loop fits the bytes the card does not see (``stateaware.auto.fit``) to
    measured steps. The all-eager step alone cannot tell bytes alive throughout the step
    from bytes alive only at the forward's end (a head's logits), so its first correction
    counts all of them throughout; that over-charges every plan's recompute and under-
    charges a segment kept eager last. A second anchor at the other end, every segment
    recomputed, separates the two terms before anything is planned.
    """
    policy = floor_policy(card)
    apply_policy(model, card, policy)
    try:
        peak = measure_step(model, inputs)
    finally:
        remove(model)
    return {"floor_policy": list(policy), "floor_step_peak_bytes": int(peak)}
