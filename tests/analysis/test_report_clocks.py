"""What ``analysis report`` shows for a timing run whose two clocks differ.

A tiny ``confirm44`` run (two processes, through the worker and the manifest writer, as
``tests/analysis/test_report_golden.py`` runs cohorts) declares ``comparisons_clock: cpu``,
and every measured step's CPU time is made exactly 0.6 of its wall time, so a number on
the wrong clock is off by 40 % — not by the few percent two real clocks differ by, which
rounding could hide. The report must then name a clock on every time it shows, put the
declared clock's means in the per-method table and figures, keep the (wall-clock)
predictions beside the measured wall time, and quote the paper's ratio beside ours.
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

#: CPU time as a fraction of wall time in every measured step of the run.
CPU_OVER_WALL = 0.6

_TIME_HEADER = re.compile(r"\bms\b|time", re.IGNORECASE)


@pytest.fixture(scope="module")
def report(tmp_path_factory, tiny_timing_cards) -> tuple[Path, Path, list[Any]]:
    """``(results, report.md, Figure1s drawn)`` of the tiny confirm44 run described above."""
    from stateaware.analysis.report import build_report
    from stateaware.analysis.sections import timing_figures
    from stateaware.cohorts import load_kind

    from stateaware.cost_runtime import measure
    from stateaware.source import source_hash
    from tests.analysis.test_report_golden import run_cohort
    from tests.cohorts import test_timing as timing_tests

    tmp = tmp_path_factory.mktemp("clocks")
    cards, results = tmp / "cards", tmp / "results"
    results.mkdir()
    shutil.copytree(tiny_timing_cards[0], cards)  # the session's, profiled once; large_sparse is priced
    hardware = timing_tests.tiny_hardware(cards, {"large_sparse": tiny_timing_cards[1]["large_sparse"]})
    doc = timing_tests.cohort("confirm44")
    doc["comparisons_clock"] = "cpu"
    drawn: list[Any] = []
    real_time_step, real_figure1 = measure.time_step, timing_figures.figure1

    def skewed(fn, synchronize=None):
        wall, _ = real_time_step(fn, synchronize)
        return wall, wall * CPU_OVER_WALL

    def recording_figure1(*args, **kwargs):
        drawn.append(real_figure1(*args, **kwargs))
        return drawn[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(measure, "time_step", skewed)
        mp.setattr(timing_figures, "figure1", recording_figure1)  # where the section calls it
        kind = load_kind("timing")
        started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=1)
        run_cohort(results, doc, hardware, kind.expand(doc, hardware, 2), started, source_hash())
        path = build_report(results, tmp / "report", draws=200)
    return results, path, drawn


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``text``: ``(header cells, body rows of cells)``."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines[:-1]):
        if line.startswith("| ") and lines[i + 1].startswith("|---"):
            body = []
            for row in lines[i + 2 :]:
                if not row.startswith("| "):
                    break
                body.append(_cells(row))
            out.append((_cells(line), body))
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _cpu_means(results: Path, column: str) -> dict[str, float]:
    """Per method: the mean over processes of each process's mean measured ``column``."""
    from stateaware.analysis.store.views import connect

    rows = (
        connect(results)
        .execute(
            f"SELECT method, avg(ms) FROM (SELECT method, process_index, avg({column}) AS ms FROM timings "
            "WHERE NOT warmup GROUP BY ALL) GROUP BY method"
        )
        .fetchall()
    )
    return {method: float(ms) for method, ms in rows}


def test_every_time_column_and_figure_names_its_clock_and_the_declared_one_leads(report):
    results, path, _ = report
    text = path.read_text()
    headers = [h for h, _ in _tables(text)]
    times = [cell for header in headers for cell in header if _TIME_HEADER.search(cell)]
    assert times, "the report shows no time column at all"
    unnamed = [cell for cell in times if not re.search(r"\b(cpu|wall)\b", cell)]
    assert unnamed == []
    (method_header,) = [h for h in headers if h[:2] == ["method", "policy"]]
    measured = [cell for cell in method_header if cell.startswith("ours step ms")]
    assert measured == ["ours step ms (cpu)", "ours step ms (wall)"]  # the declared clock first
    # the card's prediction is wall time, so it sits beside the measured wall time
    assert method_header.index("predicted ms (wall)") == method_header.index("ours step ms (wall)") + 1
    images = re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", text)
    assert [Path(link).name for _, link in images] == [
        "figure1-confirm44-large_sparse.png",
        "figure3-confirm44-large_sparse.png",
    ]
    assert all("(cpu clock)" in caption for caption, _ in images)
    (figure,) = report[2]
    assert figure.xlabel.startswith("Mean step time, cpu clock (")


