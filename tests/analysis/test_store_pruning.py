"""A query on chosen runs reads only their partitions (views NOTE [ Pruning by run ]).

Two small runs of two cohorts in one results folder; the part checks a connection makes are
counted by wrapping ``PartChecks.problem``, the one door every part passes before a view.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
from stateaware.analysis.store.views import connect, runs_present, snapshot

from stateaware.records import part_cache
from tests.cli_inprocess import ANALYSIS, run_main
from tests.conftest import launch_small_run

RUNS = {"a1": "demo", "a2": "demo", "b1": "noop"}

pytestmark = pytest.mark.usefixtures("fresh_part_cache")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("store") / "results"
    for run_id, cohort in RUNS.items():
        launch_small_run(out, run_id, cohort=cohort)
    return out


@pytest.fixture
def checked(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    inspect = part_cache.PartChecks.inspect

    def counting(self, path, *args, **kwargs):
        seen.append(Path(path))
        return inspect(self, path, *args, **kwargs)

    monkeypatch.setattr(part_cache.PartChecks, "inspect", counting)
    return seen


def _run_of(path: Path) -> str:
    return next(p[len("run_id=") :] for p in path.parts if p.startswith("run_id="))


def _rows(con, table: str) -> Counter:
    return Counter(con.execute(f'SELECT * FROM "{table}"').fetchall())


def test_one_run_checks_only_its_own_parts_and_sees_the_same_rows(store, checked):
    everything = connect(store)
    all_parts = list(checked)
    checked.clear()
    one = connect(store, run_ids=["a2"])
    assert checked and {_run_of(p) for p in checked} == {"a2"}
    assert Counter(_run_of(p) for p in all_parts)["a2"] == len(checked)  # every part of a2, no other
    for table in ("processes", "timings", "records"):
        want = Counter(everything.execute(f"SELECT * FROM \"{table}\" WHERE run_id = 'a2'").fetchall())
        assert _rows(one, table) == want and want, table


def test_a_cohort_prunes_to_its_runs_and_a_run_id_alone_walks_every_cohort(store, checked):
    con = connect(store, cohorts=["demo"])
    assert {_run_of(p) for p in checked} == {"a1", "a2"}
    assert {r for (r,) in con.execute("SELECT DISTINCT run_id FROM processes").fetchall()} == {"a1", "a2"}
    checked.clear()
    snapshot(store, ["b1"])
    assert {_run_of(p) for p in checked} == {"b1"}
    assert runs_present(store) == {run: {cohort} for run, cohort in RUNS.items()}


def test_a_part_outside_every_run_is_still_named_by_a_pruned_scan(store, tmp_path):
    results = Path(shutil.copytree(store, tmp_path / "results"))
    stray = results / "timings" / "cohort=demo" / "stray.parquet"
    stray.write_bytes(b"not parquet")
    con = connect(results, run_ids=["a1"])
    damaged = con.execute("SELECT path FROM damaged_parts").fetchall()
    assert [Path(p) for (p,) in damaged] == [stray.resolve()] or [Path(p) for (p,) in damaged] == [stray]


def test_sql_prunes_and_names_an_unknown_run_or_cohort(store, checked):
    query = "SELECT run_id, count(*) FROM processes GROUP BY 1 ORDER BY 1"
    done = run_main(ANALYSIS, ["sql", "--results", str(store), "--run-id", "b1", "--format", "csv", query])
    assert done.status == 0, done.stderr
    assert done.stdout.splitlines() == ["run_id,count_star()", "b1,2"]
    assert {_run_of(p) for p in checked} == {"b1"}
    done = run_main(ANALYSIS, ["sql", "--results", str(store), "--cohort", "demo", "--format", "csv", query])
    assert done.stdout.splitlines() == ["run_id,count_star()", "a1,2", "a2,2"]
    done = run_main(ANALYSIS, ["sql", "--results", str(store), "--run-id", "zz", query])
    assert done.status == 2 and done.error_lines == [
        "error: --run-id ['zz'] not in the results; runs there: a1, a2, b1"
    ]
    done = run_main(ANALYSIS, ["sql", "--results", str(store), "--cohort", "nope", query])
    assert done.status == 2 and done.error_lines == [
        "error: --cohort ['nope'] not in the results; cohorts there: demo, noop"
    ]
