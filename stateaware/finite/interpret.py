"""The interpreter: executes a program over explicit storage and builds its version graph.

NOTE [ Versions ]
  Rule 1. A value is identified by the write that produced it. Cell ``j`` of the initial
          storage is version ``j``; every element an operation writes is a new version
          whose node keeps its operands' version ids, the coefficients, the sampled noise
          and mask, and the nonlinearity (its operation).
  Rule 2. An operation reads the versions current *before* its writes: sources are
          gathered (copied) before the destination is assigned, so a source that overlaps
          the destination sees the old values, never the buffer after the write.
  Rule 3. Random draws are part of the state: noise, then mask, from the program's
          generator, in operation order. Replay either re-draws from a generator
          (byte-level replay, eq. 2) or reuses recorded draws (engine recovery); the two
          are distinct and never mixed within one execution.

Float programs also run on complex128 cells (complex-step differentiation); such an
execution has no byte buffer and cannot run ``int_write`` operations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from stateaware.finite.program import Indexed, Op, Program, op_cells

__all__ = [
    "Draws",
    "Event",
    "Storage",
    "Trace",
    "VersionGraph",
    "activate",
    "activate_grad",
    "apply",
    "execute",
    "float_value",
    "rng_state_bytes",
    "storage_from_bytes",
]


@dataclass
class Storage:
    """Explicit program storage: float ``cells`` and int32 ``slots``.

    In byte mode both are views of one uint8 ``buf`` (so typed aliases and integer writes
    act on the same bytes); in complex mode ``buf`` is ``None`` and ``cells`` is complex128.
    """

    cells: np.ndarray
    slots: np.ndarray
    buf: np.ndarray | None = None

    def bytes(self) -> np.ndarray:
        if self.buf is None:
            raise ValueError("a complex-mode storage has no byte buffer")
        return self.buf.copy()


def storage_from_bytes(buf: np.ndarray, n: int) -> Storage:
    """A byte-mode storage over a *copy* of ``buf`` with ``n`` float cells."""
    own = np.array(buf, dtype=np.uint8, copy=True)
    return Storage(cells=own[: 8 * n].view("<f8"), slots=own[8 * n :].view("<i4"), buf=own)


@dataclass(frozen=True)
class Draws:
    """The random inputs of one operation (``None`` where it draws none)."""

    noise: np.ndarray | None
    mask: np.ndarray | None


@dataclass
class Event:
    """What one operation read and wrote: enough to journal it, replay it, or differentiate it."""

    k: int
    dst: np.ndarray  # float ops: written cells; int_write: written byte offsets
    src0: np.ndarray  # float ops: cells read as u (empty for int_write)
    src1: np.ndarray  # float ops: cells read as w
    slot_values: tuple[np.ndarray, ...]  # integer reads, per Indexed view in (dst, src0, src1) order
    u: np.ndarray
    w: np.ndarray
    draws: Draws
    z: np.ndarray  # pre-activation (float ops)
    old: np.ndarray  # destination values (or bytes) before the write
    new: np.ndarray  # destination values (or bytes) written


@dataclass
class VersionGraph:
    """Per-operation version nodes (Rule 1). ``nodes[k]``/``parents0[k]``/``parents1[k]`` are
    arrays over op ``k``'s written elements; ``values`` holds every version's value."""

    leaves: int
    nodes: list[np.ndarray] = field(default_factory=list)
    parents0: list[np.ndarray] = field(default_factory=list)
    parents1: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    final: np.ndarray | None = None  # version id current in each cell at the end

    @property
    def size(self) -> int:
        return self.leaves + sum(n.size for n in self.nodes)

    def value_table(self) -> np.ndarray:
        return np.concatenate(self.values) if self.values else np.empty(0)


@dataclass
class Trace:
    """One execution: events, version graph, and the storage/RNG states around it."""

    program: Program
    events: list[Event]
    graph: VersionGraph
    prestates: list[np.ndarray]  # bytes before each op (byte mode); empty if not kept
    final_bytes: np.ndarray | None
    final_cells: np.ndarray
    rng_before: bytes | None
    rng_after: bytes | None

    @property
    def draws(self) -> list[Draws]:
        return [e.draws for e in self.events]

    def output(self) -> float | complex:
        return _dot(self.program.weights, self.final_cells)


def _dot(weights: np.ndarray, values: np.ndarray):
    # A fixed left-to-right sum, so every path that forms the output rounds identically.
    total = values.dtype.type(0)
    for wgt, val in zip(weights, values, strict=True):
        total = total + wgt * val
    return total


def rng_state_bytes(rng: np.random.Generator) -> bytes:
    """The generator's full state (PCG64 state, increment, buffered bits) as bytes."""
    return json.dumps(rng.bit_generator.state, sort_keys=True).encode()


def activate(act: str, z: np.ndarray) -> np.ndarray:
    if act == "identity":
        return z.copy()
    if act == "tanh":
        return np.tanh(z)
    return np.sin(z)


def activate_grad(act: str, z: np.ndarray) -> np.ndarray:
    """d act / dz at ``z``."""
    if act == "identity":
        return np.ones_like(z)
    if act == "tanh":
        t = np.tanh(z)
        return 1 - t * t
    return np.cos(z)


