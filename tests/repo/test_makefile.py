"""The Makefile's front door: `make run` passes Hydra overrides through ARGS."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(*args: str) -> list[str]:
    """The commands `make -n run ARGS...` would run (make's own dry run: nothing installed or launched)."""
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "run", "VENV=.venv-none", *args], capture_output=True, text=True, check=True
    )
    return [line.strip() for line in done.stdout.splitlines() if "-m stateaware" in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_passes_overrides_to_the_launch_and_then_reports():
    launch, report = _dry_run("ARGS=processes=12 cohort.params.steps=3")
    assert launch.endswith("-m stateaware cohort=confirm44 processes=12 cohort.params.steps=3")
    assert report.endswith("-m stateaware.analysis report")
    (launch,) = _dry_run("COHORT=fair44")[:1]
    assert launch.endswith("-m stateaware cohort=fair44")
