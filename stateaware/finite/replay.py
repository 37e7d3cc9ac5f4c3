"""Byte-level replay (paper eq. 2): ``P(B0, R0) = (BT, RT)``, aliases included.

Three paths, each compared against the forward execution's exact final bytes ``BT``
and generator state ``RT``:

- ``snapshot_replay`` — keep a snapshot of ``(B0, R0)``, restore it, re-execute
  drawing from the restored generator.
- ``region_undo`` — keep a byte journal (offsets, old bytes, new bytes) of every
  write and ``R0``; from ``(BT, RT)`` undo the writes in reverse to recover ``B0`` (which
  must equal the original bytes), restore ``R0``, then both redo the journal and
  re-execute, each of which must reproduce ``(BT, RT)``.
- ``wrong_rng_replay`` — the control: restore ``B0`` exactly but a generator that is
  ``R0`` advanced by one draw. The replay must be *detected*: its bytes or its final
  generator state differ from ``(BT, RT)``.

Comparisons are on the full storage bytes (float cells, integer slots, and so every typed
alias of them) and on the full generator state; equality is exact, never a tolerance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from stateaware.finite.interpret import Event, Trace, execute, rng_state_bytes, storage_from_bytes
from stateaware.finite.program import Program

__all__ = ["ByteCheck", "byte_journal", "region_undo", "snapshot_replay", "wrong_rng_replay"]


@dataclass(frozen=True)
class ByteCheck:
    """Outcome of one replay path: exact equality of bytes and generator state."""

    bytes_equal: bool
    rng_equal: bool
    mismatched_bytes: int

    @property
    def match(self) -> bool:
        return self.bytes_equal and self.rng_equal


def _compare(buf: np.ndarray, rng_state: bytes, trace: Trace) -> ByteCheck:
    assert trace.final_bytes is not None
    diff = int(np.count_nonzero(buf != trace.final_bytes))
    return ByteCheck(diff == 0, rng_state == trace.rng_after, diff)


def _generator(state: bytes) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = json.loads(state)
    return rng


def byte_journal(program: Program, events: list[Event]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(byte offsets, old bytes, new bytes) of every write, in execution order."""
    journal = []
    for op, e in zip(program.ops, events, strict=True):
        if op.kind != "int_write":  # float cells: 8 bytes each
            offsets = (8 * e.dst[:, None] + np.arange(8)[None, :]).ravel()
            journal.append(
                (offsets, e.old.astype("<f8").view(np.uint8).copy(), e.new.astype("<f8").view(np.uint8).copy())
            )
        else:
            journal.append((e.dst.copy(), e.old.copy(), e.new.copy()))
    return journal


def snapshot_replay(program: Program, trace: Trace | None = None) -> ByteCheck:
    """Restore the ``(B0, R0)`` snapshot, re-execute, compare with ``(BT, RT)``."""
    snapshot_bytes = program.initial_bytes()
    snapshot_rng = rng_state_bytes(np.random.default_rng(program.rng_seed))
    trace = trace or execute(program)
    replay = execute(program, storage_from_bytes(snapshot_bytes, program.n), _generator(snapshot_rng))
    return _compare(replay.final_bytes, replay.rng_after, trace)


def region_undo(program: Program, trace: Trace | None = None) -> ByteCheck:
    """Undo the byte journal from ``(BT, RT)`` to ``(B0, R0)``, then redo and re-execute.

    Matches only if the undo reproduces the original ``B0`` and ``R0`` exactly, the redo
    reproduces ``BT``, and re-execution from the undone state reproduces ``(BT, RT)``.
    """
    trace = trace or execute(program)
    journal = byte_journal(program, trace.events)
    r0 = trace.rng_before  # the journal's generator record
    buf = trace.final_bytes.copy()
    for offsets, old, _ in reversed(journal):
        buf[offsets] = old
    undone_ok = np.array_equal(buf, program.initial_bytes()) and r0 == rng_state_bytes(
        np.random.default_rng(program.rng_seed)
    )
    redo = buf.copy()
    for offsets, _, new in journal:
        redo[offsets] = new
    redo_ok = np.array_equal(redo, trace.final_bytes)
    replay = execute(program, storage_from_bytes(buf, program.n), _generator(r0))
    check = _compare(replay.final_bytes, replay.rng_after, trace)
    return ByteCheck(
        check.bytes_equal and undone_ok and redo_ok,
        check.rng_equal and undone_ok,
        check.mismatched_bytes + int(np.count_nonzero(redo != trace.final_bytes)),
    )


def wrong_rng_replay(program: Program, trace: Trace | None = None) -> ByteCheck:
    """The control: replay from ``B0`` with ``R0`` advanced by one draw. ``match`` is False
    exactly when the wrong generator is detected by the byte/state comparison."""
    trace = trace or execute(program)
    wrong = np.random.default_rng(program.rng_seed)
    wrong.random()  # one draw: a "differently advanced generator"
    replay = execute(program, storage_from_bytes(program.initial_bytes(), program.n), wrong)
    return _compare(replay.final_bytes, replay.rng_after, trace)
