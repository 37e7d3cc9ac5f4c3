"""Preservation engines for declared state: whole snapshots and region journals.

An engine is created at a segment's original forward, *before* the segment runs, and
holds what a later replay needs to see the declared tensor as the forward saw it
(paper §3.1, Table 1):

``_Whole``
    one copy of the tensor's bytes (retained bytes = ``numel * element_size``). A replay
    runs on a private copy of the snapshot (one more copy, temporary) that the live
    tensor's ``.data`` points at for the replay's duration, so the live storage is never
    read or written by the replay.
``_Journal``
    the old values of the declared rows only (retained bytes = rows' bytes + the int64
    index). A replay undoes those rows in the live storage, runs, then redoes them with
    the values they held just before the replay.

Both are usable on CUDA without host synchronisation: preservation is ``clone`` or
``index_select``; recovery is ``copy``/``index_copy_``; no value is read on the host.
"""

from __future__ import annotations

import contextlib
import importlib
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

import torch
from torch.utils.weak import WeakIdKeyDictionary

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, MutableMapping

    class Engine(Protocol):
        """What ``make_engine`` returns (``_Whole``, ``_Journal``, the ``rows``, ``offload`` and ``stats``
        engines)."""

        kind: str
        live: torch.Tensor
        name: str
        retained_bytes: int

        def lives(self) -> list[torch.Tensor]: ...
        def enter(self) -> None: ...
        def exit(self) -> None: ...
        def owns_storage(self, ptr: int) -> bool: ...


__all__ = ["Region", "PRESERVE_MODES"]

# NOTE [ Region declaration ]
#
# A region journal must hold the old values of every row that changes between a
# segment's forward and its last replay: the rows the segment writes *and* the rows any
# later writer destroys (paper §3.1). Three ways to learn those rows were weighed:
#
# 1. Record writes as they happen (a helper every buffer write goes through). Sees only
#    this segment's writes, never the later ones (the next segment, the next step, an
#    optimizer), which are exactly the ones that make the journal necessary; and it
#    would need every writer, ours or not, to use the helper.
# 2. Diff against a snapshot at granularity G after the forward. Needs the whole
#    snapshot it was meant to avoid (the peak is the whole engine's) and a device-to-
#    host read to size the diff — a synchronisation per segment.
# 3. Declare the rows: ``Region(tensor, rows)``, with ``rows`` the union of this
#    segment's and every later destroying write. The workloads that benefit from regions
#    (feature queues, prototype memories, unrolled recurrences) know their write
#    schedule in advance — a ring pointer, a class index, a time step — so the union is
#    an index tensor they can build once, on the device.
#
# We take 3: preservation is one ``index_select`` of the declared rows (retained bytes =
# the rows plus their int64 index), recovery two ``index_copy_`` calls, no host sync.
# Its limit is the declaration's: a write outside ``rows`` is not journaled. Use whole
# preservation where the schedule is not known (``preserve`` accepts a per-tensor map).

#: Values of ``preserve`` (for the whole call, or per declared tensor in a mapping).
#: ``rows`` (the rows the forward writes, journaled as it writes them) lives in
#: ``written_rows``, ``offload`` (a whole snapshot in host memory) in ``offload``, ``stats``
#: (``whole``, but none for a tensor the forward used only as a training-mode norm's running
#: statistic) in ``running_stats``.
PRESERVE_MODES = ("whole", "region", "rows", "offload", "stats")

#: Engines defined in their own modules, imported when first used.
_ENGINE_MODULES = {
    "rows": "stateaware.torch_replay.written_rows",
    "offload": "stateaware.torch_replay.offload",
    "stats": "stateaware.torch_replay.running_stats",
}


@dataclass(frozen=True, eq=False)
class Region:
    """Declares that only ``rows`` (indices along dim 0) of ``tensor`` can change.

    ``rows`` must cover the union of the rows this segment writes **and** every row any
    later write overwrites before this segment's last replay (later segments, the next
    step, an optimizer) — paper §3.1: saving only the current segment's overwritten
    values is insufficient when a later write destroys another needed region. ``rows``
    is an integer tensor on ``tensor``'s device; duplicates are allowed. Rows outside it
    are assumed unchanged between the forward and every replay; a write there is not
    detected by the journal (declare the tensor whole if that cannot be promised).
    Rows must lie in ``0..tensor.shape[0] - 1``: checked at construction for CPU rows
    (``ValueError``); rows on an accelerator are not checked (it would synchronise).
    """

    tensor: torch.Tensor
    rows: torch.Tensor

    def __post_init__(self) -> None:
        if not isinstance(self.tensor, torch.Tensor):
            raise TypeError(f"Region.tensor must be a torch.Tensor, got {type(self.tensor).__name__}")
        if not isinstance(self.rows, torch.Tensor) or self.rows.dtype not in (torch.int64, torch.int32):
            raise TypeError("Region.rows must be an int64 or int32 tensor of dim-0 indices")
        if self.rows.dim() != 1:
            raise ValueError(f"Region.rows must be 1-D, got shape {tuple(self.rows.shape)}")
        if self.rows.device != self.tensor.device:
            raise ValueError(
                f"Region.rows is on {self.rows.device} but the tensor is on {self.tensor.device}; "
                "put the indices on the tensor's device (no host round trip at replay)"
            )
        if self.tensor.dim() == 0:
            raise ValueError("Region needs a tensor with at least one dimension; declare a 0-d tensor whole")
        if self.rows.device.type == "cpu" and self.rows.numel():
            # Checked where it costs no device synchronisation (CPU rows); a row out of range
            # would otherwise surface as a raw IndexError from index_select at the forward.
            low, high, size = int(self.rows.min()), int(self.rows.max()), self.tensor.shape[0]
            if low < 0 or high >= size:
                raise ValueError(
                    f"Region.rows holds {low if low < 0 else high}, outside 0..{size - 1} (dim 0 of the tensor); "
                    "rows are non-negative dim-0 indices. Tip: map negative indices first, rows % tensor.shape[0]."
                )


