"""What a segment's original forward touched: the tensors and generators it read or wrote.

Rule 6 (NOTE [ Replay transaction ] in ``checkpoint``) needs, per segment, the state
that existed before the segment and that the segment used. Walking everything the
function can reach (every parameter and buffer of a model, on every call) costs
O(model) per call and watches tensors the segment never used; instead the forward runs
under ``Touched``, a ``TorchFunctionMode`` that records, for every torch call,

* each tensor argument not made by the segment itself, with its version counter at its
  first use (before the call that may write it) — the segment's *pre-existing* inputs:
  arguments, closure tensors, parameters, buffers, whatever the call reached;
* each tensor the segment made (the calls' outputs, inside whatever structure a call
  returns them in: NOTE [ The segment's own tensors ]), so that in-place writes to the
  segment's own temporaries are not mistaken for state writes;
* ``.data`` aliases of pre-existing tensors (``param.data.mul_()`` writes its owner
  through an alias with its own version counter);
* running statistics given to a training-mode batch/instance norm (fused kernels write
  them without bumping a version counter), and those that no other call touched
  (``stat_only``: the forward's output cannot depend on them; NOTE [ Running statistics
  kept by no snapshot ] in ``running_stats``);
* explicit generators (``generator=g``) with their state at first use;
* buffers (re)registered on a module while the forward runs (``self.mem = new``), through
  PyTorch's global buffer-registration hook.

A metadata query (``.shape``, ``.dtype``, ``.device``, ...) is not a read. The cost is
one Python call per torch call of the forward, independent of the model's size; the
replay does not run under it. Limits: a tensor reached only by C++ code without passing
through a torch call (none in PyTorch's own modules) is not seen.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode, _get_current_function_mode, _pop_mode_temporarily

__all__ = ["Reads", "Touched", "rebind_mark", "rebound_since", "opaque_call"]

_T = torch._C.TensorBase
_METADATA = frozenset(
    [
        getattr(_T, n)
        for n in (
            "dim",
            "size",
            "stride",
            "numel",
            "is_contiguous",
            "element_size",
            "data_ptr",
            "storage_offset",
            "is_floating_point",
            "is_complex",
            "__len__",
            "get_device",
            "nelement",
            "ndimension",
        )
    ]
    + [
        _T.__dict__[n].__get__
        for n in (
            "shape",
            "dtype",
            "device",
            "ndim",
            "requires_grad",
            "is_cuda",
            "layout",
            "grad_fn",
            "is_leaf",
            "_version",
            "is_sparse",
            "is_meta",
            "itemsize",
            "nbytes",
            "names",
            "is_quantized",
            "is_nested",
        )
        if n in _T.__dict__
    ]
)
_DATA_GET = _T.__dict__["data"].__get__
# Calls that touch no tensor data: run without recording.
_PASS = frozenset(
    [
        torch._C._set_grad_enabled,
        torch.is_grad_enabled,
        torch._C._get_tracing_state,
        torch.is_autocast_enabled,
        torch.get_autocast_dtype,
    ]
)
_SKIP = _METADATA | _PASS
_NO_KWARGS: dict = {}
# Calls that write their running-statistics arguments in training mode without a version bump.
_STATS = {
    torch.nn.functional.batch_norm: (1, 2, "training", 5),
    torch.batch_norm: (3, 4, None, 5),
    torch.nn.functional.instance_norm: (1, 2, "use_input_stats", 5),
    torch.instance_norm: (3, 4, None, 5),
}
_STAT_NAMES = {
    torch.nn.functional.batch_norm: ("running_mean", "running_var"),
    torch.batch_norm: ("running_mean", "running_var"),
    torch.nn.functional.instance_norm: ("running_mean", "running_var"),
    torch.instance_norm: ("running_mean", "running_var"),
}


_active = threading.local()  # .stack: the Touched recorders running on this thread


# Every buffer rebinding, in or outside a segment: (sequence number, id of the tensor the
# buffer held before, "Class.name"). Rule 6b checks the ones after a segment's forward
# against what it read (``rebound_since``); bounded, so a replay after more rebindings
# than it holds sees only the latest (documented on ``checkpoint``).
_REBIND_LOG_SIZE = 4096
_rebinds: collections.deque[tuple[int, int, str]] = collections.deque(maxlen=_REBIND_LOG_SIZE)
_rebind_seq = itertools.count(1)
_last_rebind = [0]


def _buffer_registered(module: torch.nn.Module, name: str, value) -> None:
    # The hook runs before torch stores the new value: `_buffers` still holds the old one.
    old = module.__dict__.get("_buffers", {}).get(name)
    if old is value and old is not None:
        # Bound again to the tensor it holds (spectral_norm's `self._u = normalize(..., out=self._u)`):
        # nothing is rebound; a write through `out=` shows in the version counter.
        return
    for recorder in getattr(_active, "stack", ()):
        recorder.rebound.append((module, name))
    if old is not None and old is not value:
        seq = next(_rebind_seq)
        _last_rebind[0] = seq
        _rebinds.append((seq, id(old), f"{type(module).__name__}.{name}"))


def rebind_mark() -> int:
    """The sequence number of the latest buffer rebinding (a forward keeps it; O(1))."""
    return _last_rebind[0]


def rebound_since(mark: int, ids: set[int]) -> list[str]:
    """Names of the buffers rebound after ``mark`` whose previous tensor is in ``ids``."""
    if _last_rebind[0] == mark:
        return []
    return [name for seq, old, name in list(_rebinds) if seq > mark and old in ids]


torch.nn.modules.module.register_module_buffer_registration_hook(_buffer_registered)


class Reads:
    """What one forward touched, as Rule 6 consumes it (``checkpoint._check_forward``).

    ``Touched`` fills it by recording every torch call; ``_learned_reads.Witness``
    by re-reading the version counters of a set learned on an earlier call. While
    entered, buffers (re)registered on any module are collected in ``rebound``.
    """

    def __init__(self) -> None:
        self.tensors: dict[int, tuple[torch.Tensor, int]] = {}  # id -> (tensor, version at first use)
        self.made: set[int] = set()
        self.data_aliases: list[tuple[torch.Tensor, int, torch.Tensor]] = []  # (alias, its version, owner)
        self.stat_writes: dict[int, torch.Tensor] = {}
        # running statistics that only training-mode norms used, as statistics, and no other
        # call touched: id -> (tensor, version at first use); they move to ``tensors`` at
        # their first other use
        self.stat_only: dict[int, tuple[torch.Tensor, int]] = {}
        # a learned call's: the versions its norms are known to advance each of ``stat_only`` by
        self.stat_bumps: dict[int, int] = {}
        self.generators: dict[int, tuple[torch.Generator, torch.Tensor]] = {}
        self.rebound: list[tuple[torch.nn.Module, str]] = []
        # declared tensors a learned profile says this forward writes without a version bump
        self.quiet: list[torch.Tensor] = []
        # whether some of ``silent`` concerns undeclared state (set by the checkpoint's Rule 6a
        # check, which knows what is declared; None: not checked, taken as yes)
        self.quiet_undeclared: bool | None = None
        # host generators (``_host_rng``) to capture: None = all (a recording learns which moved)
        self.host_rng: tuple[str, ...] | None = None

    def __enter__(self):
        if not hasattr(_active, "stack"):
            _active.stack = []
        _active.stack.append(self)
        return self

    def __exit__(self, *exc):
        _active.stack.remove(self)
        return False

    @property
    def silent(self) -> bool:
        """Whether the forward did something a version counter does not show (module doc)."""
        return bool(self.data_aliases or self.stat_writes or self.generators or self.rebound)

    def written(self) -> list[tuple[torch.Tensor, str]]:
        """Pre-existing tensors the forward wrote, each with how: ``(tensor, how)``."""
        out: dict[int, tuple[torch.Tensor, str]] = {}
        for t, version in self.tensors.values():
            if t._version != version:
                out[id(t)] = (t, f"version {version} -> {t._version}")
        for t in self.stat_writes.values():
            out.setdefault(id(t), (t, "running statistic updated by a training-mode normalisation"))
        for alias, version, owner in self.data_aliases:
            if alias._version != version:
                out.setdefault(id(owner), (owner, "written through its .data alias"))
        return list(out.values())

    def moved_generators(self) -> list[torch.Generator]:
        return [g for g, state in self.generators.values() if not torch.equal(g.get_state(), state)]


class Touched(Reads, TorchFunctionMode):
    """Records the pre-existing tensors and generators a forward touches (module doc)."""

    def __init__(self) -> None:
        Reads.__init__(self)
        TorchFunctionMode.__init__(self)
        self._statistics: frozenset[int] | set[int] = frozenset()  # the current norm call's statistics

    def __enter__(self):
        Reads.__enter__(self)
        return TorchFunctionMode.__enter__(self)

    def __exit__(self, *exc):
        Reads.__exit__(self)
        return TorchFunctionMode.__exit__(self, *exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = _NO_KWARGS
        if func in _SKIP:
            return func(*args, **kwargs)
        if func in _STATS:
            self._statistics = self._stats(func, _STATS[func], args, kwargs)
        tensors, made = self.tensors, self.made
        for a in args:
            i = id(a)
            if i in tensors or i in made:
                continue
            if isinstance(a, torch.Tensor):
                self._first_use(a)
            elif type(a) is list or type(a) is tuple:
                for b in a:
                    if isinstance(b, torch.Tensor) and id(b) not in made and id(b) not in tensors:
                        self._first_use(b)
        if kwargs:
            for v in kwargs.values():
                if isinstance(v, torch.Tensor):
                    if id(v) not in made and id(v) not in tensors:
                        self._first_use(v)
                elif type(v) is tuple or type(v) is list:  # out=(values, indices)
                    for b in v:
                        if isinstance(b, torch.Tensor) and id(b) not in made and id(b) not in tensors:
                            self._first_use(b)
                elif type(v) is torch.Generator and id(v) not in self.generators:
                    self.generators[id(v)] = (v, v.get_state())
        if self._statistics:
            self._statistics = frozenset()
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            i = id(out)
            if i not in tensors:
                made.add(i)
                if func == _DATA_GET and id(args[0]) in tensors:
                    self.data_aliases.append((out, out._version, args[0]))
        elif out is not None:
            self._made_within(out)
        return out

    def _first_use(self, t: torch.Tensor) -> None:
        """``t`` reached a torch call and was not seen before: pre-existing state, unless it
        views a tensor the segment made (an alias made by code no torch call saw)."""
        i = id(t)
        if i in self.stat_only:
            if i not in self._statistics:  # a use other than as a norm's statistic: a read like any
                self.tensors[i] = self.stat_only.pop(i)
            return
        base = t._base
        if base is not None and id(base) in self.made:
            self.made.add(id(t))
        else:
            self.tensors[id(t)] = (t, t._version)

    # NOTE [ The segment's own tensors ]
    # A tensor the segment allocates, and that nothing outside it held before, is never
    # state: writing it in place (Mixtral's router divides its top-k weights in place)
    # changes nothing a replay reads. Calls return their tensors in structures, not only
    # bare: ``torch.return_types`` structseqs (``topk``, ``sort``, ``max(dim=)``, ``mode``:
    # tuple subclasses, unpacked or reached later through ``.values``), tuples and lists
    # (``chunk``, ``unbind``, ``split``) and dicts; all are walked, nested. A view of an own
    # tensor that reaches a torch call without coming out of one is own too (``_first_use``).
    def _made_within(self, out) -> None:
        """Mark every tensor in a call's structured result as the segment's own."""
        if isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor):
                    if id(o) not in self.tensors:
                        self.made.add(id(o))
                elif isinstance(o, (tuple, list, dict)):
                    self._made_within(o)
        elif isinstance(out, dict):
            self._made_within(list(out.values()))

    def _stats(self, func, where, args: tuple, kwargs: dict) -> set[int]:
        """Record a norm call's running statistics as written (training mode); return those
        used here only as statistics so far (``stat_only``)."""
        mean_at, var_at, flag, flag_at = where
        statistics: set[int] = set()
        if flag is None:
            training = args[flag_at] if len(args) > flag_at else False
        else:
            training = kwargs.get(flag, args[flag_at] if len(args) > flag_at else flag == "use_input_stats")
        if not training:
            return statistics
        names = _STAT_NAMES[func]
        for at, name in zip((mean_at, var_at), names, strict=True):
            t = args[at] if len(args) > at else kwargs.get(name)
            if isinstance(t, torch.Tensor) and id(t) not in self.made:
                i = id(t)
                self.stat_writes[i] = t
                if i in self.tensors:  # an earlier call read it: not a statistic only
                    continue
                self.stat_only.setdefault(i, (t, t._version))
                statistics.add(i)
        return statistics


def opaque_call(
    fn: Callable[..., Any], reaches: Callable[[], Iterable[torch.Tensor]], *args: Any, **kwargs: Any
) -> Any:
    """``fn(*args, **kwargs)``, recorded by the innermost active ``Touched`` as one torch call.

    For a compiled region (``torch.compile``): recorded op by op, Dynamo would trace the
    mode's Python and fall back to eager (another kernel than the compiled one, and a
    graph per recorded call). Instead the mode steps aside for the call and records it
    whole: the tensor arguments and ``reaches()`` (every tensor the region can reach, e.g.
    its module's parameters, buffers and tensor attributes) as read, with their versions
    before the call, and its outputs as made. A compiled graph writes its inputs in place
    through ``copy_`` (or in-kernel with a version bump), so every write shows in a version
    counter and Rule 6 holds. Limit: a tensor ``fn`` reaches outside ``args`` and
    ``reaches()`` (a global) is not seen. Without an active recorder it is a plain call.
    """
    stack = getattr(_active, "stack", None)
    mode = stack[-1] if stack else None
    if not isinstance(mode, Touched) or _get_current_function_mode() is not mode:
        return fn(*args, **kwargs)
    tensors, made = mode.tensors, mode.made
    for t in itertools.chain(reaches(), pytree.tree_leaves((args, kwargs))):
        if isinstance(t, torch.Tensor) and id(t) not in tensors and id(t) not in made:
            # reached by the region: read, even if a norm used it as a statistic only so far
            tensors[id(t)] = mode.stat_only.pop(id(t)) if id(t) in mode.stat_only else (t, t._version)
    with _pop_mode_temporarily():
        out = fn(*args, **kwargs)
    for o in pytree.tree_leaves(out):
        if isinstance(o, torch.Tensor) and id(o) not in tensors:
            made.add(id(o))
    return out
