"""Import paths and ``python -m`` forms users write keep working after a module moves.

A moved module leaves a forwarding module at its old path that re-exports the very same
objects (not copies: an ``isinstance`` or ``except`` against either name must agree).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from stateaware.analysis import MOVED

#: old module -> (new module, names users import from the old one)
FORWARDED = {
    "stateaware.launch.params": ("stateaware.kinds.params", ("Param", "check_params")),
    "stateaware.launch.spec": ("stateaware.kinds.process_spec", ("ProcessSpec",)),
    "stateaware.cohorts": ("stateaware.kinds.loading", ("load_kind", "kind_module", "user_code", "report_sections")),
    "stateaware.launch.runlock": (
        "stateaware.records.runlock",
        ("RunLocked", "TamperedPath", "describe_entry", "launcher_folder", "lock_path", "run_lock"),
    ),
    "stateaware.analysis.views": ("stateaware.analysis.store.views", ("connect", "snapshot", "VIEWS", "runs_present")),
    "stateaware.analysis.sql": (
        "stateaware.analysis.store.sql",
        ("query", "format_result", "FORMATS"),
    ),
    "stateaware.analysis.verify": ("stateaware.analysis.store.verify", ("verify", "VerificationError", "COMPLETED")),
    "stateaware.analysis.result_columns": ("stateaware.records.columns", ("RESULT_COLUMNS",)),
    "stateaware.analysis.result_tables": ("stateaware.records.schema", ("RESULT_TABLES",)),
    "stateaware.analysis.compact": (
        "stateaware.records.compact",
        ("KILL_ENV", "STAGING", "STEPS", "CompactError", "RunCompaction", "compact_run", "rows_sha256"),
    ),
    "stateaware.analysis.stability": ("stateaware.thresholds", ("MAX_CV", "MAX_OTHER_SHARE", "MAX_WALL_OVER_CPU")),
    "stateaware.plan": ("stateaware.commands.plan", ("main", "plot_frontier")),
    "stateaware.analysis.stats": (
        "stateaware.analysis.stats.estimators",
        ("ALPHA", "DRAWS", "MIN_PROCESSES", "Ratio", "Comparison", "ComparisonResult", "paired_ratio", "compare"),
    ),
    "stateaware.launch.launcher": (
        "stateaware.records.run_scan",
        ("DAMAGED", "damaged_parts", "latest_statuses", "run_state"),
    ),
}


@pytest.mark.parametrize("old", sorted(FORWARDED))
def test_an_old_import_path_gives_the_same_objects_as_the_new_one(old):
    new, names = FORWARDED[old]
    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(before, name) is getattr(after, name), f"{old}.{name}"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_is_the_very_module_under_its_old_name(old):
    before = importlib.import_module(old)
    assert before is importlib.import_module(MOVED[old])
    assert before.__name__ == before.__spec__.name == MOVED[old]  # its own name, whichever was imported


def test_from_an_old_module_import_a_name_gives_the_new_modules_object():
    from stateaware.analysis.compare import compare_runs
    from stateaware.analysis.stats.compare_runs import compare_runs as moved

    assert compare_runs is moved


def test_the_import_paths_the_examples_and_docs_use_still_import():
    from stateaware.analysis.views import connect

    from stateaware.launch.params import Param

    assert callable(connect) and Param(int, minimum=1).minimum == 1


@pytest.mark.parametrize(
    "module",
    [
        "stateaware.app.data",
        "stateaware.app.encoder_card",
        "stateaware.cost_runtime.freeze",
        "stateaware.plan",
        # the bench scripts (bench/gpu_check.sh, bench/gpu_cifar.sh) run these two
        "stateaware.analysis.timing",
        "stateaware.analysis.application",
    ],
)
def test_the_python_m_forms_conf_cites_still_run(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_python_m_with_an_old_name_runs_the_moved_module():
    # bench/gpu_check.sh runs `python -m stateaware.analysis.timing`; it is a fixed interface.
    done = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis.timing", "--help"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m stateaware.analysis.timing")


def test_a_section_recorded_under_its_old_name_renders_once_as_the_moved_module():
    import duckdb
    from stateaware.analysis.report import PAPER_ORDER, sections_of, select_runs

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE runs (cohort VARCHAR, run_id VARCHAR, processes INTEGER, config_yaml VARCHAR, kind VARCHAR, "
        "report_sections VARCHAR[], started_at TIMESTAMP)"
    )
    con.execute(
        "CREATE TABLE processes (run_id VARCHAR, process_index INTEGER, status VARCHAR, attempt INTEGER, "
        "finished_at TIMESTAMP)"
    )
    con.execute(
        "INSERT INTO runs VALUES "
        "('old', 'r1', 1, '', 'timing', ['stateaware.analysis.timing'], '2026-01-01'), "  # recorded before the move
        "('new', 'r2', 1, '', 'timing', ['stateaware.analysis.sections.timing'], '2026-01-02'), "
        "('semantic', 'r3', 1, '', 'semantic', ['stateaware.analysis.replay_semantics'], '2026-01-03')"
    )
    selected = select_runs(con)
    assert [run.sections for run in selected] == [
        ("stateaware.analysis.sections.timing",),
        ("stateaware.analysis.sections.timing",),
        ("stateaware.analysis.sections.replay_semantics",),
    ]
    # One timing section for both runs, after the semantic one: the paper's order holds for old names.
    assert [
        (module, [[r.run_id for r in round_] for round_ in rounds]) for module, _, rounds in sections_of(selected)
    ] == [
        (PAPER_ORDER[0], [["r3"]]),
        (PAPER_ORDER[2], [["r2", "r1"]]),  # by cohort name
    ]


def test_the_papers_figures_live_in_one_module_and_each_section_quotes_those_objects():
    import re
    from pathlib import Path

    from stateaware.analysis.sections import cifar_application, finite_checks, paper, replay_semantics, timing

    held = {id(value) for name, value in vars(paper).items() if name.startswith(("PAPER", "Paper"))}
    for section in (replay_semantics, finite_checks, timing, cifar_application):
        quoted = {name: value for name, value in vars(section).items() if name.startswith(("PAPER", "Paper"))}
        assert quoted and all(id(value) in held for value in quoted.values()), section.__name__
        source = Path(section.__file__).read_text()
        assert re.findall(r"^(PAPER\w*)\s*(?::[^=]*)?=", source, re.MULTILINE) == [], section.__name__