# NOTE [ Shared snapshots ]
#
# Consecutive segments often declare the same tensor without writing it (a queue read by
# every layer, a buffer declared by a whole block): a snapshot per segment would keep N
# identical copies. A snapshot (or a journal's old rows) is therefore shared by every
# engine that asks for the same tensor at the same version: the cache maps
# (tensor identity, storage, layout, version[, rows]) to a weak reference of the copy,
# so the entry dies with the last engine (and graph) holding it. The copy keeps the
# tensor's storage alive, so while an entry exists its address cannot be reused by
# another storage. Sharing trusts version counters: a write that does not bump the
# version (a `.data` alias written outside any segment, a fused BatchNorm running-
# statistics update outside any checkpoint) between two segments that declare the
# tensor makes the later one reuse the earlier copy; writes inside checkpointed
# segments are recorded (``_reads``) and counted in the key.

_shared: dict[tuple[object, ...], weakref.ref[torch.Tensor]] = {}


#: WeakIdKeyDictionary tensor -> count, made on first use (torch import)
_silent_writes: MutableMapping[torch.Tensor, int] | None = None


def note_silent_write(t: torch.Tensor) -> None:
    """A segment wrote ``t`` without bumping its version: no later snapshot may reuse an old copy.
    Kept beside the tensor, not on it (an attribute would travel with ``torch.save``)."""
    global _silent_writes
    if _silent_writes is None:
        _silent_writes = WeakIdKeyDictionary()
    _silent_writes[t] = _silent_writes.get(t, 0) + 1


def _key(live: torch.Tensor, *extra: object) -> tuple[object, ...] | None:
    try:
        silent = _silent_writes.get(live, 0) if _silent_writes is not None else 0
        return (
            id(live),
            live.untyped_storage().data_ptr(),
            live.storage_offset(),
            tuple(live.shape),
            live.stride(),
            live.dtype,
            live._version,
            silent,
            *extra,
        )
    except (RuntimeError, NotImplementedError):  # no strided storage (sparse, nested): never shared
        return None


def _shared_copy(key: tuple[object, ...] | None, make: Callable[[], torch.Tensor]) -> torch.Tensor:
    if key is None:
        return make()
    ref = _shared.get(key)
    copy = ref() if ref is not None else None
    if copy is None:
        copy = make()

        def forget(dead: weakref.ref[torch.Tensor], key: tuple[object, ...] = key) -> None:
            if _shared.get(key) is dead:  # not a newer entry made under the same key
                del _shared[key]

        _shared[key] = weakref.ref(copy, forget)
    return copy


def _is_wrapper(t: torch.Tensor) -> bool:
    """A ``__torch_dispatch__`` wrapper subclass (DTensor, float8): state lives in inner tensors."""
    return type(t) not in (torch.Tensor, torch.nn.Parameter) and hasattr(t, "__tensor_flatten__")


def _clone(t: torch.Tensor) -> torch.Tensor:
    """A copy with ``t``'s layout: a dense tensor keeps its strides (so ``.data`` can be swapped
    back and forth without changing what the segment sees); sparse, mkldnn and other layouts
    take no memory format (torch refuses ``preserve_format`` for them)."""
    if t.layout == torch.strided:
        return t.clone(memory_format=torch.preserve_format)
    return t.clone()


