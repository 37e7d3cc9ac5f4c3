"""The tree stays lint-clean, formatted and type-checked: `make test` (what CI runs) enforces
the same ruff and mypy checks as the pre-commit hooks, with their configuration read from
pyproject.toml. The tools run from this interpreter (the venv), so CI and a developer's
hooks use the same versions.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize(
    "command",
    [("ruff", "check", "."), ("ruff", "format", "--check", "."), ("mypy",)],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_tool_finds_nothing(command):
    # mypy reads its files and cache_dir from [tool.mypy]; a cold cache takes a minute or two.
    proc = _run(*command)
    assert proc.returncode == 0, f"`{' '.join(command)}` found problems:\n{proc.stdout}{proc.stderr}"
