"""The two clocks of a timed step, the declared comparison clock, and the one timing-row builder."""

from __future__ import annotations

import time

import pytest

from stateaware.clocks import StepTime, clock_column, declared_clock, time_step, timing_rows


def test_a_sleeping_step_takes_wall_time_but_almost_no_cpu_time():
    calls = []
    wall, cpu = time_step(lambda: time.sleep(0.2), synchronize=lambda: calls.append("sync"))
    assert calls == ["sync", "sync"]  # before the clocks start and before they are read
    assert wall >= 200.0
    assert cpu < 100.0  # sleeping costs the thread (almost) nothing, however loaded the machine


def test_a_busy_step_counts_its_cpu_time():
    def spin():
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    wall, cpu = time_step(spin)
    assert cpu >= 50.0 and wall >= cpu * 0.99  # a thread cannot run longer than the clock on the wall


def test_timing_rows_put_both_clocks_and_the_shared_columns_on_every_row():
    rows = timing_rows([StepTime(True, 0, 3.0, 2.5), StepTime(False, 0, 4.0, 3.5)], method="m", device="cpu")
    assert rows == [
        {"step": 0, "warmup": True, "step_ms": 3.0, "cpu_ms": 2.5, "method": "m", "device": "cpu"},
        {"step": 0, "warmup": False, "step_ms": 4.0, "cpu_ms": 3.5, "method": "m", "device": "cpu"},
    ]


@pytest.mark.parametrize(
    "cohort, hardware, clock",
    [
        ({}, {"device": "cpu", "params": {"cost_runtime": {"threads": 1}}}, "cpu"),
        ({"comparisons_clock": "auto"}, {"device": "cpu", "params": {"cost_runtime": {"threads": 1}}}, "cpu"),
        ({}, {"device": "cpu", "params": {"cost_runtime": {"threads": 4}}}, "wall"),
        ({}, {"device": "cpu"}, "wall"),  # threads unknown: the thread clock may under-count
        ({}, {"device": "cuda", "params": {"cost_runtime": {"threads": 1}}}, "wall"),
        ({"comparisons_clock": "cpu"}, {"device": "cuda"}, "cpu"),
        ({"comparisons_clock": "wall"}, {"device": "cpu", "params": {"cost_runtime": {"threads": 1}}}, "wall"),
    ],
)
def test_declared_clock_defaults_to_cpu_only_on_one_cpu_thread(cohort, hardware, clock):
    assert declared_clock(cohort, hardware) == clock


def test_unknown_clocks_are_named():
    with pytest.raises(ValueError, match=r"cohort 'x': comparisons_clock='gpu'; allowed values are wall, cpu or auto"):
        declared_clock({"name": "x", "comparisons_clock": "gpu"}, {})
    with pytest.raises(ValueError, match="unknown clock 'gpu'; valid clocks are: wall, cpu"):
        clock_column("gpu")


def test_the_cpu_profile_declares_the_cpu_clock_for_its_timing_cohorts(compose):
    from omegaconf import OmegaConf

    for cohort in ("confirm44", "three_workload", "fair44"):
        cfg = compose(f"cohort={cohort}", "hardware=cpu")
        assert declared_clock(OmegaConf.to_container(cfg.cohort), OmegaConf.to_container(cfg.hardware)) == "cpu"
        cfg = compose(f"cohort={cohort}", "hardware=h100")
        assert declared_clock(OmegaConf.to_container(cfg.cohort), OmegaConf.to_container(cfg.hardware)) == "wall"
