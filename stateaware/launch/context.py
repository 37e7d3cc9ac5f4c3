"""The system context of one process: how loaded the machine was while it ran.

The worker takes a ``snapshot`` before the cohort kind runs and another after it, and
``context_columns`` turns the pair into the ``processes`` row's context columns
(``stateaware.records.schema``): the 1-minute load average at both ends, the CPU model,
logical CPUs, the process's affinity and the CPUs' frequency governor, the share of CPU
time other processes took on this process's CPUs, torch's thread count, and on CUDA the
device's clocks and temperature at both ends.

Every probe is a plain function taking the file it reads as an argument, so tests feed
fake ``/proc`` and ``/sys`` files; anything unreadable (another OS, a container without
``/sys``) is ``None``, never an error — context describes a run, it never stops one.
Nothing here imports torch: torch is consulted only if the process already loaded it.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stateaware.text import format_cpus, parse_cpus

__all__ = [
    "CpuTimes",
    "Snapshot",
    "load_average",
    "cpu_model",
    "logical_cpus",
    "affinity",
    "format_cpus",
    "parse_cpus",
    "governors",
    "cpu_times",
    "process_cpu_seconds",
    "other_cpu_share",
    "torch_threads",
    "gpu_state",
    "nvml_index",
    "snapshot",
    "context_columns",
]

PROC_LOADAVG = "/proc/loadavg"
PROC_CPUINFO = "/proc/cpuinfo"
PROC_STAT = "/proc/stat"
#: ``{cpu}`` is replaced by the CPU number.
GOVERNOR = "/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def load_average(path: str | Path = PROC_LOADAVG) -> float | None:
    """The 1-minute load average (the first field of ``/proc/loadavg``), or ``os.getloadavg``."""
    text = _read(path)
    if text:
        try:
            return float(text.split()[0])
        except (ValueError, IndexError):
            return None
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def cpu_model(path: str | Path = PROC_CPUINFO) -> str | None:
    """The first ``model name`` in ``/proc/cpuinfo`` (else ``platform.processor()``)."""
    text = _read(path) or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or None


def logical_cpus() -> int | None:
    """The machine's logical CPUs (``os.cpu_count``)."""
    return os.cpu_count()


def affinity() -> tuple[int, ...] | None:
    """The CPUs this process may run on, sorted; ``None`` where the OS does not say."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return tuple(sorted(os.sched_getaffinity(0)))


def governors(cpus: Iterable[int], pattern: str = GOVERNOR) -> str | None:
    """The distinct frequency governors of ``cpus`` (``","``-joined, sorted), where readable."""
    found = set()
    for cpu in cpus:
        text = _read(pattern.format(cpu=cpu))
        if text and text.strip():
            found.add(text.strip())
    return ",".join(sorted(found)) or None


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative busy and total time of some CPUs, in clock ticks (``/proc/stat``)."""

    busy: int
    total: int


def cpu_times(cpus: Iterable[int] | None, path: str | Path = PROC_STAT) -> CpuTimes | None:
    """Busy and total ticks of ``cpus`` (the ``cpuN`` lines; all CPUs when ``None``).

    Total counts user, nice, system, idle, iowait, irq, softirq and steal (guest time is
    already inside user); busy is total less idle and iowait. ``None`` when the file is
    unreadable or names none of ``cpus``.
    """
    text = _read(path)
    if not text:
        return None
    wanted = None if cpus is None else {f"cpu{c}" for c in cpus}
    busy = total = 0
    seen = False
    for line in text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu") or fields[0] == "cpu":
            continue
        if wanted is not None and fields[0] not in wanted:
            continue
        try:
            values = [int(v) for v in fields[1:9]]
        except ValueError:
            continue
        values += [0] * (8 - len(values))
        line_total = sum(values)
        total += line_total
        busy += line_total - values[3] - values[4]
        seen = True
    return CpuTimes(busy, total) if seen else None


