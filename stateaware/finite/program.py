"""Finite programs as data: explicit storage, typed views, and operation descriptors.

A program runs over one byte buffer ``B`` laid out as two regions::

    [0, 8*n)            n float64 *cells*  (the differentiable state)
    [8*n, 8*n + 4*m)    m int32 *slots*    (indices that integer reads consume)

Every operation is a frozen descriptor, so a program can be stored (``to_dict``),
replayed and printed (``describe``). Views address storage in three ways:

``Cells(start, stride, length)``
    A strided float64 view: cells ``start + stride*i``. Two views of one program may
    overlap partially or entirely; an operation's source may overlap its destination.
``Indexed(slot_start, slot_stride, slot_count, base, rows, row)``
    An *integer read*: ``k = slots[slot_start + slot_stride*j] mod rows`` selects row
    ``k`` of ``row`` cells starting at ``base``; the cells are the rows' concatenation.
``Alias(dtype, offset, stride, length)``
    A typed view of the raw bytes (``offset`` and ``stride`` in bytes), e.g. uint8 or
    int32 over float cells. Aliases are what integer writes write through, and what the
    joint-alias study compares after recovery.

Float operations (``kind`` ``affine`` or ``mul``) compute, for each element ``i``::

    affine: z = a*u_i + b*w_i + c + noise_i        mul: z = a*u_i*w_i + c + noise_i
    y_i   = act(z) * mask_i                         written to dst cell i

with ``u`` read through ``src[0]`` and ``w`` through ``src[1]``, both *before* the write;
``noise_i = sigma * N(0, 1)`` and ``mask_i = [U(0, 1) < keep]`` are random draws made in
that order (noise, then mask) when ``sigma > 0`` / ``keep < 1``. An ``int_write`` reads
its source alias and writes ``source XOR pattern`` through its destination alias: bytes
change, but no derivative is defined (see ``stateaware.finite.admission``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ACTIVATIONS",
    "FLOAT_KINDS",
    "KINDS",
    "Alias",
    "Cells",
    "Indexed",
    "Op",
    "Program",
    "describe",
    "op_cells",
    "op_cells_from",
    "to_json",
]

#: Nonlinearities. All are analytic, so complex-step differentiation applies to them.
ACTIVATIONS = ("identity", "tanh", "sin")
FLOAT_KINDS = ("affine", "mul")
KINDS = (*FLOAT_KINDS, "int_write")
_ALIAS_DTYPES = ("uint8", "uint16", "int16", "int32", "uint32", "float32", "float64", "int64")


@dataclass(frozen=True)
class Cells:
    """Float64 cells ``start + stride*i`` for ``i < length``."""

    start: int
    stride: int
    length: int

    def resolve(self, slots: np.ndarray) -> np.ndarray:
        return self.start + self.stride * np.arange(self.length, dtype=np.int64)


@dataclass(frozen=True)
class Indexed:
    """Rows of float cells selected by an integer read of ``slots`` (see module docstring)."""

    slot_start: int
    slot_stride: int
    slot_count: int
    base: int
    rows: int
    row: int

    @property
    def length(self) -> int:
        return self.slot_count * self.row

    def slot_positions(self) -> np.ndarray:
        return self.slot_start + self.slot_stride * np.arange(self.slot_count, dtype=np.int64)

    def resolve(self, slots: np.ndarray) -> np.ndarray:
        return self.cells_from(slots[self.slot_positions()])

    def cells_from(self, slot_values: np.ndarray) -> np.ndarray:
        """The cells selected when the integer read returned ``slot_values``."""
        k = slot_values.astype(np.int64) % self.rows
        return (self.base + k[:, None] * self.row + np.arange(self.row, dtype=np.int64)[None, :]).ravel()


@dataclass(frozen=True)
class Alias:
    """A typed view of raw storage bytes: ``length`` items of ``dtype`` at ``offset + stride*i``."""

    dtype: str
    offset: int
    stride: int
    length: int

    def __post_init__(self) -> None:
        if self.dtype not in _ALIAS_DTYPES:
            raise ValueError(f"Alias.dtype {self.dtype!r}; allowed values are: {', '.join(_ALIAS_DTYPES)}")

    @property
    def integer(self) -> bool:
        return np.dtype(self.dtype).kind in "iu"

    def view(self, buf: np.ndarray) -> np.ndarray:
        """The alias as a NumPy view sharing ``buf``'s memory (writes go to ``buf``)."""
        itemsize = np.dtype(self.dtype).itemsize
        end = self.offset + self.stride * (self.length - 1) + itemsize
        if self.offset < 0 or end > buf.size:
            raise ValueError(f"alias {self} reaches byte {end} of a {buf.size}-byte storage")
        return np.ndarray((self.length,), dtype=self.dtype, buffer=buf.data, offset=self.offset, strides=(self.stride,))


