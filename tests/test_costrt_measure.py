"""Measured peaks: the CPU profiler window sums raw allocation events exactly."""

from __future__ import annotations

import torch

from stateaware.costrt.measure import live_bytes, peak_step, timed_steps, window_peak

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


def test_peak_step_adds_live_bytes_and_names_its_source():
    keep = torch.empty(2 * MIB, dtype=torch.uint8)
    peak = peak_step(lambda: torch.empty(MIB, dtype=torch.uint8), device="cpu", live=lambda: live_bytes([keep, keep[:10]]))
    assert peak.source == "torch_profiler"
    assert peak.allocated_bytes == 3 * MIB  # the view shares keep's storage: counted once
    assert peak.reserved_bytes is None


def test_timed_steps_counts_warmups_and_steps_separately():
    seen = []
    out = timed_steps(seen.append, warmup=2, steps=3, device="cpu")
    assert seen == [0, 1, 2, 3, 4]
    assert [(w, s) for w, s, _ in out] == [(True, 0), (True, 1), (False, 0), (False, 1), (False, 2)]
    assert all(ms >= 0 for _, _, ms in out)
