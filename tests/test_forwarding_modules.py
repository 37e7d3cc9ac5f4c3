"""Import paths and ``python -m`` forms users write keep working after a module moves.

A moved module leaves a forwarding module at its old path that re-exports the very same
objects (not copies: an ``isinstance`` or ``except`` against either name must agree).
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

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


def test_the_import_paths_the_examples_and_docs_use_still_import():
    from stateaware.analysis.views import connect

    from stateaware.launch.params import Param

    assert callable(connect) and Param(int, minimum=1).minimum == 1


@pytest.mark.parametrize(
    "module", ["stateaware.app.data", "stateaware.app.encoder_card", "stateaware.cost_runtime.freeze"]
)
def test_the_python_m_forms_conf_cites_still_run(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