def test_the_method_table_and_figure1_show_the_declared_clocks_means(report):
    results, path, (figure,) = report
    cpu, wall = _cpu_means(results, "cpu_ms"), _cpu_means(results, "step_ms")
    assert all(cpu[m] == pytest.approx(CPU_OVER_WALL * wall[m]) for m in cpu)  # the clocks really differ
    ((header, body),) = [(h, b) for h, b in _tables(path.read_text()) if h[:2] == ["method", "policy"]]
    shown = {row[0]: row for row in body if row[header.index("ours step ms (cpu)")] != "—"}
    assert set(shown) == set(cpu)
    for method, row in shown.items():
        assert row[header.index("ours step ms (cpu)")] == f"{cpu[method]:.2f}"
        assert row[header.index("ours step ms (wall)")] == f"{wall[method]:.2f}"
    # Figure 1's bars are the same cpu-clock means; its headline is the comparisons table's
    # estimator (geometric mean of paired process ratios) with its interval, drawn as a whisker
    unit = {"ms": 1.0, "s": 1000.0}[figure.time_unit]  # seconds where a loaded machine made steps that long
    assert sorted(figure.times) == pytest.approx(sorted(v / unit for v in cpu.values()))
    from stateaware.analysis.store.views import connect

    ((estimate, lower, upper, confidence),) = (
        connect(results)
        .execute(
            "SELECT estimate, lower, upper, confidence FROM comparisons "
            "WHERE comparison = 'joint/eager_whole step time'"
        )
        .fetchall()
    )
    assert lower < upper and estimate != pytest.approx(cpu["joint"] / cpu["eager_whole"], rel=1e-12)
    interval = f"interval {lower:.4f} to {upper:.4f} at {confidence:.2%}"
    if lower <= 1 <= upper:  # a loaded machine can blur the difference: then no direction is claimed
        want = f"joint/eager/whole {estimate:.4f}: no difference resolved (cpu clock; geometric mean of paired "
        want += f"process ratios, {interval} includes 1)"
    else:
        how = "faster" if upper < 1 else "slower"
        want = f"joint is {abs(1 - estimate) * 100:.1f} % {how} than eager/whole (cpu clock; geometric mean of "
        want += f"paired process ratios {estimate:.4f}, {interval})"
    assert figure.headline == want
    ((comparison, table_estimate),) = [
        (row[0], row[2]) for h, b in _tables(path.read_text()) if h[0] == "comparison" for row in b if "step" in row[0]
    ]
    assert f"{estimate:.4f}" == table_estimate and f" {table_estimate}" in figure.headline
    assert figure.interval == pytest.approx((cpu["eager_whole"] * lower / unit, cpu["eager_whole"] * upper / unit))
    assert f"; {figure.headline}](figure1-" in path.read_text()  # and the caption in report.md carries it


def test_the_comparisons_table_quotes_the_paper_beside_our_computed_ratio(report):
    from stateaware.analysis.sections.timing import PAPER_RATIOS
    from stateaware.analysis.store.views import connect

    results, path, _ = report
    ((header, body),) = [(h, b) for h, b in _tables(path.read_text()) if h[0] == "comparison"]
    rows = {row[0]: row for row in body}
    ours = dict(connect(results).execute("SELECT comparison, estimate FROM comparisons WHERE clock = 'cpu'").fetchall())
    (name,) = ours  # the step-time comparison, on the declared clock
    row = rows[name]
    assert row[header.index("clock")] == "cpu"
    assert row[header.index("ours estimate")] == f"{ours[name]:.4f}"
    paper = PAPER_RATIOS[("confirm44", "joint", "eager_whole", "time", None)]
    assert paper.estimate == 0.818 and row[header.index("paper estimate [interval] (H100, wall)")] == "0.818"
    # the peak comparison: the paper prints no joint/eager_whole peak ratio, so none is shown
    (peak,) = [r for n, r in rows.items() if n != name]
    assert peak[header.index("paper estimate [interval] (H100, wall)")] == "—"


def test_the_papers_ratios_are_looked_up_by_what_is_compared_and_print_as_the_paper_prints_them():
    from stateaware.analysis.sections.timing import PAPER_RATIOS, PAPER_T7, PAPER_T8, paper_ratio

    def row(cohort: str, numerator: str, denominator: str, metric: str, workload: str | None = None) -> dict:
        subset = f'{{"workload": "{workload}"}}' if workload else None
        return dict(cohort=cohort, numerator=numerator, denominator=denominator, metric=metric, subset=subset)

    # on either clock's column, under any name the comparison was given
    for metric in ("step_ms", "cpu_ms"):
        assert paper_ratio(row("confirm32", "joint", "regions", metric)).text() == "0.950"
    queue = paper_ratio(row("three_workload", "regions", "whole", "cpu_ms", "feature_queue"))
    assert queue.text() == "0.3954 [0.3905, 0.4020]"
    assert paper_ratio(
        row("three_workload", "regions", "whole", "peak_allocated_bytes", "prototype_memory")
    ).text() == ("0.15035 [0.15030, 0.15039]")
    # what the paper does not report has no paper value
    assert paper_ratio(row("confirm44", "joint", "eager_whole", "peak_allocated_bytes")) is None
    assert paper_ratio(row("confirm44", "regions", "joint", "step_ms")) is None
    assert paper_ratio(row("my_cohort", "joint", "eager_whole", "step_ms")) is None
    # the headline ratios agree with the paper's Table 7 means, and Table 8's with its printed cells
    t7 = PAPER_T7
    assert PAPER_RATIOS[("confirm44", "joint", "eager_whole", "time", None)].estimate == round(
        t7["confirm44"]["joint"][0] / t7["confirm44"]["eager_whole"][0], 3
    )
    assert PAPER_RATIOS[("confirm32", "joint", "regions", "time", None)].estimate == round(
        t7["confirm32"]["joint"][0] / t7["confirm32"]["regions"][0], 3
    )
    for workload, (time, peak) in PAPER_T8.items():
        for quantity, printed in (("time", time), ("peak", peak)):
            paper = PAPER_RATIOS[("three_workload", "regions", "whole", quantity, workload)]
            assert printed.replace(" ", "") == paper.text().replace("0.", ".").replace(" ", "")
