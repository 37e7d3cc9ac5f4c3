"""``preserve="rows"``: a journal of exactly the rows the segment's forward writes.

The finite programs' ``region_journal`` engine keeps ``(cells, old)`` of every write and
recovers by undoing the writes in reverse in the live storage, replaying, and redoing.
This is that engine for a declared tensor, with the cells learned while the forward runs
instead of declared: a ``TorchDispatchMode`` watches every aten op of the original
forward, and before an op writes the declared tensor's storage (any argument the op's
schema marks ``(a!)``: ``index_copy_``, ``index_put_``, ``scatter_``, ``copy_`` into a
slice, ``add_`` ...) it keeps the before-image of the rows that op can touch:

* an index op along dim 0 of the tensor or of a row slice of it (``index_copy_``,
  ``index_add_``, ``index_fill_``, ``index_put_`` with a first index tensor, ``scatter_``
  and ``scatter_add_``/``scatter_reduce_`` with ``dim=0``): exactly the indexed rows, as a
  device tensor (no host synchronisation);
* any other write: the contiguous run of rows its view covers (a slice assignment
  ``q[p:p+b] = k`` keeps rows ``p..p+b-1``; a write to the whole tensor keeps every row).

A replay saves the rows' current values, undoes the records in reverse (the earliest
before-image of a row wins), runs, and redoes. Retained bytes: the rows written plus
their int64 indices — for a ring queue, only the rows it overwrites.

Limit (the same as ``Region``'s): rows written *after* the forward by other code (a later
segment, the next step) before this segment's last replay are not journaled; the engine
refuses such a replay when it can see it (the tensor's version counter moved since the
forward) with ``ReplayError``. Writes that bypass the version counter and the dispatcher
are invisible to it; use ``whole`` there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stateaware.torch_replay.checkpoint import ReplayError

if TYPE_CHECKING:
    from torch._ops import OpOverload

__all__ = ["engine", "rows_written", "dim0_index", "row_origin"]

# Index ops whose dim-0 index argument names the rows written (``dim`` is args[1]).
_DIM_INDEX_OPS = {
    "index_copy_",
    "index_copy",
    "index_add_",
    "index_add",
    "index_fill_",
    "index_fill",
    "index_reduce_",
    "index_reduce",
}
_SCATTER_OPS = {"scatter_", "scatter", "scatter_add_", "scatter_add", "scatter_reduce_", "scatter_reduce"}
_PUT_OPS = {"index_put_", "index_put", "_index_put_impl_"}


def engine(live: torch.Tensor, name: str) -> _WrittenRows:
    """The rows-journal engine for ``live`` (see ``preserve.make_engine``)."""
    return _WrittenRows(live, name)


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return -1


def _extent_rows(base: torch.Tensor, view: torch.Tensor) -> torch.Tensor | None:
    """The run of ``base``'s dim-0 rows that ``view`` (an alias of its storage) covers."""
    if view.numel() == 0:
        return None
    n = base.shape[0]
    if not base.is_contiguous():  # rows are not contiguous runs of the storage
        return torch.arange(n, device=base.device)
    offset = view.storage_offset() - base.storage_offset()
    last = offset + sum((size - 1) * abs(stride) for size, stride in zip(view.shape, view.stride(), strict=True))
    row = base.stride(0) if base.dim() else 1
    first, stop = max(offset // row, 0), min(last // row + 1, n)
    return torch.arange(first, stop, device=base.device)


def row_origin(base: torch.Tensor, view: torch.Tensor) -> int | torch.SymInt | None:
    """Row ``r0`` of ``base`` at which ``view``'s row 0 lies, if ``view`` is a run of whole
    rows of ``base`` (``base[r0:r0+k]``); else None."""
    if (
        base.dim() == 0
        or view.dim() != base.dim()
        or view.shape[1:] != base.shape[1:]
        or view.stride() != base.stride()
    ):
        return None
    offset = view.storage_offset() - base.storage_offset()
    return offset // base.stride(0) if base.stride(0) and offset % base.stride(0) == 0 else None


def dim0_index(
    func: OpOverload[..., Any], target: torch.Tensor, base: torch.Tensor, args: tuple[Any, ...]
) -> torch.Tensor | None:
    """The rows of ``base`` an index op writes along dim 0 of ``target`` (a run of ``base``'s
    rows), as an int64 device tensor; None when ``func`` is not such an op."""
    name = func.overloadpacket.__name__
    origin = row_origin(base, target)
    if origin is None or not args or args[0] is not target:
        return None
    index = None
    if (name in _DIM_INDEX_OPS or name in _SCATTER_OPS) and len(args) > 2 and args[1] in (0, -target.dim()):
        index = args[2]
    elif name in _PUT_OPS and len(args) > 1 and args[1] and args[1][0] is not None:
        first = args[1][0]
        if first.dtype not in (torch.bool, torch.uint8):
            index = torch.remainder(first, target.shape[0])  # negative indices count from the end
    if not isinstance(index, torch.Tensor):
        return None
    return index.reshape(-1).to(device=base.device, dtype=torch.int64) + origin


def rows_written(
    func: OpOverload[..., Any], target: torch.Tensor, base: torch.Tensor, args: tuple[Any, ...]
) -> torch.Tensor | None:
    """The dim-0 rows of ``base`` that ``func(*args)`` can write through ``target`` (an
    alias of ``base``'s storage): an int64 tensor on ``base``'s device, or None when it
    writes nothing. Exact for dim-0 index ops on row runs, a covering run otherwise."""
    rows = dim0_index(func, target, base, args)
    return rows if rows is not None else _extent_rows(base, target)


class _WriteWatch(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ is unannotated
    """Calls ``on_write(rows)`` before each op that writes ``base``'s storage."""

    def __init__(self, base: torch.Tensor, on_write: Callable[[torch.Tensor], None]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # unannotated in torch
        self.base, self.ptr, self.on_write = base, _storage_ptr(base), on_write

    def __torch_dispatch__(
        self,
        func: OpOverload[..., Any],
        types: tuple[type, ...],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        for index, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            target = args[index] if index < len(args) else kwargs.get(argument.name)
            if isinstance(target, torch.Tensor) and _storage_ptr(target) == self.ptr:
                rows = rows_written(func, target, self.base, args)
                if rows is not None:
                    self.on_write(rows)
        return func(*args, **kwargs)


class _WrittenRows:
    """Rows journal for one declared tensor (see the module docstring and NOTE [ Replay
    transaction ] in checkpoint.py: it replays in the live storage, as ``region`` does)."""

    kind = "region"  # Rule 2: the replay reads the live storage

    def __init__(self, live: torch.Tensor, name: str):
        if live.dim() == 0:
            raise ValueError(f"preserve='rows' needs a tensor with rows; {name} is 0-d. Tip: preserve it 'whole'.")
        self.live, self.name = live, name
        self.records: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.retained_bytes = 0
        self._current: list[torch.Tensor] | None = None
        self._version_after_forward: int | None = None

    def lives(self) -> list[torch.Tensor]:
        return [self.live]

    def _keep(self, rows: torch.Tensor) -> None:
        old = self.live.detach().index_select(0, rows)
        self.records.append((rows, old))
        self.retained_bytes += old.numel() * old.element_size() + rows.numel() * rows.element_size()

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        # The before-images are taken inside the mode's handler, below autograd.
        with _WriteWatch(self.live.detach(), self._keep):
            yield
        self._version_after_forward = self.live._version

    def enter(self) -> None:
        if self._version_after_forward is not None and self.live._version != self._version_after_forward:
            raise ReplayError(
                f"stateaware checkpoint: {self.name} was written after the forward (version "
                f"{self._version_after_forward} -> {self.live._version}) and preserve='rows' journals only "
                "the rows the forward wrote. Tip: preserve it 'whole', or as Region(tensor, rows) covering "
                "the later writes."
            )
        with torch.no_grad():
            raw = self.live.data  # an alias with its own version counter (Rule 4)
            self._current = [raw.index_select(0, rows) for rows, _ in self.records]
            for rows, old in reversed(self.records):
                raw.index_copy_(0, rows, old)

    def exit(self) -> None:
        if self._current is None:
            return
        with torch.no_grad():
            raw = self.live.data
            for (rows, _), current in zip(self.records, self._current, strict=True):
                raw.index_copy_(0, rows, current)
        self._current = None

    def owns_storage(self, ptr: int) -> bool:
        return _storage_ptr(self.live) == ptr