def _draw(op: Op, size: int, rng: np.random.Generator | None, recorded: Draws | None) -> Draws:
    if recorded is not None:
        return recorded
    if not op.draws:
        return Draws(None, None)
    if rng is None:
        raise ValueError("operation draws random inputs but neither a generator nor recorded draws were given")
    noise = op.sigma * rng.standard_normal(size) if op.sigma > 0 else None
    mask = (rng.random(size) < op.keep).astype(np.float64) if op.keep < 1 else None
    return Draws(noise, mask)


def float_value(op: Op, u: np.ndarray, w: np.ndarray, draws: Draws) -> tuple[np.ndarray, np.ndarray]:
    """(z, y) of float op ``op`` for operands ``u``, ``w`` and its random inputs."""
    if op.kind == "mul":
        z = op.a * u * w + op.c
    else:
        z = op.a * u + op.b * w + op.c
    if draws.noise is not None:
        z = z + draws.noise
    y = activate(op.act, z)
    if draws.mask is not None:
        y = y * draws.mask
    return z, y


def apply(
    k: int, op: Op, storage: Storage, rng: np.random.Generator | None = None, recorded: Draws | None = None
) -> Event:
    """Execute operation ``k`` on ``storage`` in place and return its event (Rules 2 and 3)."""
    if op.kind == "int_write":
        return _apply_int_write(k, op, storage)
    slots = storage.slots
    slot_values = tuple(slots[v.slot_positions()].copy() for v in (op.dst, *op.src) if isinstance(v, Indexed))
    dst, s0, s1 = op_cells(op, slots)
    u, w = storage.cells[s0].copy(), storage.cells[s1].copy()  # Rule 2: read before writing
    draws = _draw(op, dst.size, rng, recorded)
    z, y = float_value(op, u, w, draws)
    old = storage.cells[dst].copy()
    storage.cells[dst] = y
    return Event(k, dst, s0, s1, slot_values, u, w, draws, z, old, y)


def _apply_int_write(k: int, op: Op, storage: Storage) -> Event:
    if storage.buf is None:
        raise ValueError(f"operation {k} is an int_write; it needs byte storage, not complex cells")
    src = op.src[0].view(storage.buf).copy()
    dst_view = op.dst.view(storage.buf)
    itemsize = np.dtype(op.dst.dtype).itemsize
    offsets = (op.dst.offset + op.dst.stride * np.arange(op.dst.length))[:, None] + np.arange(itemsize)[None, :]
    offsets = offsets.ravel()
    old = storage.buf[offsets].copy()
    new_items = (src.astype(np.int64) ^ op.pattern).astype(op.dst.dtype)
    dst_view[:] = new_items
    empty = np.empty(0, dtype=np.int64)
    return Event(
        k, offsets, empty, empty, (), src, np.empty(0), Draws(None, None), np.empty(0), old, storage.buf[offsets].copy()
    )


def execute(
    program: Program,
    storage: Storage | None = None,
    rng: np.random.Generator | None = None,
    draws: Sequence[Draws] | None = None,
    keep_prestates: bool = False,
) -> Trace:
    """Run ``program`` forward and return its trace with the version graph.

    ``storage`` defaults to a fresh byte storage holding ``B0``; ``rng`` to the program's
    generator at ``R0``. Given ``draws`` (one per op), the recorded random inputs are used
    and ``rng`` is neither needed nor advanced. ``keep_prestates`` keeps the bytes before
    every operation (what eager retention holds; byte mode only).
    """
    if storage is None:
        storage = storage_from_bytes(program.initial_bytes(), program.n)
    if rng is None and draws is None:
        rng = np.random.default_rng(program.rng_seed)
    rng_before = rng_state_bytes(rng) if rng is not None else None
    graph = VersionGraph(leaves=program.n)
    graph.values.append(storage.cells.copy())
    versions = np.arange(program.n, dtype=np.int64)
    next_id = program.n
    events, prestates = [], []
    with np.errstate(all="ignore"):  # integer writes may turn float bytes into inf/NaN
        for k, op in enumerate(program.ops):
            if keep_prestates:
                prestates.append(storage.bytes())
            event = apply(k, op, storage, rng, None if draws is None else draws[k])
            events.append(event)
            if op.kind == "int_write":
                # No float version: admission keeps such programs off every gradient path.
                empty = np.empty(0, dtype=np.int64)
                graph.nodes.append(empty)
                graph.parents0.append(empty)
                graph.parents1.append(empty)
                continue
            ids = np.arange(next_id, next_id + event.dst.size, dtype=np.int64)
            next_id += ids.size
            graph.nodes.append(ids)
            graph.parents0.append(versions[event.src0].copy())
            graph.parents1.append(versions[event.src1].copy())
            graph.values.append(event.new.copy())
            versions[event.dst] = ids
    graph.final = versions
    return Trace(
        program=program,
        events=events,
        graph=graph,
        prestates=prestates,
        final_bytes=storage.bytes() if storage.buf is not None else None,
        final_cells=storage.cells.copy(),
        rng_before=rng_before,
        rng_after=rng_state_bytes(rng) if rng is not None else None,
    )
