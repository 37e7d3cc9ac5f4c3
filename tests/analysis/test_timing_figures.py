"""Figures 1 and 3 drawn from a real (tiny) timing cohort's records."""

from __future__ import annotations

from stateaware.analysis.sections.timing_figures import figures, summaries
from stateaware.analysis.store.views import connect

from tests.cohorts.test_timing import cards, cohort, run_processes, tiny_hardware  # noqa: F401 (fixture)


def test_figures_come_from_the_executed_methods_of_each_budgeted_cell(tmp_path, cards):  # noqa: F811
    import matplotlib.image

    folder, frozen = cards
    run_processes(tmp_path, cohort("confirm32"), tiny_hardware(folder, frozen), 2, [0, 1])
    con = connect(tmp_path)
    ((key, (rows, budget)),) = summaries(con).items()
    assert key == ("confirm32", "large_sparse")
    # eager_whole is infeasible at this budget: never executed, so no point or bar.
    assert [r["method"] for r in rows] == ["eager", "whole", "regions", "functional", "agnostic", "joint"]
    assert all(r["processes"] == 2 and r["mean_ms"] > 0 and r["peak_bytes"] > 0 for r in rows)
    assert budget == con.execute("SELECT DISTINCT budget_bytes FROM policies").fetchone()[0]
    measured = dict(con.execute("SELECT method, max(peak_allocated_bytes) FROM timings GROUP BY 1").fetchall())
    assert {r["method"]: r["peak_bytes"] for r in rows} == measured

    paths = figures(con, tmp_path)
    assert [p.name for p in paths] == ["figure1-confirm32-large_sparse.png", "figure3-confirm32-large_sparse.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert matplotlib.image.imread(path).shape[:2] == (600, 1200)
