"""``python -m stateaware.analysis runs``, and ``--run-id``/``--cohort`` chosen alike by every
command that takes them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from stateaware.analysis.__main__ import main
from stateaware.analysis.store.status import RUN_COLUMNS

#: The runs the fixture launches: (run id, cohort name, processes, the index that fails or -1).
LAUNCHED = [("good", "demo", 2, -1), ("broken", "demo", 3, 1), ("other", "demo2", 1, -1)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    from hydra import compose, initialize_config_module

    from stateaware.cli import run
    from stateaware.config import register_configs

    register_configs()
    out = tmp_path_factory.mktemp("runs") / "results"
    small = ["launcher=inline", f"out={out}", "cohort.params.size=8", "cohort.params.steps=2"]
    with initialize_config_module("stateaware.conf", version_base="1.3"):
        for run_id, cohort, processes, fails in LAUNCHED:
            failing = ["cohort.kind=tests.kinds.clock", f"++cohort.params={{fail_index:{fails}}}"] if fails >= 0 else []
            overrides = ["cohort=demo", f"cohort.name={cohort}", *small, f"processes={processes}", f"run_id={run_id}"]
            cfg = compose("config", overrides=[*overrides, *failing])
            assert run(cfg, progress=False) == (1 if fails >= 0 else 0)
    return out


def _json(capsys, argv: list[str]) -> tuple[int, list[dict]]:
    status = main(argv)
    return status, json.loads(capsys.readouterr().out)


def _sql(capsys, results: Path, query: str) -> list[dict]:
    assert main(["sql", "--results", str(results), "--format", "json", query]) == 0
    return json.loads(capsys.readouterr().out)


def test_runs_lists_each_run_with_its_counts_launcher_code_and_start(results, capsys):
    status, rows = _json(capsys, ["runs", "--results", str(results), "--format", "json"])
    assert status == 0 and [list(r) for r in rows] == [RUN_COLUMNS] * len(LAUNCHED)
    assert [(r["run_id"], r["cohort"], r["launcher"]) for r in rows] == [(i, c, "inline") for i, c, _, _ in LAUNCHED]
    assert [(r["processes"], r["done"], r["failed"]) for r in rows] == [
        (n, n - (fails >= 0), int(fails >= 0)) for _, _, n, fails in LAUNCHED
    ]
    # The code and the start are the run's as its own process rows say: every process ran that
    # code, and none started before the run did.
    for row in rows:
        where = f"WHERE run_id = '{row['run_id']}'"
        (code,) = _sql(capsys, results, f"SELECT DISTINCT source_hash FROM processes {where}")
        assert row["source_hash"] == code["source_hash"] and len(row["source_hash"]) > 8
        (first,) = _sql(capsys, results, f"SELECT min(started_at) AS t FROM processes {where}")
        assert row["started_at"] <= first["t"]
    assert [r["started_at"] for r in rows] == sorted(r["started_at"] for r in rows)


def test_runs_speaks_every_format_and_is_chosen_by_run_id_and_cohort(results, capsys):
    assert main(["runs", "--results", str(results), "--format", "csv", "--cohort", "demo"]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0] == RUN_COLUMNS and [r[0] for r in table[1:]] == ["good", "broken"]
    assert main(["runs", "--results", str(results), "--run-id", "other"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == RUN_COLUMNS and [line.split()[0] for line in lines[2:-1]] == ["other"]
    assert main(["runs", "--results", str(results), "--cohort", "demo2", "--run-id", "good", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize("command", ["runs", "status", "check", "compact", "sql", "report"])
def test_an_unknown_cohort_is_one_line_naming_the_cohorts_there(results, capsys, command):
    extra = ["SELECT 1"] if command == "sql" else []
    with pytest.raises(SystemExit) as exited:
        status = main([command, "--results", str(results), "--cohort", "dem0", *extra])
        raise SystemExit(status)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --cohort ['dem0'] not in the results; cohorts there: demo, demo2"
    ]


def test_status_check_and_compact_take_a_cohort_as_the_runs_of_it(results, capsys):
    assert main(["status", "--results", str(results), "--cohort", "demo2", "--format", "json"]) == 0
    assert {r["run_id"] for r in json.loads(capsys.readouterr().out)} == {"other"}
    assert main(["status", "--results", str(results), "--cohort", "demo", "--format", "json"]) == 1  # broken
    assert {r["run_id"] for r in json.loads(capsys.readouterr().out)} == {"good", "broken"}
    assert main(["compact", "--results", str(results), "--cohort", "demo2", "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "other" in said and "good" not in said and "broken" not in said
    flagged = main(["check", "--results", str(results), "--cohort", "demo2"])  # a busy machine flags some
    lines = capsys.readouterr().out.splitlines()
    assert (flagged, lines[0].startswith("stability: ok")) in ((0, True), (1, False))
    assert all(line.startswith("  demo2 (other) ") for line in lines[1:]), lines


def test_check_gives_its_flags_as_rows_in_csv_and_json(results, capsys):
    # Thresholds (the least each takes) that measured values exceed: the same flags on every call.
    everything = ["--max-cv", "1e-9", "--max-wall-over-cpu", "1e-9", "--max-other-share", "1e-9"]
    assert main(["check", "--results", str(results), *everything]) == 1
    lines = capsys.readouterr().out.splitlines()[1:]
    assert main(["check", "--results", str(results), *everything, "--format", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(lines) > 0
    assert {f"  {r['cohort']} ({r['run_id']}) process {r['process_index']}" for r in rows} == {
        line.split(" method ")[0].split(":")[0] for line in lines
    }
    assert main(["check", "--results", str(results), *everything, "--format", "csv"]) == 1
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert [dict(zip(table[0], r, strict=True))["kind"] for r in table[1:]] == [r["kind"] for r in rows]


def test_check_s_unknown_run_id_points_at_the_runs_command(results, capsys):
    assert main(["check", "--results", str(results), "--run-id", "nope"]) == 2
    assert capsys.readouterr().err == (
        f"error: --run-id ['nope'] not in {results}; list runs with: python -m stateaware.analysis runs "
        f"--results {results}\n"
    )
