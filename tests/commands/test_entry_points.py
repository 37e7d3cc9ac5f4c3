"""Every entry point, by each of its names: ``--version`` and the console scripts.

The scripts are read from ``pyproject.toml`` (the editable install's metadata is as old as
the venv); ``tests/repo/test_packaging.py`` checks that a built wheel carries the same ones.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.cli_inprocess import ANALYSIS, PLAN, STATEAWARE, run_main

REPO = Path(__file__).resolve().parents[2]

#: Console script -> the ``python -m`` form it stands for.
SCRIPTS = {
    "stateaware": "stateaware",
    "stateaware-analysis": "stateaware.analysis",
    "stateaware-plan": "stateaware.plan",
}


def _scripts() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]


def test_version_names_stateaware_first_and_hydra_only_after_it():
    version = importlib.metadata.version("stateaware")
    import hydra

    assert run_main(STATEAWARE, ["--version"]).stdout == f"stateaware {version}\nHydra {hydra.__version__}\n"
    for main, prog in ((ANALYSIS, "stateaware-analysis"), (PLAN, "stateaware-plan")):
        done = run_main(main, ["--version"], prog=prog)
        assert (done.status, done.stdout, done.stderr) == (0, f"stateaware {version}\n", "")


def test_each_python_m_form_has_a_console_script_of_a_guessable_name():
    assert sorted(_scripts()) == sorted(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_console_script_runs_what_its_python_m_form_runs(name):
    module, _, function = _scripts()[name].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    # The script's own call, as pip's launcher makes it: no arguments, exit by SystemExit.
    script = f"import sys; sys.argv = [{name!r}, '--version']; from {module} import {function}; {function}()"
    by_script = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    by_module = subprocess.run(
        [sys.executable, "-m", SCRIPTS[name], "--version"], capture_output=True, text=True, timeout=300
    )
    assert by_script.returncode == by_module.returncode == 0, by_script.stderr + by_module.stderr
    assert by_script.stdout == by_module.stdout and by_script.stdout.startswith("stateaware ")
