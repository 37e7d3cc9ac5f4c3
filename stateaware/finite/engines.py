"""The five preservation engines of Table 1, on finite float programs.

Each engine is a pair: ``retain`` keeps what the engine would keep during the forward
pass (taken from the forward trace, each engine reading only its own share of it), and
``recover`` gives backward every operation's reads — integer reads, operands ``u``/``w``
and random inputs — working from what it retained and the *live* storage, which holds
the final state ``BT`` and must hold it again when recovery returns.

==================  ===========================================  ====================================
engine              retains                                      recovers op k by
==================  ===========================================  ====================================
``eager``           the full storage before every operation      reading the saved prestate
``whole``           a full-storage anchor per segment start      replaying from the segment's anchor
``read_set``        every operation's reads                      reading them directly
``region_journal``  (cells, old, new) of every write             undoing writes in reverse to the
                                                                 segment start in the live storage,
                                                                 replaying the segment, redoing the
                                                                 later writes to restore ``BT``
``guarded_region``  per segment, its journal or — when the       the anchor, or undo from the next
                    journal payload exceeds the anchor's — an     anchor (or the live storage)
                    anchor
==================  ===========================================  ====================================

All engines also keep the recorded random inputs: replay reuses the original noise and
masks (Table 1, "Replay uses the original noise/mask records") and never draws.

NOTE [ Union of destroying writes ]
  Recovering segment ``s`` from the live storage needs the values its reads saw at the
  segment start. A later segment ``t > s`` may overwrite a cell that ``s`` reads, so the
  journal entries of *every* later segment must still be held when ``s`` is recovered:
  the retained journal is the union of the current and all later destroying writes. A
  journal that keeps only segment ``s``'s own overwritten values restores the cells ``s``
  writes but leaves later overwrites of cells ``s`` only reads in place — wrong whenever
  such an overwrite changed a value (see tests/finite/test_engines.py).

``retained_bytes`` is measured: the sum of ``nbytes`` of every array an engine keeps
(destination cells stored as int32). Only supported programs (see admission) are handled.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stateaware.finite.admission import require_gradient_support
from stateaware.finite.derivatives import reverse_trace
from stateaware.finite.interpret import Draws, Event, Storage, Trace, apply, rng_state_bytes, storage_from_bytes
from stateaware.finite.program import Program

__all__ = [
    "ENGINES",
    "EngineCheck",
    "Reads",
    "Retained",
    "reads_equal",
    "reads_of",
    "recover",
    "retain",
    "verify_engine",
]

ENGINES = ("eager", "whole", "read_set", "region_journal", "guarded_region")


@dataclass(frozen=True)
class Reads:
    """What backward needs from operation ``k``: its integer reads, operands and draws."""

    slot_values: tuple[np.ndarray, ...]
    u: np.ndarray
    w: np.ndarray
    draws: Draws


@dataclass
class Retained:
    """What one engine kept for one program, and its measured size."""

    engine: str
    state: dict[str, Any]
    retained_bytes: int


def reads_of(event: Event) -> Reads:
    return Reads(tuple(v.copy() for v in event.slot_values), event.u.copy(), event.w.copy(), event.draws)


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def reads_equal(a: Reads, b: Reads) -> bool:
    """Bitwise equality of two operations' reads (values, integer reads and draws)."""
    return (
        len(a.slot_values) == len(b.slot_values)
        and all(_same(x, y) for x, y in zip(a.slot_values, b.slot_values, strict=True))
        and _same(a.u, b.u)
        and _same(a.w, b.w)
        and _same(a.draws.noise, b.draws.noise)
        and _same(a.draws.mask, b.draws.mask)
    )


def _nbytes(*arrays: Any) -> int:
    total = 0
    for a in arrays:
        if isinstance(a, np.ndarray):
            total += a.nbytes
        elif isinstance(a, (list, tuple)):
            total += _nbytes(*a)
        elif isinstance(a, dict):
            total += _nbytes(*a.values())
        elif isinstance(a, Draws):
            total += _nbytes(a.noise, a.mask)
    return total


def _journal(trace: Trace) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return [(e.dst.astype(np.int32), e.old.copy(), e.new.copy()) for e in trace.events]


def _anchor_payload(program: Program) -> int:
    return program.nbytes


def retain(engine: str, trace: Trace) -> Retained:
    """What ``engine`` keeps from the forward execution ``trace`` (see the module table)."""
    program = trace.program
    require_gradient_support(program)
    draws = [
        Draws(None if d.noise is None else d.noise.copy(), None if d.mask is None else d.mask.copy())
        for d in trace.draws
    ]
    if engine in ("eager", "whole", "guarded_region") and len(trace.prestates) != len(program.ops):
        raise ValueError(f"engine {engine!r} keeps storage states; run execute(..., keep_prestates=True)")
    if engine == "eager":
        state: dict[str, Any] = {"prestates": [p.copy() for p in trace.prestates]}
    elif engine == "whole":
        state = {"anchors": {seg.start: trace.prestates[seg.start].copy() for seg in program.segments}}
    elif engine == "read_set":
        state = {"reads": [(tuple(v.copy() for v in e.slot_values), e.u.copy(), e.w.copy()) for e in trace.events]}
    elif engine == "region_journal":
        state = {"journal": _journal(trace)}
    elif engine == "guarded_region":
        journal = _journal(trace)
        anchors, kept = {}, {}
        for seg in program.segments:
            payload = _nbytes([journal[k] for k in seg])
            if payload > _anchor_payload(program):
                anchors[seg.start] = trace.prestates[seg.start].copy()
            else:
                kept.update({k: journal[k] for k in seg})
        state = {"anchors": anchors, "journal": kept}
    else:
        raise ValueError(f"engine {engine!r}; allowed values are: {', '.join(ENGINES)}")
    state["draws"] = draws
    return Retained(engine, state, _nbytes(state))


