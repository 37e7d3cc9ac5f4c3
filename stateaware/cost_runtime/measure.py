"""Measured step time and peak memory: CUDA allocator on GPU, ``torch.profiler`` on CPU.

Every peak here is an observation of real allocations, never a prediction (a budget is
checked against what was measured, not modelled); ``PEAK_SOURCES`` names where each came from.

NOTE [ CPU peaks from the profiler ]
    With ``profile_memory=True`` the profiler records one raw ``[memory]`` event per
    allocation (+bytes) and free (-bytes) in the kineto results; summing them in time order
    gives the allocated bytes over the profiled window *relative to its start*, and the
    running maximum is the window's peak. (The aggregated ``key_averages()`` view reports 0
    for these events, so it is not used.) Frees of blocks allocated before the window are
    not reported, so the caller clears gradients first and adds the bytes live at the
    start — the tensors it knows to be live. Profiling costs about a second once per
    process and tens of milliseconds per step, so the peak is measured in one extra,
    untimed step per method (``peak_step``) and never inside a timed step.

NOTE [ The profiler's USDT lines on stderr ]
    torch 2.14's kineto writes ``USDT:... profiler_start`` / ``profiler_stop`` to fd 2
    (``std::cerr``) each time a window opens and closes, so a timing cohort's logs carry
    two lines per measured step. They are logged at kineto's USDT level (5), above ERROR
    (4), so the one switch kineto reads, ``KINETO_LOG_LEVEL`` (read once, when kineto
    initializes), can hide them only by also hiding kineto's errors (level 6); no profiler
    option or ``torch._C`` switch turns them off. So ``window_peak`` points fd 2 at a
    temporary file while the profiler enters and while it exits — never while ``fn`` runs
    — then restores fd 2 and writes back every captured line except those starting with
    ``USDT:``. Errors kineto prints there still reach stderr, after the edge that printed
    them; another thread's stderr text written during an edge is delayed, not lost — but
    one: on a machine where no CUDA device is visible, kineto probes for one when the first
    window closes, even for a CPU-only profile, and logs ``ERROR: ... gpuGetDeviceCount
    failed with code 35`` (no driver). That line says nothing about the measurement, and
    every CPU run printed it once per process, so it is dropped too, only there.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from stateaware.clocks import StepTime, collector_paused, time_step

__all__ = [
    "PEAK_SOURCES",
    "Peak",
    "allocated_window",
    "live_bytes",
    "synchronize",
    "timed_steps",
    "peak_step",
    "window_peak",
]

#: Where a peak came from (``timings.peak_source``).
PEAK_SOURCES = ("cuda_allocator", "torch_profiler")

#: How kineto begins a USDT-level log line (its level name, then ``:``); the only lines
#: dropped from stderr (NOTE [ The profiler's USDT lines on stderr ]).
_USDT_LINE_PREFIX = b"USDT:"

#: Kineto's line when it finds no CUDA driver (dropped only where no CUDA device is visible).
_NO_DEVICE_LINE = b"gpuGetDeviceCount failed"


def _noise(line: bytes, no_device: bool) -> bool:
    """Whether ``line`` is one kineto writes at a window's edge that says nothing (see the NOTE)."""
    return line.startswith(_USDT_LINE_PREFIX) or (no_device and line.startswith(b"ERROR:") and _NO_DEVICE_LINE in line)


@dataclass(frozen=True)
class Peak:
    """A measured peak: allocated bytes (and reserved bytes on CUDA; None on CPU)."""

    allocated_bytes: int
    reserved_bytes: int | None
    source: str


def synchronize(device: torch.device | str) -> None:
    """Wait for queued device work (a no-op on CPU) — before every clock read."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def live_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (each storage counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def timed_steps(step: Callable[[int], None], *, warmup: int, steps: int, device: torch.device | str) -> list[StepTime]:
    """Run ``warmup`` then ``steps`` calls of ``step(index)``; a ``StepTime`` each.

    The device is synchronized before the clocks start and before they are read, so a
    step's wall time covers its queued device work; its CPU time is the calling thread's
    (NOTE [ Two clocks ] in ``stateaware.clocks``). ``index`` counts all calls from 0 (it
    selects the step's rows); the returned step numbers count warm-ups and measured steps
    from 0 each. The garbage collector never runs during the series (NOTE [ No garbage
    collection inside a timed step ] in ``stateaware.clocks``).
    """
    out = []
    with collector_paused():
        for call in range(warmup + steps):
            wall_ms, cpu_ms = time_step(functools.partial(step, call), lambda: synchronize(device))
            out.append(StepTime(call < warmup, call if call < warmup else call - warmup, wall_ms, cpu_ms))
    return out


def window_peak(fn: Callable[[], object]) -> tuple[int, int]:
    """Run ``fn`` under the CPU profiler; ``(peak, end)`` allocated bytes relative to the start.

    See NOTE [ CPU peaks from the profiler ]. Returns the running maximum of the summed
    raw ``[memory]`` events (at least 0) and the net change at the end of the window.
    The profiler's ``USDT:`` lines are kept off stderr; everything else it or ``fn``
    writes there is kept (NOTE [ The profiler's USDT lines on stderr ]).
    """
    with _quiet_edges(profile(activities=[ProfilerActivity.CPU], profile_memory=True)) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        running += event.nbytes()
        peak = max(peak, running)
    return peak, running


def allocated_window(fn: Callable[[], object], device: torch.device | str) -> tuple[int, int]:
    """``(peak, end)`` allocated bytes of ``fn`` relative to its start, on ``device``: the
    CUDA allocator's peak there, ``window_peak`` on a CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start, torch.cuda.memory_allocated(device) - start
    return window_peak(fn)


@contextlib.contextmanager
def _stderr_without_usdt_lines() -> Iterator[None]:
    """Capture fd 2 for the body, then write back every line but kineto's noise (``_noise``).

    fd 2 is restored in ``finally``, so an exception in the body loses nothing; where fd 2
    is not open there is nothing to filter and the body runs as is.
    """
    if sys.stderr is not None:
        sys.stderr.flush()  # Python's pending text belongs before the captured stretch
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            if sys.stderr is not None:
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            no_device = not torch.cuda.is_available()
            kept = b"".join(line for line in captured if not _noise(line, no_device))
            while kept:
                kept = kept[os.write(2, kept) :]


@contextlib.contextmanager
def _quiet_edges(manager: contextlib.AbstractContextManager) -> Iterator[object]:
    """Enter and exit ``manager`` without kineto's USDT lines; its body's stderr is untouched."""
    with _stderr_without_usdt_lines():
        entered = manager.__enter__()
    try:
        yield entered
    except BaseException:
        with _stderr_without_usdt_lines():
            if not manager.__exit__(*sys.exc_info()):
                raise
    else:
        with _stderr_without_usdt_lines():
            manager.__exit__(None, None, None)


def peak_step(step: Callable[[], None], *, device: torch.device | str, live: Callable[[], int]) -> Peak:
    """The peak of one extra, untimed call of ``step`` on ``device``.

    CUDA: ``reset_peak_memory_stats`` then ``max_memory_allocated``/``max_memory_reserved``.
    CPU: the profiler window peak plus ``live()``, the bytes live when the window opens
    (the caller clears gradients first; NOTE [ CPU peaks from the profiler ]).
    """
    device = torch.device(device)
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        return Peak(
            int(torch.cuda.max_memory_allocated(device)), int(torch.cuda.max_memory_reserved(device)), "cuda_allocator"
        )
    start = live()
    peak, _ = window_peak(step)
    return Peak(start + peak, None, "torch_profiler")
