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


@pytest.mark.parametrize("hardware", ["cpu", "auto"])
def test_a_cohort_entry_of_scales_is_the_runs_scale(compose, monkeypatch, tmp_path, hardware):
    # three_workload's CPU shapes are 1/256 of the paper's bytes, the others 1/2048: the run's
    # hardware.scale — hence every record's scale — and the budget byte scale follow the entry.
    from stateaware.config import resolve_hardware

    monkeypatch.setenv("PATH", str(tmp_path))  # auto: no nvidia-smi, so the cpu profile
    three = resolve_hardware(compose("cohort=three_workload", f"hardware={hardware}"))
    assert three.hardware.scale == 1 / 256 and three.hardware.params.cost_runtime.byte_scale == 1 / 256
    other = resolve_hardware(compose("cohort=confirm44", f"hardware={hardware}"))
    assert other.hardware.scale == 1 / 2048 and other.hardware.params.cost_runtime.byte_scale == 1 / 2048
    shape = three.hardware.params.cost_runtime.three_workload
    assert shape.buffer_bytes == round((1 << 30) * three.hardware.scale)  # the paper's 1 GiB at that scale


def test_a_command_outside_a_run_reads_the_profile_as_the_cohorts_run_gets_it():
    # python -m stateaware.cost_runtime.freeze --cohort / app.encoder_card read the profile
    # through hardware_file: the same scale as resolve_hardware's, and byte_scale follows it.
    from stateaware.config import ConfigError, hardware_file

    three = hardware_file("cpu", "three_workload")
    assert three["scale"] == 1 / 256 and three["params"]["cost_runtime"]["byte_scale"] == 1 / 256
    other = hardware_file("cpu", "confirm44")
    assert other["scale"] == 1 / 2048 and other["params"]["cost_runtime"]["byte_scale"] == 1 / 2048
    assert hardware_file("cpu") == other
    with pytest.raises(ConfigError, match="hardware=h200: no file .*; valid names are: auto, cpu, h100"):
        hardware_file("h200")
