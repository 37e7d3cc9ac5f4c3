"""The system context probes, fed fake /proc and /sys files and a stub NVML."""

from __future__ import annotations

import os
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateaware.launch import context
from stateaware.launch.context import CpuTimes, Snapshot

STAT = """cpu  500 0 100 9000 50 0 0 0 0 0
cpu0 100 0 20 1000 10 0 0 0 0 0
cpu1 200 5 30 2000 20 1 2 3 0 0
cpu2 200 0 50 6000 20 0 0 0 0 0
intr 12345
ctxt 999
"""

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Fake CPU @ 2.00GHz

processor\t: 1
model name\t: Intel(R) Xeon(R) Fake CPU @ 2.00GHz
"""


def test_load_average_reads_the_first_field(tmp_path):
    path = tmp_path / "loadavg"
    path.write_text("1.25 0.80 0.50 2/345 6789\n")
    assert context.load_average(path) == 1.25


def test_cpu_model_reads_the_model_name(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    assert context.cpu_model(path) == "Intel(R) Xeon(R) Fake CPU @ 2.00GHz"


def test_cpu_times_sum_only_the_named_cpus(tmp_path):
    path = tmp_path / "stat"
    path.write_text(STAT)
    # cpu1: user 200 nice 5 system 30 idle 2000 iowait 20 irq 1 softirq 2 steal 3
    assert context.cpu_times([1], path) == CpuTimes(busy=200 + 5 + 30 + 1 + 2 + 3, total=2261)
    both = context.cpu_times([0, 2], path)
    assert both == CpuTimes(busy=120 + 250, total=1130 + 6270)
    assert context.cpu_times(None, path) == CpuTimes(busy=120 + 241 + 250, total=1130 + 2261 + 6270)
    assert context.cpu_times([7], path) is None  # no such CPU line
    assert context.cpu_times([0], tmp_path / "missing") is None


def test_other_cpu_share_subtracts_this_process_and_clamps():
    before, after = CpuTimes(busy=1000, total=4000), CpuTimes(busy=1600, total=5000)
    # 600 busy ticks in 1,000: this process took 2 s at 100 ticks/s = 200, others 400
    assert context.other_cpu_share(before, after, 2.0, 100.0) == pytest.approx(0.4)
    assert context.other_cpu_share(before, after, 7.0, 100.0) == 0.0  # tick rounding below zero
    assert context.other_cpu_share(before, before, 0.0, 100.0) is None  # no time passed
    assert context.other_cpu_share(None, after, 0.0, 100.0) is None


def test_governors_are_distinct_and_sorted(tmp_path):
    for cpu, name in ((0, "performance"), (1, "powersave"), (2, "performance")):
        folder = tmp_path / f"cpu{cpu}"
        folder.mkdir()
        (folder / "gov").write_text(name + "\n")
    pattern = str(tmp_path / "cpu{cpu}" / "gov")
    assert context.governors([0, 2], pattern) == "performance"
    assert context.governors([0, 1, 2], pattern) == "performance,powersave"
    assert context.governors([5], pattern) is None


@pytest.mark.parametrize(
    "value, cpus",
    [("1", (1,)), ("2-3", (2, 3)), ("0,2-3", (0, 2, 3)), (4, (4,)), ([1, "3-4"], (1, 3, 4)), (["2", 0], (0, 2))],
)
def test_parse_cpus_accepts_the_kernels_forms(value, cpus):
    assert context.parse_cpus(value) == cpus


@pytest.mark.parametrize(
    "value, message",
    [
        ("", "'' is not a CPU number"),
        ("3-1", "not a non-negative, increasing"),
        ("x", "'x' is not a CPU number"),
        ([], "is empty"),
        (True, "True is not a CPU number"),
    ],
)
def test_parse_cpus_names_the_bad_piece(value, message):
    with pytest.raises(ValueError, match=message):
        context.parse_cpus(value)


@given(st.sets(st.integers(0, 200), min_size=1))
def test_format_and_parse_cpus_round_trip(cpus):
    text = context.format_cpus(cpus)
    assert context.parse_cpus(text) == tuple(sorted(cpus))
    assert len(text.split(",")) == sum(1 for c in cpus if c - 1 not in cpus)  # one piece per run of CPUs


def test_torch_threads_only_where_torch_is_loaded():
    assert context.torch_threads({}) is None
    assert context.torch_threads({"torch": types.SimpleNamespace(get_num_threads=lambda: 3)}) == 3


class FakeNvml:
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    def __init__(self, fail: bool = False):
        self.fail, self.calls = fail, []

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("handle", index)

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"

    def nvmlDeviceGetClockInfo(self, handle, which):
        return {0: 1980, 1: 3201}[which] + handle[1]

    def nvmlDeviceGetTemperature(self, handle, which):
        return 41


def test_gpu_state_reads_clocks_and_temperature_through_nvml():
    nvml = FakeNvml()
    assert context.gpu_state(2, nvml) == {
        "name": "NVIDIA H200",
        "sm_clock_mhz": 1982,
        "mem_clock_mhz": 3203,
        "temperature_c": 41,
    }
    assert nvml.calls == ["init", "shutdown"]
    assert context.gpu_state(0, FakeNvml(fail=True)) == {}


@pytest.mark.parametrize(
    "device, visible, index",
    [("cpu", None, None), ("cuda", None, 0), ("cuda:1", None, 1), ("cuda:1", "4,6", 6), ("cuda", "GPU-abc", 0)],
)
def test_nvml_index_follows_cuda_visible_devices(device, visible, index):
    assert context.nvml_index(device, visible) == index


def test_context_columns_from_two_snapshots(tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    gov = tmp_path / "gov{cpu}"
    (tmp_path / "gov0").write_text("schedutil\n")
    ticks = os.sysconf("SC_CLK_TCK")
    before = Snapshot(0.5, (0, 1), CpuTimes(100, 1000), 3.0, {"name": "G", "sm_clock_mhz": 1400, "temperature_c": 30})
    after = Snapshot(
        1.75,
        (0, 1),
        CpuTimes(100 + 4 * ticks, 1000 + 10 * ticks),
        5.0,
        {"name": "G", "sm_clock_mhz": 1980, "temperature_c": 55},
    )
    cols = context.context_columns(
        before,
        after,
        cpuinfo=tmp_path / "cpuinfo",
        governor=str(gov),
        modules={"torch": types.SimpleNamespace(get_num_threads=lambda: 1)},
    )
    assert cols["load_before"] == 0.5 and cols["load_after"] == 1.75
    assert cols["other_cpu_share"] == pytest.approx(0.2)  # (4 s busy - 2 s own) / 10 s
    assert cols["process_cpu_s"] == pytest.approx(2.0)
    assert cols["affinity"] == "0-1" and cols["cpu_governor"] == "schedutil"
    assert cols["cpu_model"] == "Intel(R) Xeon(R) Fake CPU @ 2.00GHz" and cols["torch_threads"] == 1
    assert (cols["gpu_sm_clock_mhz_start"], cols["gpu_sm_clock_mhz_end"]) == (1400, 1980)
    assert (cols["gpu_temperature_c_start"], cols["gpu_temperature_c_end"]) == (30, 55)
    assert cols["gpu_mem_clock_mhz_start"] is None and cols["gpu_name"] == "G"


def test_a_real_snapshot_on_this_machine():
    snap = context.snapshot()
    assert snap.cpus == tuple(sorted(os.sched_getaffinity(0)))
    assert snap.times is not None and snap.times.total > 0 and snap.load is not None