def process_cpu_seconds() -> float:
    """This process's user + system CPU seconds (every thread; children excluded)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def other_cpu_share(
    before: CpuTimes | None, after: CpuTimes | None, own_seconds: float, ticks_per_second: float
) -> float | None:
    """The share of the CPUs' time that other processes took between two readings.

    ``(busy_after - busy_before - own) / (total_after - total_before)``, with this
    process's own CPU seconds ``own_seconds`` converted to ticks; clamped to ``[0, 1]``
    (tick rounding can push a quiet reading a little below 0). ``None`` when either
    reading is missing or no time passed.
    """
    if before is None or after is None:
        return None
    total = after.total - before.total
    if total <= 0:
        return None
    others = after.busy - before.busy - own_seconds * ticks_per_second
    return min(1.0, max(0.0, others / total))


def torch_threads(modules: Mapping[str, Any] | None = None) -> int | None:
    """``torch.get_num_threads()`` if torch is already imported (never imports it)."""
    torch = (sys.modules if modules is None else modules).get("torch")
    if torch is None:
        return None
    try:
        return int(torch.get_num_threads())
    except Exception:  # noqa: BLE001 - a half-imported torch describes nothing
        return None


def gpu_state(index: int, nvml: Any = None) -> dict[str, Any]:
    """Name, SM and memory clocks (MHz) and temperature (°C) of GPU ``index`` via NVML.

    ``nvml`` is the ``pynvml`` module (imported here when not given, so tests pass a stub);
    without it, or on any NVML error, the empty dict.
    """
    if nvml is None:
        try:
            import pynvml as nvml  # lazy: optional, installed with the CUDA stack, not required
        except ImportError:
            return {}
    try:
        nvml.nvmlInit()
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(int(index))
            name = nvml.nvmlDeviceGetName(handle)
            return {
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "sm_clock_mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
                "mem_clock_mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
                "temperature_c": int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            }
        finally:
            nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML errors (no driver, no permission) leave context empty
        return {}


def nvml_index(device: str, visible: str | None) -> int | None:
    """NVML's index of torch device ``device`` (``"cuda"``, ``"cuda:1"``); ``None`` off CUDA.

    NVML numbers physical GPUs, torch the visible ones: with ``CUDA_VISIBLE_DEVICES``
    (``visible``) listing integers, torch's ``cuda:i`` is NVML's ``visible[i]``; with
    UUIDs or no list, ``i`` itself.
    """
    kind, _, number = str(device).partition(":")
    if kind != "cuda":
        return None
    index = int(number) if number.isdigit() else 0
    listed = [v.strip() for v in (visible or "").split(",") if v.strip()]
    if index < len(listed) and all(v.isdigit() for v in listed):
        return int(listed[index])
    return index


@dataclass(frozen=True)
class Snapshot:
    """Readings at one end of a process."""

    load: float | None
    cpus: tuple[int, ...] | None
    times: CpuTimes | None
    own_seconds: float
    gpu: dict[str, Any] = field(default_factory=dict)


def snapshot(
    *, gpu_index: int | None = None, stat: str | Path = PROC_STAT, loadavg: str | Path = PROC_LOADAVG, nvml: Any = None
) -> Snapshot:
    """Read the load, this process's CPUs and their times, its CPU seconds and, with
    ``gpu_index``, the GPU's clocks and temperature."""
    cpus = affinity()
    return Snapshot(
        load_average(loadavg),
        cpus,
        cpu_times(cpus, stat),
        process_cpu_seconds(),
        gpu_state(gpu_index, nvml) if gpu_index is not None else {},
    )


def context_columns(
    before: Snapshot,
    after: Snapshot,
    *,
    cpuinfo: str | Path = PROC_CPUINFO,
    governor: str = GOVERNOR,
    modules: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``processes`` context columns from the snapshots at the two ends of a process."""
    cpus = after.cpus
    ticks = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
    return {
        "load_before": before.load,
        "load_after": after.load,
        "cpu_model": cpu_model(cpuinfo),
        "logical_cpus": logical_cpus(),
        "affinity": format_cpus(cpus) if cpus else None,
        "cpu_governor": governors(cpus, governor) if cpus else None,
        "other_cpu_share": other_cpu_share(before.times, after.times, after.own_seconds - before.own_seconds, ticks),
        "process_cpu_s": after.own_seconds - before.own_seconds,
        "torch_threads": torch_threads(modules),
        "gpu_name": after.gpu.get("name") or before.gpu.get("name"),
        "gpu_sm_clock_mhz_start": before.gpu.get("sm_clock_mhz"),
        "gpu_sm_clock_mhz_end": after.gpu.get("sm_clock_mhz"),
        "gpu_mem_clock_mhz_start": before.gpu.get("mem_clock_mhz"),
        "gpu_mem_clock_mhz_end": after.gpu.get("mem_clock_mhz"),
        "gpu_temperature_c_start": before.gpu.get("temperature_c"),
        "gpu_temperature_c_end": after.gpu.get("temperature_c"),
    }
