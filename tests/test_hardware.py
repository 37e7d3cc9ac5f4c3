"""hardware=auto: h100 only on a visible CUDA device with enough memory."""

from __future__ import annotations

import os
import stat

import pytest

from stateaware.hardware import choose_profile, visible_gpus


def _fake_nvidia_smi(tmp_path, monkeypatch, mib: int):
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho '0, NVIDIA H200, {mib}, 570.1'\necho '1, NVIDIA T4, 15360, 570.1'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_no_gpu_means_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert visible_gpus() == [] and choose_profile(80) == "cpu"


@pytest.mark.parametrize("mib, mask, expected", [(143771, None, "h100"), (40960, None, "cpu"), (143771, "1", "cpu")])
def test_the_largest_visible_gpu_decides(monkeypatch, tmp_path, mib, mask, expected):
    _fake_nvidia_smi(tmp_path, monkeypatch, mib)
    if mask is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    assert choose_profile(80) == expected


def test_resolved_config_names_the_profile(compose, monkeypatch, tmp_path):
    from stateaware.config import resolve_hardware

    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"].split(os.pathsep, 1)[-1])
    _fake_nvidia_smi(tmp_path, monkeypatch, 143771)
    cfg = resolve_hardware(compose("cohort=demo"))
    assert cfg.hardware.name == "h100" and cfg.hardware.device == "cuda" and cfg.hardware.scale == 1.0
    assert resolve_hardware(compose("cohort=demo", "hardware=cpu")).hardware.name == "cpu"