class _Whole:
    """Whole-snapshot engine for one declared tensor (see NOTE [ Replay transaction ])."""

    kind = "whole"

    def __init__(self, live: torch.Tensor, name: str):
        self.live, self.name = live, name
        self._outside: torch.Tensor | None = None
        self._stand: torch.Tensor | None = None
        self.inner: list[_Whole] = []
        if _is_wrapper(live):
            # A wrapper's bytes are its inner tensors' (``__tensor_flatten__``); its own
            # `.data` has none, so each inner tensor is preserved and redirected instead.
            attrs, _ = live.__tensor_flatten__()  # type: ignore[attr-defined]  # wrapper subclasses only
            self.inner = [_Whole(getattr(live, a), f"{name}.{a}") for a in attrs]
            self.snapshot: torch.Tensor | None = None
            self.retained_bytes: int = sum(e.retained_bytes for e in self.inner)
            return
        # A non-leaf that requires grad: the segment's in-place writes record autograd
        # history on the tensor object, so a replay must run on a stand-in object.
        self.stand_in = live.grad_fn is not None and type(live) is torch.Tensor

        def make() -> torch.Tensor:
            # clone keeps the strides of a dense tensor, so `.data` can be swapped back and
            # forth without changing the layout the segment sees. A clone of a detached
            # tensor records no history: no grad mode to set (its construction costs a
            # third of the snapshot of a small buffer).
            copy = _clone(live.detach())
            if live.layout == torch.strided:
                # NOTE [ Shared snapshots ]; an ad-hoc attribute torch's stubs do not declare
                copy._stateaware_keeps = live.untyped_storage()  # type: ignore[attr-defined]
            return copy

        self.snapshot = _shared_copy(_key(live), make)
        self.retained_bytes = self.snapshot.numel() * self.snapshot.element_size()

    def lives(self) -> list[torch.Tensor]:
        """The tensors whose version counters a replay must leave unchanged (Rule 4)."""
        return [self.live] + [t for e in self.inner for t in e.lives()]

    def enter(self) -> None:
        # Rule 2: the replay must not touch the live storage, so it runs on a copy; and not
        # on the snapshot itself, which must stay intact for a second backward (Rule 5)
        # and may be shared. Whether the replay writes cannot be told from version
        # counters: some kernels (BatchNorm's running statistics) write without bumping.
        for e in self.inner:
            e.enter()
        if self.snapshot is None:
            return
        if self.stand_in:
            # The live tensor object (with its grad_fn and version) is swapped out for a
            # non-leaf copy for the replay's duration; the replay's in-place writes record
            # their history on the copy, and swapping back leaves the live one as eager did.
            with torch.enable_grad():
                stand = _clone(self.snapshot.detach().requires_grad_())
            torch._C._swap_tensor_impl(self.live, stand)
            self._stand = stand
            return
        replay = _clone(self.snapshot)
        self._outside = self.live.data
        self.live.data = replay

    def exit(self) -> None:
        if self._stand is not None:
            torch._C._swap_tensor_impl(self.live, self._stand)
            self._stand = None
        if self._outside is not None:
            self.live.data = self._outside
            self._outside = None
        for e in reversed(self.inner):
            e.exit()

    def owns_storage(self, ptr: int) -> bool:
        return False  # the live storage is never visible to a replay


class _Journal:
    """Region-journal engine for one declared tensor (see NOTE [ Replay transaction ])."""

    kind = "region"

    def __init__(self, live: torch.Tensor, name: str, rows: torch.Tensor):
        self.live, self.name = live, name
        self.rows = rows if rows.dtype is torch.int64 else rows.to(torch.int64)

        def make() -> torch.Tensor:
            with torch.no_grad():
                old = live.detach().index_select(0, self.rows)
            if live.layout == torch.strided:
                # NOTE [ Shared snapshots ]; an ad-hoc attribute torch's stubs do not declare
                old._stateaware_keeps = (live.untyped_storage(), self.rows)  # type: ignore[attr-defined]
            return old

        self.old = _shared_copy(_key(live, id(self.rows), self.rows._version), make)
        self._current: torch.Tensor | None = None
        self._raw: torch.Tensor | None = None
        self.retained_bytes = self.old.numel() * self.old.element_size() + self.rows.numel() * self.rows.element_size()

    def lives(self) -> list[torch.Tensor]:
        return [self.live]

    def enter(self) -> None:
        # `.data` is an alias with its own version counter: the undo is not an autograd-
        # visible write (Rule 4). Called under no_grad, as is exit.
        self._raw = raw = self.live.data
        self._current = raw.index_select(0, self.rows)
        raw.index_copy_(0, self.rows, self.old)

    def exit(self) -> None:
        if self._current is not None:  # set together with _raw by enter()
            cast("torch.Tensor", self._raw).index_copy_(0, self.rows, self._current)
            self._current = self._raw = None

    def owns_storage(self, ptr: int) -> bool:
        # Rule 2: the replay reads the live storage, so anything it saves for backward that
        # aliases this storage is cloned before the redo overwrites it.
        return self.live.untyped_storage().data_ptr() == ptr


def make_engine(mode: str, live: torch.Tensor, name: str, rows: torch.Tensor | None) -> Engine:
    """The engine preserving ``live`` under ``mode`` (one of ``PRESERVE_MODES``), created
    before the segment's forward runs (Rule 1)."""
    if mode == "region":
        return _Journal(live, name, cast("torch.Tensor", rows))  # callers pass rows with "region"
    if mode == "whole":
        return _Whole(live, name)
    return cast("Engine", importlib.import_module(_ENGINE_MODULES[mode]).engine(live, name))  # rows/offload/stats


def recording(engines: Iterable[object]) -> contextlib.AbstractContextManager[contextlib.ExitStack[bool | None]]:
    """Entered around the original forward: engines that learn what to keep from the
    forward's writes (``rows``) observe it; the others need nothing."""
    stack = contextlib.ExitStack()
    for engine in engines:
        record = getattr(engine, "recording", None)
        if record is not None:
            stack.enter_context(record())
    return stack