@dataclass(frozen=True)
class Op:
    """One operation descriptor (see the module docstring for its semantics)."""

    kind: str
    dst: Cells | Indexed | Alias
    src: tuple[Cells | Indexed | Alias, ...]
    a: float = 1.0
    b: float = 0.0
    c: float = 0.0
    act: str = "identity"
    sigma: float = 0.0  # noise scale; 0 draws no noise
    keep: float = 1.0  # mask keep probability; 1 draws no mask
    pattern: int = 0  # int_write only: the XOR pattern

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Op.kind {self.kind!r}; allowed values are: {', '.join(KINDS)}")
        if self.act not in ACTIVATIONS:
            raise ValueError(f"Op.act {self.act!r}; allowed values are: {', '.join(ACTIVATIONS)}")
        if self.kind in FLOAT_KINDS:
            if isinstance(self.dst, Alias) or len(self.src) != 2 or any(isinstance(s, Alias) for s in self.src):
                raise ValueError(f"a {self.kind!r} op writes Cells/Indexed from two Cells/Indexed sources")
            if len({self.dst.length, self.src[0].length, self.src[1].length}) != 1:
                raise ValueError(
                    f"op views have different lengths: dst {self.dst.length}, "
                    f"src {self.src[0].length}, {self.src[1].length}"
                )
            if isinstance(self.dst, Indexed) and self.dst.slot_count != 1:
                # Two slots may select one row; a write with duplicate destinations has no
                # well-defined version order, so a destination selects exactly one row.
                raise ValueError(f"an Indexed destination selects one row (slot_count=1), got {self.dst.slot_count}")
        elif not (
            isinstance(self.dst, Alias)
            and len(self.src) == 1
            and isinstance(self.src[0], Alias)
            and self.dst.integer
            and self.src[0].length == self.dst.length
        ):
            raise ValueError("an int_write op writes an integer Alias from one Alias of the same length")

    @property
    def draws(self) -> bool:
        return self.sigma > 0 or self.keep < 1


@dataclass(frozen=True)
class Program:
    """A seeded finite program: initial storage, operations, output weights, RNG seed.

    ``cells0``/``slots0`` are the initial storage ``B0``; ``rng_seed`` fixes the initial
    generator state ``R0``; ``weights`` define the scalar output ``sum(weights * cells_T)``;
    ``segment`` is the operation count per replay segment (engines anchor and journal per
    segment); ``aliases`` are typed views declared for alias-storage comparison.
    """

    name: str
    seed: int
    family: str
    cells0: np.ndarray
    slots0: np.ndarray
    ops: tuple[Op, ...]
    weights: np.ndarray
    rng_seed: int
    segment: int = 4
    aliases: tuple[Alias, ...] = field(default_factory=tuple)
    writes: str = ""  # the generator's write-density setting (sparse | dense), "" if none

    @property
    def n(self) -> int:
        return int(self.cells0.size)

    @property
    def m(self) -> int:
        return int(self.slots0.size)

    @property
    def nbytes(self) -> int:
        return 8 * self.n + 4 * self.m

    @property
    def segments(self) -> list[range]:
        t = len(self.ops)
        return [range(s, min(s + self.segment, t)) for s in range(0, t, self.segment)]

    def initial_bytes(self) -> np.ndarray:
        """``B0`` as a fresh uint8 array (cells, then slots, little-endian)."""
        return np.concatenate([self.cells0.astype("<f8").view(np.uint8), self.slots0.astype("<i4").view(np.uint8)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seed": self.seed,
            "family": self.family,
            "rng_seed": self.rng_seed,
            "segment": self.segment,
            "writes": self.writes,
            "cells0": self.cells0.tolist(),
            "slots0": self.slots0.tolist(),
            "weights": self.weights.tolist(),
            "ops": [_op_dict(op) for op in self.ops],
            "aliases": [asdict(a) for a in self.aliases],
        }


def _op_dict(op: Op) -> dict[str, Any]:
    def view(v: Any) -> dict[str, Any]:
        return {"type": type(v).__name__, **asdict(v)}

    d = asdict(op)
    d["dst"], d["src"] = view(op.dst), [view(s) for s in op.src]
    return d


def op_cells(op: Op, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dst, src0, src1) cell indices of float op ``op`` given the slots it reads."""
    return op.dst.resolve(slots), op.src[0].resolve(slots), op.src[1].resolve(slots)


def op_cells_from(op: Op, slot_values: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dst, src0, src1) cells of float op ``op`` given its recorded integer reads, one
    array per ``Indexed`` view in (dst, src0, src1) order."""
    values = iter(slot_values)
    return tuple(
        v.cells_from(next(values)) if isinstance(v, Indexed) else v.resolve(np.empty(0)) for v in (op.dst, *op.src)
    )  # type: ignore[return-value]


def _view_text(v: Any) -> str:
    if isinstance(v, Cells):
        return f"cells[{v.start}:{v.start + v.stride * v.length}:{v.stride}]"
    if isinstance(v, Indexed):
        return f"rows(base={v.base}, row={v.row}, of {v.rows})[slots[{v.slot_start}::{v.slot_stride}][:{v.slot_count}]]"
    return f"{v.dtype}@{v.offset}+{v.stride}*i[:{v.length}]"


def describe(program: Program) -> str:
    """A human-readable listing of ``program``, one operation a line."""
    lines = [
        f"# {program.name} seed={program.seed} family={program.family} cells={program.n} "
        f"slots={program.m} ops={len(program.ops)} segment={program.segment}"
    ]
    for k, op in enumerate(program.ops):
        if op.kind == "int_write":
            lines.append(f"{k:3d} {_view_text(op.dst)} = {_view_text(op.src[0])} ^ {op.pattern:#x}")
            continue
        u, w = _view_text(op.src[0]), _view_text(op.src[1])
        z = f"{op.a:+.3f}*{u}*{w}" if op.kind == "mul" else f"{op.a:+.3f}*{u} {op.b:+.3f}*{w}"
        extra = f" + {op.sigma:g}*N(0,1)" if op.sigma > 0 else ""
        mask = f" * [U<{op.keep:g}]" if op.keep < 1 else ""
        lines.append(f"{k:3d} {_view_text(op.dst)} = {op.act}({z} {op.c:+.3f}{extra}){mask}")
    return "\n".join(lines)


def to_json(program: Program) -> str:
    """``program`` as canonical JSON."""
    return json.dumps(program.to_dict(), sort_keys=True)
