"""The cost runtime's three Torch workloads: a state buffer that segments read and write.

A workload is ``L`` live segments over a state buffer of ``n_rows`` rows of
``granularity_bytes`` (at FP32; FP64 doubles every byte count). Segment ``i``:

1. reads rows ``reads[i]`` of the state and reduces them to a width-``w`` bias ``s``;
2. computes ``z = tanh(x @ U_i) @ V_i + s`` and ``y = x * (0.5 + dropout(sigmoid(z)))`` —
   real matmuls on a ``batch x width`` activation, with ``z`` (hence the backward) depending on
   the state values read at forward;
3. writes rows ``writes[i]`` *in place* (a fraction ``f`` of the buffer; ``f = 1`` writes
   every row), with values derived from ``sigmoid(z)``.

Later segments read what earlier ones wrote and overwrite what earlier ones read, so a
replay of segment ``i`` after the step's forward needs the state as segment ``i`` saw it:
``torch.utils.checkpoint.checkpoint`` then differentiates the wrong values.

The workloads differ in where they write and read (NOTE [ Access patterns ]); their
arithmetic is the same, so their costs differ only through the state traffic.

NOTE [ Access patterns ]
    ``feature_queue``: a ring; segment ``i`` enqueues ``k`` rows at the ring pointer
    (overwrite) and reads the rows the previous segment enqueued and the oldest rows the
    next segment will overwrite. ``prototype_memory``: segment ``i`` selects ``k``
    prototype rows at random (seeded per step) and momentum-updates them
    (``0.9 old + 0.1 new``), reading its own and the next segment's selection.
    ``unrolled_recurrence``: hidden-state blocks; segment ``i`` reads the previous block
    and its own and writes ``tanh(0.5 old + new)`` into its own block.
    With ``f = 1`` every segment writes every row (the update rule stays the workload's)
    and reads at most ``_DENSE_READ_ROWS`` rows.

``functional=True`` (the reference and the ``functional`` method) performs the same
arithmetic out of place: each write makes a new state tensor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = [
    "WORKLOADS",
    "DROPOUT",
    "Shape",
    "Workload",
    "StepRows",
    "build",
    "step_rows",
    "seed_step",
    "segment_forward",
    "loss_of",
]

#: The workload names records use (``timings.workload``).
WORKLOADS = ("feature_queue", "prototype_memory", "unrolled_recurrence")

#: Rows a dense segment reads: a dense write touches every row anyway, and reading the
#: whole buffer would make the read, not the write, the dense cell's cost.
_DENSE_READ_ROWS = 64

#: Dropout probability of the segment's output (its mask is saved as one byte per element).
DROPOUT = 0.1

#: FP32 bytes per element: shapes are declared in FP32 bytes; FP64 doubles them.
_FP32 = 4


@dataclass(frozen=True)
class Shape:
    """One workload shape. Byte sizes are FP32 bytes (``buffer_bytes``, ``granularity_bytes``).

    ``rank`` is the inner dimension of each segment's two matmuls (``x @ U`` is
    ``batch x rank``); it sets the segment's arithmetic without changing its activations.
    """

    workload: str
    buffer_bytes: int
    write_fraction: float
    live_segments: int
    granularity_bytes: int
    width: int
    batch: int
    rank: int

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload={self.workload!r}; valid workloads are: {', '.join(WORKLOADS)}")
        if self.granularity_bytes % _FP32 or self.granularity_bytes <= 0:
            raise ValueError(f"granularity_bytes={self.granularity_bytes} must be a positive multiple of 4")
        if self.buffer_bytes < self.granularity_bytes:
            raise ValueError(f"buffer_bytes={self.buffer_bytes} is below one row ({self.granularity_bytes} bytes)")
        if not 0 < self.write_fraction <= 1:
            raise ValueError(f"write_fraction={self.write_fraction} must lie in (0, 1]")
        for name in ("live_segments", "width", "batch", "rank"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")

    @property
    def row_elems(self) -> int:
        return self.granularity_bytes // _FP32

    @property
    def n_rows(self) -> int:
        return self.buffer_bytes // self.granularity_bytes

    @property
    def dense(self) -> bool:
        return self.write_fraction >= 1.0

    @property
    def rows_written(self) -> int:
        """Rows each segment writes: ``ceil(f * n_rows)``, at least one."""
        return self.n_rows if self.dense else max(1, math.ceil(self.write_fraction * self.n_rows))

    def columns(self) -> dict[str, Any]:
        """The record store's workload columns for this shape (FP32 bytes)."""
        return {
            "workload": self.workload,
            "buffer_bytes": int(self.n_rows * self.granularity_bytes),
            "write_fraction": float(self.write_fraction),
            "live_segments": int(self.live_segments),
            "granularity_bytes": int(self.granularity_bytes),
            "width": int(self.width),
            "batch": int(self.batch),
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Workload:
    """Live tensors of one workload instance: the state, the per-segment weights, the input."""

    shape: Shape
    state: torch.Tensor  # (n_rows, row_elems), no grad
    weights: list[tuple[torch.Tensor, torch.Tensor]]  # per segment (U: width x rank, V: rank x width)
    x0: torch.Tensor  # (batch, width), no grad
    seed: int

    @property
    def params(self) -> list[torch.Tensor]:
        return [t for pair in self.weights for t in pair]

    def persistent_bytes(self) -> int:
        """Bytes live at the start of every step: state, weights and input.

        Gradients are not included: backward allocates them segment by segment, and each
        segment's share is inside the temporary bytes the profiling pass measures for it.
        """
        return sum(t.numel() * t.element_size() for t in (self.state, self.x0, *self.params))

    def clone(self) -> Workload:
        """An independent copy (same values) whose weights require grad."""
        return Workload(
            self.shape,
            self.state.clone(),
            [
                (u.detach().clone().requires_grad_(True), v.detach().clone().requires_grad_(True))
                for u, v in self.weights
            ],
            self.x0.clone(),
            self.seed,
        )


@dataclass(frozen=True)
class StepRows:
    """Per segment: rows read, rows written, and the region rows (own and later writes)."""

    reads: tuple[torch.Tensor, ...]
    writes: tuple[torch.Tensor | None, ...]  # None: every row (dense)
    regions: tuple[torch.Tensor, ...]  # union of writes[i:], sorted


def build(
    shape: Shape, *, seed: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> Workload:
    """A fresh workload instance: state, weights and input drawn from ``seed`` (CPU RNG).

    Values are drawn in FP64 on the CPU and cast, so the FP32 and FP64 instances of one seed
    hold the same numbers up to rounding, on any device.
    """
    gen = torch.Generator().manual_seed(int(seed))
    state = torch.randn(shape.n_rows, shape.row_elems, generator=gen, dtype=torch.float64)
    weights = []
    for _ in range(shape.live_segments):
        u = torch.randn(shape.width, shape.rank, generator=gen, dtype=torch.float64) / math.sqrt(shape.width)
        v = torch.randn(shape.rank, shape.width, generator=gen, dtype=torch.float64) / math.sqrt(shape.rank)
        weights.append(
            (
                u.to(device=device, dtype=dtype).requires_grad_(True),
                v.to(device=device, dtype=dtype).requires_grad_(True),
            )
        )
    x0 = torch.randn(shape.batch, shape.width, generator=gen, dtype=torch.float64)
    return Workload(shape, state.to(device=device, dtype=dtype), weights, x0.to(device=device, dtype=dtype), int(seed))


def step_rows(shape: Shape, *, seed: int, step: int, device: str | torch.device = "cpu") -> StepRows:
    """The rows each segment reads and writes in ``step`` (deterministic in seed and step).

    Computed on the CPU, then copied to ``device`` once per step, so the segments' index
    operations never wait on the host.
    """
    n, segments = shape.n_rows, shape.live_segments
    writes: list[torch.Tensor | None]
    if shape.dense:
        writes = [None] * segments
        full = torch.arange(n)
        reads = [_dense_reads(n, step * segments + i) for i in range(segments)]
        regions = [full] * segments
    else:
        writes = [_sparse_writes(shape, seed, step, i) for i in range(segments)]
        reads = [_sparse_reads(shape, writes, seed, step, i) for i in range(segments)]
        regions = [torch.unique(torch.cat(writes[i:])) for i in range(segments)]
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return StepRows(tuple(move(t) for t in reads), tuple(move(t) for t in writes), tuple(move(t) for t in regions))


def seed_step(seed: int, step: int) -> None:
    """Seed the default generators for ``step``: every method draws the same dropout masks.

    The global generators, not a private ``torch.Generator``: the checkpoint stashes and
    restores exactly those around a replay (RNG preservation is part of the contract).
    """
    torch.manual_seed((int(seed) * 1_000_003 + int(step)) % (2**63))


def _dense_reads(n: int, position: int) -> torch.Tensor:
    count = min(n, _DENSE_READ_ROWS)
    return (torch.arange(count) + position * count) % n


def _sparse_writes(shape: Shape, seed: int, step: int, i: int) -> torch.Tensor:
    n, k, segments = shape.n_rows, shape.rows_written, shape.live_segments
    if shape.workload == "feature_queue":
        start = ((step * segments + i) * k) % n
        return (torch.arange(k) + start) % n
    if shape.workload == "prototype_memory":
        gen = torch.Generator().manual_seed((int(seed) * 1_000_003 + step * 997 + i) % (2**63))
        return torch.randperm(n, generator=gen)[:k].clone()  # not a view: keep k indices, not n
    block = i % max(1, n // k)  # unrolled_recurrence: a fixed hidden-state block per time step
    return (torch.arange(k) + block * k) % n


def _sparse_reads(shape: Shape, writes: list, seed: int, step: int, i: int) -> torch.Tensor:
    segments = len(writes)
    if shape.workload == "feature_queue":
        previous = writes[i - 1] if i else _sparse_writes(shape, seed, step - 1, segments - 1)
        upcoming = writes[i + 1] if i + 1 < segments else _sparse_writes(shape, seed, step + 1, 0)
        return torch.cat([previous, upcoming])
    if shape.workload == "prototype_memory":
        upcoming = writes[i + 1] if i + 1 < segments else writes[i]
        return torch.cat([writes[i], upcoming])
    previous = writes[i - 1] if i else writes[segments - 1]
    return torch.cat([previous, writes[i]])


def _to_width(row: torch.Tensor, width: int) -> torch.Tensor:
    if row.shape[0] >= width:
        return row[:width]
    return row.repeat(math.ceil(width / row.shape[0]))[:width]


def _new_rows(shape: Shape, g: torch.Tensor, count: int) -> torch.Tensor:
    # Row values from the activation: its batch mean, fitted to a row, scaled per row so
    # rows differ. Detached: the state carries values, not gradients.
    feature = _to_width(g.detach().mean(0), shape.row_elems)
    scale = 1.0 + torch.arange(count, device=g.device, dtype=g.dtype) / max(count, 1)
    return scale[:, None] * feature[None, :]


def _update(workload: str, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    if workload == "feature_queue":
        return new
    if workload == "prototype_memory":
        return 0.9 * old + 0.1 * new
    return torch.tanh(0.5 * old + new)


class _Tanh(torch.autograd.Function):
    """``tanh`` that saves its input, not its output (NOTE [ Saving inputs only ])."""

    @staticmethod
    def forward(ctx, h):  # type: ignore[override]
        ctx.save_for_backward(h)
        return torch.tanh(h)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (h,) = ctx.saved_tensors
        t = torch.tanh(h)
        return grad * (1 - t * t)


class _Gate(torch.autograd.Function):
    """``x * (0.5 + sigmoid(z) * keep / (1 - p))``, saving ``x``, ``z`` and the dropout mask
    ``keep`` (NOTE [ Saving inputs only ]). Dropout acts on the gate, not on ``x``, so a
    deep stack never multiplies an element by zero (64 dropped gates would zero the output)."""

    @staticmethod
    def forward(ctx, x, z, keep):  # type: ignore[override]
        ctx.save_for_backward(x, z, keep)
        return x * (0.5 + torch.sigmoid(z) * keep / (1 - DROPOUT))

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        x, z, keep = ctx.saved_tensors
        g = torch.sigmoid(z)
        gate = keep / (1 - DROPOUT)
        return grad * (0.5 + g * gate), grad * x * gate * g * (1 - g), None


# NOTE [ Saving inputs only ]
#     The segment's two nonlinearities are autograd Functions that save their *inputs*.
#     A built-in op that saves its own output (``torch.tanh``, ``torch.sigmoid``) makes,
#     under a saved-tensor pack hook that returns the tensor itself, a cycle through C++
#     (output -> grad_fn -> saved output) that Python's collector cannot see; a replay
#     graph built under such a hook then outlives the step with everything it references.
#     Saving inputs keeps every graph acyclic, so all methods free what they should and
#     the measured peaks compare methods, not leaks. The bytes saved are the same. The
#     transactional checkpoint has since been fixed at the root (a replay saves detached
#     aliases, as torch's checkpoint does; ``tests/torch_replay/test_checkpoint.py``), so
#     these Functions are no longer needed for correctness; they stay because the frozen
#     cards (``conf/cards``) and the measured CPU cohorts were taken with them.


def segment_forward(
    shape: Shape,
    state: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    x: torch.Tensor,
    reads: torch.Tensor,
    writes: torch.Tensor | None,
    *,
    functional: bool = False,
):
    """One segment: returns ``y`` (in-place mode, ``state`` written) or ``(y, new_state)``.

    In-place mode writes ``state`` under ``no_grad`` (it never requires grad); functional
    mode leaves ``state`` untouched and returns the next version.
    """
    s = _to_width(state.index_select(0, reads).mean(0), shape.width)
    z = _Tanh.apply(x @ u) @ v + s
    # Dropout: a random mask the replay must draw again identically (RNG preservation),
    # and a quarter-activation of bytes that eager retention keeps and a replay does not.
    keep = torch.rand(x.shape, device=x.device, dtype=x.dtype) >= DROPOUT
    y = _Gate.apply(x, z, keep)
    with torch.no_grad():
        g = torch.sigmoid(z)
        if writes is None:
            new = _update(shape.workload, state, _new_rows(shape, g, shape.n_rows))
            if functional:
                return y, new
            state.copy_(new)
        else:
            new = _update(shape.workload, state.index_select(0, writes), _new_rows(shape, g, writes.shape[0]))
            if functional:
                return y, state.index_copy(0, writes, new)
            state.index_copy_(0, writes, new)
    return y


def loss_of(y: torch.Tensor) -> torch.Tensor:
    """The step's scalar loss on the last segment's output."""
    return (y * y).mean()
