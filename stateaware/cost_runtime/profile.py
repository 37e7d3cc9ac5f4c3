"""The profiling pass: measure each segment option's r, q and c on this hardware (paper §4).

For segment ``i`` and each option (``eager``, ``whole``, ``region``) the pass runs the
segment in isolation, on the state and input the step's earlier segments produced, and
measures

``retained_bytes`` (r)  allocated bytes still live after the segment's forward (what it
                        keeps for its backward, its output included);
``temp_bytes`` (q)      the peak above that during the forward and the backward (recompute,
                        snapshot copies, journal undo/redo, gradients; the loss for the last
                        segment);
``ms`` (c)              the least wall time of forward plus backward over ``repeats`` runs
                        (the least-contended run: the CPUs may be shared).

A fourth, *state-oblivious* replay (``torch.utils.checkpoint`` with the state hidden in a
closure — wrong gradients, right costs for a replay that preserves nothing) measures what
replay costs without preservation; each replay option's ``state_*`` fields are its
excess over that (clamped to ``[0, total]``), which is all the state-agnostic planner
omits. ``persistent_bytes`` is the bytes live at a step's start: state, input, weights
and the step's row indices (gradients are inside each segment's ``q``). The provenance also records the measured peak
of one whole all-eager step (``eager_step_peak_bytes``), the budget placement's upper
anchor.

Bytes come from the CUDA allocator or the CPU profiler (``measure.window_peak``), never
from arithmetic on shapes. The model ``P + sum r + max q`` then over-approximates the
measured step peak: a segment's temporaries are charged at the point where every earlier
retention is still live.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from stateaware.cost_runtime.measure import allocated_window as _window
from stateaware.cost_runtime.measure import synchronize
from stateaware.cost_runtime.method_steps import measure
from stateaware.cost_runtime.workloads import Shape, Workload, build, loss_of, segment_forward, step_rows
from stateaware.torch_replay import Region, checkpoint

__all__ = ["PROFILED_OPTIONS", "profile_card", "persistent_bytes", "add_state_parts", "measurement_provenance"]

#: The card options the pass measures, in card order.
PROFILED_OPTIONS = ("eager", "whole", "region")


def persistent_bytes(workload: Workload, rows: Any) -> int:
    """Bytes every policy pays: the workload's persistent tensors plus the step's indices."""
    index = [t for group in (rows.reads, rows.writes, rows.regions) for t in group if t is not None]
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in index}
    return workload.persistent_bytes() + sum(seen.values())


def add_state_parts(cost: dict[str, Any], base: dict[str, Any]) -> None:
    """Set a replay option's ``state_*`` fields: its excess over ``base``, the same segment
    replayed without preservation, clamped to ``[0, total]`` (card.py NOTE [ The state_* fields ])."""
    for part, total in (
        ("state_retained_bytes", "retained_bytes"),
        ("state_temp_bytes", "temp_bytes"),
        ("state_ms", "ms"),
    ):
        excess = cost[total] - base[total]
        cost[part] = type(cost[total])(min(max(excess, 0), cost[total]))


def measurement_provenance(device: torch.device, repeats: int, eager_peak: int) -> dict[str, Any]:
    """Where and how a card was measured: device, torch, threads, repeats, time, peak source,
    and the measured peak of one all-eager step."""
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": int(repeats),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "peak_source": "cuda_allocator" if device.type == "cuda" else "torch_profiler",
        # The measured peak of one all-eager step: the upper anchor of budget placement
        # (cost_runtime.plans NOTE [ Budget positions ]), as the paper's eager anchor is measured.
        "eager_step_peak_bytes": int(eager_peak),
    }


def _segment_runner(workload: Workload, rows: Any, i: int, option: str, x: torch.Tensor):
    shape, state = workload.shape, workload.state
    u, v = workload.weights[i]
    args = (shape, state, u, v, x, rows.reads[i], rows.writes[i])
    if option == "eager":
        return lambda: segment_forward(*args)
    if option == "whole":
        return lambda: checkpoint(segment_forward, *args, state=[state], preserve="whole")
    if option == "region":
        return lambda: checkpoint(segment_forward, *args, state=[Region(state, rows.regions[i])], preserve="region")
    # "oblivious": a replay that preserves nothing (the state is invisible to it).
    return lambda: torch_checkpoint(
        lambda xx: segment_forward(shape, state, u, v, xx, rows.reads[i], rows.writes[i]), x, use_reentrant=False
    )


def _backward(y: torch.Tensor, last: bool) -> None:
    if last:
        loss_of(y).backward()
    else:
        y.backward(torch.full_like(y, 1.0 / y.numel()))


def _measure(
    workload: Workload, rows: Any, i: int, option: str, x_in: torch.Tensor, *, repeats: int, device: torch.device
) -> dict[str, float]:
    last = i == workload.shape.live_segments - 1
    saved_state = workload.state.clone()
    run = _segment_runner(workload, rows, i, option, x_in)

    def reset() -> None:
        with torch.no_grad():
            workload.state.copy_(saved_state)
        for p in workload.params:
            p.grad = None
        if x_in.grad is not None:
            x_in.grad = None

    box: dict[str, torch.Tensor] = {}
    reset()
    peak_f, retained = _window(lambda: box.__setitem__("y", run()), device)
    del box["y"]
    reset()
    # Forward and backward in one window: the CPU profiler drops frees of blocks allocated
    # before its window (measure NOTE), so the backward is never measured on its own.
    peak_fb, _ = _window(lambda: _backward(run(), last), device)
    temp = max(peak_f, peak_fb) - retained
    times = []
    for _ in range(repeats):
        reset()
        synchronize(device)
        start = time.perf_counter()
        _backward(run(), last)
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    reset()
    return {"retained_bytes": int(max(retained, 0)), "temp_bytes": int(temp), "ms": float(min(times))}


def _eager_step_peak(shape: Shape, *, seed: int, device: torch.device) -> int:
    _, peak = measure(shape, ("eager",) * shape.live_segments, seed=seed, warmup=1, steps=0, device=device)
    return peak.allocated_bytes


def profile_card(
    shape: Shape,
    *,
    seed: int,
    device: str | torch.device = "cpu",
    repeats: int = 5,
    provenance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Measure a profile card document for ``shape`` (FP32) on ``device``.

    Returns the JSON-ready document ``{"persistent_bytes", "segments", "provenance"}``
    (see ``stateaware.planner.profile_card``). Deterministic in what it runs (``seed``, step 0's
    rows); the measured numbers are this machine's. ``repeats`` timed runs per option
    (the least is kept).
    """
    device = torch.device(device)
    workload = build(shape, seed=seed, device=device)
    rows = step_rows(shape, seed=seed, step=0, device=device)
    x = workload.x0
    # Warm-up: the first calls of each path (allocator, kernels, the profiler itself) are
    # slower than the rest; measured once and discarded so segment 0 is not penalised.
    for opt in (*PROFILED_OPTIONS, "oblivious"):
        _measure(workload, rows, 0, opt, x.detach(), repeats=1, device=device)
    segments = []
    for i, (u, v) in enumerate(workload.weights):
        x_in = x.detach().requires_grad_(i > 0)  # x0 needs no gradient in a real step
        measured = {
            opt: _measure(workload, rows, i, opt, x_in, repeats=repeats, device=device)
            for opt in (*PROFILED_OPTIONS, "oblivious")
        }
        base = measured.pop("oblivious")
        for opt in ("whole", "region"):
            add_state_parts(measured[opt], base)
        segments.append(measured)
        with torch.no_grad():  # advance to the next segment's input and state
            x = segment_forward(shape, workload.state, u, v, x, rows.reads[i], rows.writes[i])
    eager_peak = _eager_step_peak(shape, seed=seed, device=device)
    doc_provenance = {
        "shape": shape.to_dict(),
        "seed": int(seed),
        **measurement_provenance(device, repeats, eager_peak),
        **(provenance or {}),
    }
    return {
        "persistent_bytes": int(persistent_bytes(workload, rows)),
        "segments": segments,
        "provenance": doc_provenance,
    }
