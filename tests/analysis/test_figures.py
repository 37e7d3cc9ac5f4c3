"""Figures 1 and 3: real PNGs that show the series they were given, read back from the axes."""

from __future__ import annotations

import pytest
from stateaware.analysis.figures import Figure1, Figure3, figure1, figure3

GIB = 1 << 30
MIB = 1 << 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# A synthetic 44 GiB-shaped summary (not the paper's numbers): two methods over budget,
# two at one spot (identical peak, near-identical time).
SUMMARY = [
    {"method": "joint", "mean_ms": 3100.0, "peak_bytes": 42 * GIB},
    {"method": "eager_whole", "mean_ms": 3700.0, "peak_bytes": 43 * GIB},
    {"method": "regions", "mean_ms": 3900.0, "peak_bytes": 26 * GIB},
    {"method": "functional", "mean_ms": 3950.0, "peak_bytes": 40 * GIB},
    {"method": "whole", "mean_ms": 3951.0, "peak_bytes": 40 * GIB},
    {"method": "agnostic", "mean_ms": 3050.0, "peak_bytes": 45 * GIB + 300 * MIB},
    {"method": "eager", "mean_ms": 2850.0, "peak_bytes": 46 * GIB},
]
BUDGET = 44 * GIB


def assert_real_png(path, pixels):
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG_MAGIC
    image = mpimg.imread(path)
    assert image.shape[:2] == (pixels[1], pixels[0]) == (600, 1200)
    # Not a blank canvas: a figure with bars has many distinct colours.
    assert len({tuple(px) for px in image.reshape(-1, image.shape[-1])[::97]}) > 5


def test_figure1_shows_every_method_with_time_peak_and_budget_hatching(tmp_path):
    fig = figure1(SUMMARY, BUDGET, tmp_path / "report" / "figure1.png")
    assert isinstance(fig, Figure1)
    assert_real_png(fig.path, fig.pixels)
    assert fig.methods == (
        "Joint (ours)",
        "Eager/whole planner",
        "Fixed regions",
        "Functional",
        "Whole snapshots",
        "State-agnostic",
        "Eager",
    )
    assert fig.time_unit == "s"
    assert fig.times == pytest.approx((3.1, 3.7, 3.9, 3.95, 3.951, 3.05, 2.85))
    assert fig.hatched == (False, False, False, False, False, True, True)
    assert fig.labels == (
        "3.10 s, 42.0 GiB",
        "3.70 s, 43.0 GiB",
        "3.90 s, 26.0 GiB",
        "3.95 s, 40.0 GiB",
        "3.95 s, 40.0 GiB",
        "3.05 s, 45.3 GiB, over budget",
        "2.85 s, 46.0 GiB, over budget",
    )
    assert fig.budget_label == "44.0 GiB logical budget"


def test_figure1_at_cpu_scale_reads_in_milliseconds_and_mebibytes(tmp_path):
    summary = [
        {
            "method": r["method"],
            "mean_ms": r["mean_ms"] / 500,
            "peak_bytes": r["peak_bytes"] // 1000,
            "label": r["method"].upper(),
        }
        for r in (SUMMARY[0], SUMMARY[5], SUMMARY[2])
    ]
    fig = figure1(summary, BUDGET // 1000, tmp_path / "f1.png")
    assert fig.time_unit == "ms"
    assert fig.methods == ("JOINT", "AGNOSTIC", "REGIONS")
    assert fig.times == pytest.approx((6.2, 6.1, 7.8))
    assert fig.labels == ("6.20 ms, 43.0 MiB", "6.10 ms, 46.4 MiB, over budget", "7.80 ms, 26.6 MiB")
    assert fig.hatched == (False, True, False)
    assert fig.budget_label == "45.1 MiB logical budget"


def test_figure3_places_every_method_shades_the_budget_and_highlights_joint(tmp_path):
    fig = figure3(SUMMARY, BUDGET, tmp_path / "figure3.png")
    assert isinstance(fig, Figure3)
    assert_real_png(fig.path, fig.pixels)
    assert (fig.memory_unit, fig.time_unit) == ("GiB", "s")
    points = dict(zip(fig.methods, zip(fig.peaks, fig.times, strict=True), strict=True))
    assert len(points) == len(SUMMARY)
    assert points["Joint (ours)"] == pytest.approx((42.0, 3.1))
    assert points["State-agnostic"] == pytest.approx((45 + 300 / 1024, 3.05))
    assert points["Eager"] == pytest.approx((46.0, 2.85))
    assert fig.shaded[0] == pytest.approx(44.0) and fig.shaded[1] > 46.0
    assert fig.colors["Joint (ours)"] == "#e07b00"
    assert fig.colors["Eager/whole planner"] == "#1f5fa8"
    # One colour per method, the palette's, in every figure (before, eager and regions shared grey).
    from stateaware.analysis.figures import METHOD_COLOURS

    assert len(set(fig.colors.values())) == len(fig.colors)
    assert fig.colors["Eager"] == METHOD_COLOURS["eager"].lower() != fig.colors["Fixed regions"]
    # Methods drawn at one spot share one label instead of overprinting.
    assert fig.annotations == (
        "Eager",
        "Eager/whole planner",
        "Fixed regions",
        "Functional / Whole snapshots",
        "Joint (ours)",
        "State-agnostic",
    )


def test_a_summary_row_without_its_fields_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"summary row 1 lacks \['peak_bytes'\]"):
        figure1([SUMMARY[0], {"method": "x", "mean_ms": 1.0}], BUDGET, tmp_path / "x.png")
    with pytest.raises(ValueError, match="summary is empty"):
        figure3([], BUDGET, tmp_path / "y.png")
    assert not (tmp_path / "x.png").exists()
