"""The report's Table 10 marks each row whose region/whole direction differs from the paper's.

A calibration row agrees with the paper's when region is faster or slower than whole on the
same side of 1 (time/whole) and smaller, equal or larger in peak (peak/whole), each read at
the three decimals the paper prints: a dense cell's equal peaks are 1.000 there.
"""

from __future__ import annotations

from stateaware.analysis.sections.timing import PAPER_T10, _regions_table


def _row(workload: str, mib: int, fraction: float, live: int, *, time: float, peak: float, cpu: float | None = None):
    return {
        "cohort": "calibration",
        "cell": f"{workload}-{mib}MiB-f{fraction:g}-l{live}",
        "workload": workload,
        "buffer_bytes": mib * 4096,
        "write_fraction": fraction,
        "live_segments": live,
        "processes": 1,
        "peak_per_whole": peak,
        "time_per_whole": time,
        "peak_per_eager": 1.5,
        "time_per_eager": 2.5,
        "cpu_time_per_whole": time if cpu is None else cpu,
        "cpu_time_per_eager": 2.5,
    }


def _direction_cells(lines: list[str]) -> dict[str, str]:
    """workload/MiB/write%/live -> the row's last cell."""
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and "---" not in line][1:]
    return {f"{r[0][2:]}/{r[1].split()[0]}/{r[2]}/{r[3]}": r[-1].removesuffix(" |") for r in rows}


def test_rows_pointing_another_way_than_the_papers_are_marked():
    assert PAPER_T10[("feature_queue", 64, 0.001, 1)][1] > 1  # the paper: region slower there
    rows = [
        _row("feature_queue", 1024, 0.001, 64, time=0.45, peak=0.05),  # paper .390 / .051: same
        _row("feature_queue", 64, 0.001, 1, time=0.9, peak=0.6),  # paper 1.134: region slower
        _row("feature_queue", 1024, 1.0, 64, time=1.2, peak=1.0004),  # 1.000 as printed: equal
        _row("prototype_memory", 1024, 1.0, 1, time=0.97, peak=1.02),  # paper 1.061 / 1.000
    ]
    lines = _regions_table("calibration", rows, "wall")
    assert _direction_cells(lines) == {
        "feature_queue/1024/0.1/64": "same",
        "feature_queue/64/0.1/1": "**differs** (time: ours faster, paper slower)",
        "feature_queue/1024/100/64": "same",
        "prototype_memory/1024/100/1": "**differs** (time: ours faster, paper slower; peak: ours larger, paper equal)",
    }
    assert "Direction vs paper: 2 of 4 rows point another way" in "\n".join(lines)


def test_the_direction_is_read_on_the_clock_the_table_shows():
    # Wall says region faster (0.9), the thread's CPU clock slower (1.1); the paper has 1.134.
    row = _row("feature_queue", 64, 0.001, 1, time=0.9, peak=0.6, cpu=1.1)
    assert _direction_cells(_regions_table("calibration", [row], "cpu")) == {"feature_queue/64/0.1/1": "same"}
    assert _direction_cells(_regions_table("calibration", [row], "wall")) == {
        "feature_queue/64/0.1/1": "**differs** (time: ours faster, paper slower)"
    }
