"""The two clocks of every timed step, the clock a cohort's comparisons use, and the timing row.

NOTE [ Two clocks ]
    Wall time (``time.perf_counter``) is what a user waits for, but on a shared machine it
    also counts the time the timed thread spent *waiting* for a core that another process
    held. The thread's CPU time (``time.thread_time``: user + system time of the calling
    thread) counts only the time the thread itself ran, so it is far less sensitive to
    neighbours — though not immune: a neighbour still competes for caches and memory
    bandwidth, and frequency may drop. Every timed step records both (``timings.step_ms``
    and ``timings.cpu_ms``); the stability check compares them (their ratio grows when the
    thread waits).

    On a GPU the step's wall time stays the measurement (the device is synchronized before
    each clock read); ``cpu_ms`` there is still the *host* thread's CPU time — the
    launch and synchronization overhead, which includes any spin in the synchronize call —
    never device time. With several intra-op threads a CPU step's work runs on threads
    other than the calling one, so the calling thread's CPU time under-counts it; a
    thread clock is therefore only a fair comparison clock on one thread.

NOTE [ The declared clock ]
    A cohort declares which clock its prespecified comparisons use:
    ``comparisons_clock: cpu | wall`` in its YAML. Unset (``null`` or ``auto``) means
    ``cpu`` on a CPU device with one thread (``hardware.params.cost_runtime.threads: 1``, the CPU
    profile) and ``wall`` otherwise (GPU profiles, several threads). The analysis computes
    every prespecified *time* ratio on the declared clock and reports the other beside it.

NOTE [ No garbage collection inside a timed step ]
    Python's cyclic collector runs whenever enough container objects were allocated, so
    when it runs depends on everything the process made before (imports, earlier
    methods, the semantic checks), not on the step being timed. A full collection in a
    cohort process costs 0.2 s: measured in a calibration process (feature_queue,
    1,024 MiB, 64 live), one step of a method took 431 ms where its others took ~200 ms,
    and its 213.9 ms were a generation-2 collection; a 1-live step of 2 ms can absorb a
    30 ms generation-1 one. So, as ``timeit`` does, a series of timed steps runs with the
    collector paused (``collector_paused``). Memory freed by reference counting
    (tensors, autograd graphs) is freed as ever; only cyclic garbage waits for the series
    to end. No collection runs before the series either: a full one costs that process
    ~0.2 s per method (seven per confirm44 process) and would change no measurement.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CLOCKS",
    "TIME_METRICS",
    "StepTime",
    "collector_paused",
    "time_step",
    "declared_clock",
    "clock_column",
    "timing_rows",
]

#: The clocks a cohort may declare (``comparisons_clock``), and the ``timings`` column of each.
CLOCKS = {"wall": "step_ms", "cpu": "cpu_ms"}

#: Metrics that are step times: a comparison on one of them is computed on the declared clock.
TIME_METRICS = frozenset(CLOCKS.values())


@dataclass(frozen=True)
class StepTime:
    """One timed call: whether it was a warm-up, its number (warm-ups and measured steps each
    count from 0), its wall milliseconds and the calling thread's CPU milliseconds."""

    warmup: bool
    step: int
    wall_ms: float
    cpu_ms: float


def time_step(fn: Callable[[], object], synchronize: Callable[[], None] | None = None) -> tuple[float, float]:
    """Run ``fn`` once; ``(wall_ms, cpu_ms)`` of the call (NOTE [ Two clocks ]).

    ``synchronize`` (e.g. waiting for a CUDA stream) runs before both clocks start and
    before they are read, so the wall time covers queued device work.
    """
    if synchronize is not None:
        synchronize()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    fn()
    if synchronize is not None:
        synchronize()
    cpu1, wall1 = time.thread_time(), time.perf_counter()
    return (wall1 - wall0) * 1e3, (cpu1 - cpu0) * 1e3


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection until the block ends (NOTE [ No garbage collection inside a timed
    step ]); the collector's earlier state comes back afterwards, so a caller that had
    disabled it keeps it disabled."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def declared_clock(cohort: Mapping[str, Any], hardware: Mapping[str, Any]) -> str:
    """The clock ``cohort``'s comparisons use on ``hardware`` (NOTE [ The declared clock ]).

    ``cohort`` and ``hardware`` are the composed config's sections as plain mappings.
    Raises ``ValueError`` for a value other than ``cpu``, ``wall``, ``auto`` or null.
    """
    chosen = cohort.get("comparisons_clock")
    if chosen in CLOCKS:
        return str(chosen)
    if chosen not in (None, "auto"):
        raise ValueError(
            f"cohort {cohort.get('name')!r}: comparisons_clock={chosen!r}; allowed values are "
            f"{', '.join(CLOCKS)} or auto (cpu on a one-thread CPU profile, else wall)"
        )
    device = str(hardware.get("device", "cpu"))
    params = hardware.get("params") or {}
    # "costrt": the section's name in runs recorded before it was renamed cost_runtime
    threads = (params.get("cost_runtime") or params.get("costrt") or {}).get("threads")
    return "cpu" if device == "cpu" and threads is not None and int(threads) == 1 else "wall"


def clock_column(clock: str) -> str:
    """The ``timings`` column that holds ``clock`` (``wall`` -> ``step_ms``, ``cpu`` -> ``cpu_ms``)."""
    try:
        return CLOCKS[clock]
    except KeyError:
        raise ValueError(f"unknown clock {clock!r}; valid clocks are: {', '.join(CLOCKS)}") from None


def timing_rows(times: Iterable[StepTime], **columns: Any) -> list[dict[str, Any]]:
    """The ``timings`` rows of ``times``: the step's clocks plus ``columns`` on every row.

    The one place a timed step becomes a row, so every cohort records both clocks the
    same way.
    """
    return [{"step": t.step, "warmup": t.warmup, "step_ms": t.wall_ms, "cpu_ms": t.cpu_ms, **columns} for t in times]