def _replay(program: Program, seg: range, storage: Storage, draws: list[Draws], out: list) -> None:
    for k in seg:
        out[k] = reads_of(apply(k, program.ops[k], storage, recorded=draws[k]))


def _undo(storage: Storage, journal: dict | list, ops: range) -> None:
    for k in reversed(ops):
        cells, old, _ = journal[k]
        storage.cells[cells] = old


def _redo(storage: Storage, journal: dict | list, ops: range) -> None:
    for k in ops:
        cells, _, new = journal[k]
        storage.cells[cells] = new


def _recover_eager(program: Program, st: dict, live: Storage, out: list) -> None:
    for k in range(len(program.ops)):
        _replay(program, range(k, k + 1), storage_from_bytes(st["prestates"][k], program.n), st["draws"], out)


def _recover_whole(program: Program, st: dict, live: Storage, out: list) -> None:
    for seg in reversed(program.segments):
        _replay(program, seg, storage_from_bytes(st["anchors"][seg.start], program.n), st["draws"], out)


def _recover_read_set(program: Program, st: dict, live: Storage, out: list) -> None:
    for k, (slot_values, u, w) in enumerate(st["reads"]):
        out[k] = Reads(slot_values, u, w, st["draws"][k])


def _recover_region(program: Program, st: dict, live: Storage, out: list) -> None:
    end = len(program.ops)
    for seg in reversed(program.segments):
        _undo(live, st["journal"], range(seg.start, end))
        _replay(program, seg, live, st["draws"], out)
        _redo(live, st["journal"], range(seg.stop, end))


def _recover_guarded(program: Program, st: dict, live: Storage, out: list) -> None:
    anchors, journal, end = st["anchors"], st["journal"], len(program.ops)
    for seg in reversed(program.segments):
        if seg.start in anchors:
            _replay(program, seg, storage_from_bytes(anchors[seg.start], program.n), st["draws"], out)
            continue
        later = [a for a in anchors if a > seg.start]
        if later:  # undo the journaled segments between here and the next anchor, off the live storage
            scratch = storage_from_bytes(anchors[min(later)], program.n)
            _undo(scratch, journal, range(seg.start, min(later)))
            _replay(program, seg, scratch, st["draws"], out)
        else:
            _undo(live, journal, range(seg.start, end))
            _replay(program, seg, live, st["draws"], out)
            _redo(live, journal, range(seg.stop, end))


_RECOVER: dict[str, Callable[[Program, dict, Storage, list], None]] = {
    "eager": _recover_eager,
    "whole": _recover_whole,
    "read_set": _recover_read_set,
    "region_journal": _recover_region,
    "guarded_region": _recover_guarded,
}


def recover(retained: Retained, program: Program, live: Storage) -> list[Reads]:
    """Every operation's reads, recovered by ``retained.engine`` (segments in backward order).

    ``live`` is the program's storage in its final state; journal engines undo and redo
    in it, and it holds the final state again on return.
    """
    require_gradient_support(program)
    out: list = [None] * len(program.ops)
    _RECOVER[retained.engine](program, retained.state, live, out)
    return out


@dataclass(frozen=True)
class EngineCheck:
    """One engine on one program, checked against the forward execution.

    ``reads_match``: every recovered read equals what the forward pass read, bitwise.
    ``storage_restored``/``aliases_restored``: the live storage, and every declared typed
    alias of it, is byte-identical to ``BT`` after recovery. ``rng_restored``: the live
    generator is still at ``RT`` (engines reuse recorded draws and never draw, so this
    holds by construction; it is checked so that a future engine that draws is caught).
    ``repeat_match``: a second backward (recover again from the same retained state and
    live storage) gives bitwise-identical reads and gradient. ``gradient`` is
    reconstructed from the recovered reads by ``reverse_trace``.
    """

    engine: str
    retained_bytes: int
    reads_match: bool
    storage_restored: bool
    aliases_restored: bool
    rng_restored: bool
    repeat_match: bool
    gradient: np.ndarray

    @property
    def recovered(self) -> bool:
        return (
            self.reads_match
            and self.storage_restored
            and self.aliases_restored
            and self.rng_restored
            and self.repeat_match
        )


def verify_engine(engine: str, trace: Trace, repeat: bool = True) -> EngineCheck:
    """Retain with ``engine`` from ``trace`` (kept prestates needed), recover, and check."""
    program = trace.program
    retained = retain(engine, trace)
    live = storage_from_bytes(trace.final_bytes, program.n)
    live_rng = np.random.default_rng()
    live_rng.bit_generator.state = _json_state(trace.rng_after)
    truth = [reads_of(e) for e in trace.events]
    reads = recover(retained, program, live)
    gradient = reverse_trace(program, reads)
    reads_ok = all(reads_equal(a, b) for a, b in zip(reads, truth, strict=True))
    restored = bool(np.array_equal(live.buf, trace.final_bytes))
    aliases_ok = all(a.view(live.buf).tobytes() == a.view(trace.final_bytes).tobytes() for a in program.aliases)
    repeat_ok = True
    if repeat:
        again = recover(retained, program, live)
        repeat_ok = (
            all(reads_equal(a, b) for a, b in zip(again, reads, strict=True))
            and reverse_trace(program, again).tobytes() == gradient.tobytes()
            and bool(np.array_equal(live.buf, trace.final_bytes))
        )
    return EngineCheck(
        engine,
        retained.retained_bytes,
        reads_ok,
        restored,
        aliases_ok,
        rng_state_bytes(live_rng) == trace.rng_after,
        repeat_ok,
        gradient,
    )


def _json_state(state: bytes) -> dict:
    return json.loads(state)
