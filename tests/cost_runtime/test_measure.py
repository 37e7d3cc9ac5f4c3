"""Measured peaks: the CPU profiler window sums raw allocation events exactly."""

from __future__ import annotations

import os

import pytest
import torch

from stateaware.cost_runtime.measure import _stderr_without_usdt_lines, live_bytes, peak_step, timed_steps, window_peak

MIB = 1 << 20


def test_window_peak_is_exact_for_a_known_allocation_pattern():
    def pattern():
        a = torch.empty(MIB, dtype=torch.uint8)
        b = torch.empty(3 * MIB, dtype=torch.uint8)
        del a
        c = torch.empty(MIB, dtype=torch.uint8)
        del b, c

    peak, end = window_peak(pattern)
    assert peak == 4 * MIB
    assert end == 0


def test_window_peak_writes_no_usdt_line_to_fd2_and_keeps_its_peak(capfd):
    def four_mib():
        os.write(2, b"fn's own stderr line\n")
        block = torch.empty(4 * MIB, dtype=torch.uint8)
        del block

    # Twice: the first window in a process also initializes kineto.
    assert window_peak(four_mib) == (4 * MIB, 0)
    assert window_peak(four_mib) == (4 * MIB, 0)
    err = capfd.readouterr().err
    assert "USDT" not in err
    assert err.count("fn's own stderr line\n") == 2


def test_window_peak_stops_the_profiler_when_fn_raises(capfd):
    def fails():
        raise ValueError("inside the window")

    with pytest.raises(ValueError, match="inside the window"):
        window_peak(fails)
    assert not torch.autograd._profiler_enabled()
    assert window_peak(lambda: torch.empty(MIB, dtype=torch.uint8)) == (MIB, 0)
    assert "USDT" not in capfd.readouterr().err


def test_stderr_filter_drops_only_usdt_lines_and_restores_fd2_on_error(capfd):
    with pytest.raises(RuntimeError):
        with _stderr_without_usdt_lines():
            os.write(
                2,
                b"USDT:2026-11-29 18:09:37 1:1 SyncActivityProfilerHandler.cpp:39] profiler_start\n"
                b"ERROR:2026-11-29 18:09:37 1:1 DeviceProperties.cpp:56] a real error\n"
                b"no newline at the end",
            )
            raise RuntimeError
    os.write(2, b"|after\n")
    assert capfd.readouterr().err == (
        "ERROR:2026-11-29 18:09:37 1:1 DeviceProperties.cpp:56] a real error\nno newline at the end|after\n"
    )


@pytest.mark.parametrize("cuda_visible", [False, True])
def test_the_no_driver_line_is_dropped_only_where_no_cuda_device_is_visible(capfd, monkeypatch, cuda_visible):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_visible)
    no_driver = b"ERROR:2026-12-02 14:23:50 1:1 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n"
    with _stderr_without_usdt_lines():
        os.write(2, no_driver + b"ERROR:2026-12-02 14:23:50 1:1 Other.cpp:1] a real error\n")
    expected = b"ERROR:2026-12-02 14:23:50 1:1 Other.cpp:1] a real error\n"
    assert capfd.readouterr().err == ((no_driver if cuda_visible else b"") + expected).decode()


def test_a_cpu_profile_on_this_machine_prints_no_profiler_line(capfd):
    window_peak(lambda: torch.empty(MIB, dtype=torch.uint8))
    window_peak(lambda: torch.empty(MIB, dtype=torch.uint8))
    err = capfd.readouterr().err
    assert "USDT" not in err and (torch.cuda.is_available() or "gpuGetDeviceCount" not in err)


def test_peak_step_adds_live_bytes_and_names_its_source():
    keep = torch.empty(2 * MIB, dtype=torch.uint8)
    peak = peak_step(
        lambda: torch.empty(MIB, dtype=torch.uint8), device="cpu", live=lambda: live_bytes([keep, keep[:10]])
    )
    assert peak.source == "torch_profiler"
    assert peak.allocated_bytes == 3 * MIB  # the view shares keep's storage: counted once
    assert peak.reserved_bytes is None


def test_timed_steps_counts_warmups_and_steps_separately():
    seen = []
    out = timed_steps(seen.append, warmup=2, steps=3, device="cpu")
    assert seen == [0, 1, 2, 3, 4]
    assert [(t.warmup, t.step) for t in out] == [(True, 0), (True, 1), (False, 0), (False, 1), (False, 2)]
    assert all(t.wall_ms >= 0 and t.cpu_ms >= 0 for t in out)


class _Cycle:
    """A container that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.parametrize("enabled", [True, False])
def test_no_garbage_collection_runs_inside_a_series_of_timed_steps(enabled):
    """Steps making enough cyclic garbage to trigger collections run with none (NOTE [ No
    garbage collection inside a timed step ]); the collector's state comes back after."""
    import gc

    events: list[tuple[str, int]] = []

    def note(phase, info):
        if phase == "start":
            events.append(("collect", info["generation"]))

    def step(index):
        events.append(("step", index))
        for _ in range(20 * gc.get_threshold()[0]):  # 20 x the allocations that start a collection
            _Cycle()
        events.append(("end", index))

    previous = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    gc.callbacks.append(note)
    try:
        timed_steps(step, warmup=1, steps=3, device="cpu")
        after = gc.isenabled()
    finally:
        gc.callbacks.remove(note)
        (gc.enable if previous else gc.disable)()
    last = events.index(("end", 3))
    # none until the last step ended, though each step made cycles (the garbage may be
    # collected as soon as the series is over)
    assert events[: last + 1] == [(edge, i) for i in range(4) for edge in ("step", "end")]
    assert after is enabled
