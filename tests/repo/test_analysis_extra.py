"""The analysis extra alone reads results: a fresh venv with ``[analysis]`` and nothing else
(no torch, no JAX, no Hydra) runs ``sql``, ``report`` and ``compare`` on a results folder
that a real cohort wrote, and prints what the full install prints.

The venv is made without system site packages from the interpreter the tests' own venv was
made from (``sys._base_executable``: Debian's python when ``make test PYTHON=/usr/bin/python3``),
and filled offline from the local wheel cache (``tests/wheel_cache.py``). The project goes
in as a wheel built from this checkout with ``--no-deps``: its core dependencies are torch
and numpy, which an analysis-only install leaves out by design.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import user_env
from tests.wheel_cache import CACHE_ENV, FILL_COMMAND, analysis_requirements, cache_dir, missing

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

#: What an analysis-only venv must not hold: the GPU stack and the orchestration (tqdm is the
#: analysis' own since `compact` shows its progress).
ABSENT = ("torch", "torchvision", "jax", "jaxlib", "hydra", "submitit")


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _checked(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"{done.args}: exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, stateaware_wheel: Path) -> Path:
    """A fresh venv holding the analysis extra and this checkout's stateaware, nothing else."""
    cache = cache_dir()
    base = getattr(sys, "_base_executable", sys.executable)
    problem = missing(cache, sys.executable)
    if problem is not None:  # fail, never skip: a skipped test would hide the claim going untested
        pytest.fail(
            f"the wheel cache ({CACHE_ENV}={cache}) cannot serve [analysis]: {problem}; fill it: {FILL_COMMAND}"
        )
    folder = tmp_path_factory.mktemp("analysis_extra")
    env = folder / "venv"
    # Without pip: this environment's pip installs into it (--python), which saves the
    # ensurepip bootstrap; --no-compile leaves the byte-code to the imports that happen.
    _checked(_run(base, "-m", "venv", "--without-pip", env, cwd=folder))
    pip = (sys.executable, "-m", "pip", "--python", env / "bin" / "python", "--disable-pip-version-check", "install")
    offline = (*pip, "-q", "--no-compile", "--no-index", "--find-links", cache)
    _checked(_run(*offline, *analysis_requirements(), cwd=folder))
    _checked(_run(*offline, "--no-deps", stateaware_wheel, cwd=folder))
    return env


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of the demo cohort (3 fresh processes each), made by the full install."""
    work = tmp_path_factory.mktemp("analysis_extra_results")
    for run_id in ("first", "second"):
        command = ("stateaware", "cohort=demo", "launcher=inline", "processes=3", f"run_id={run_id}", "out=results")
        _checked(_run(sys.executable, "-m", *command, cwd=work))
    return work / "results"


def _analysis(python: str | Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return _run(python, "-m", "stateaware.analysis", *args, cwd=cwd, env=user_env())


def test_the_venv_has_the_analysis_and_neither_torch_nor_jax(venv: Path, tmp_path: Path) -> None:
    probe = (
        "import importlib.util, json, stateaware\n"
        f"absent = {ABSENT!r}\n"
        "print(json.dumps({'found': [m for m in absent if importlib.util.find_spec(m)], 'at': stateaware.__file__}))\n"
    )
    found = json.loads(_checked(_run(venv / "bin" / "python", "-c", probe, cwd=tmp_path, env=user_env())).stdout)
    assert found["found"] == []
    assert Path(found["at"]).is_relative_to(venv)  # the installed wheel, not the checkout
    for module in ("torch", "jax"):
        done = _run(venv / "bin" / "python", "-c", f"import {module}", cwd=tmp_path, env=user_env())
        assert done.returncode == 1 and f"ModuleNotFoundError: No module named '{module}'" in done.stderr


def test_sql_answers_from_the_records(venv: Path, results: Path) -> None:
    query = "SELECT run_id, count(*) AS n FROM processes GROUP BY ALL ORDER BY run_id"
    done = _checked(
        _analysis(venv / "bin" / "python", "sql", "--results", results, "--format", "json", query, cwd=results)
    )
    assert json.loads(done.stdout) == [{"run_id": "first", "n": 3}, {"run_id": "second", "n": 3}]


def test_compare_prints_the_verdict_the_full_install_prints(venv: Path, results: Path) -> None:
    args = ("compare", "first", "second", "--results", str(results), "--draws", "500")
    alone = _checked(_analysis(venv / "bin" / "python", *args, cwd=results)).stdout
    full = _checked(_analysis(sys.executable, *args, cwd=results)).stdout
    header, clock, columns, row = alone.splitlines()[:4]  # "unreliable:" lines may follow the row
    assert header == "B = second against A = first; intervals at 95.00% each (Bonferroni over 1 rows)"
    assert clock.startswith("clock: cpu (cpu_ms), the cohort's declared clock")  # the demo's CPU profile
    # columns split on runs of two or more spaces: a reason is words
    assert re.split(r"\s{2,}", columns.strip()) == [
        "method",
        "A cpu_ms",
        "B cpu_ms",
        "B/A",
        "interval",
        "processes",
        "verdict",
        "because",
    ]  # fmt: skip  (the demo has no cells: no cell column)
    cells = re.split(r"\s{2,}", row.strip())
    assert cells[0] == "matmul" and cells[5] == "3 paired"
    assert cells[6] in ("faster", "slower", "same", "inconclusive", "unreliable") and cells[7]  # verdict, reason
    assert alone == full  # the bootstrap is seeded: the same data give the same line, digit for digit


def test_report_writes_its_sections(venv: Path, results: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = _checked(_analysis(venv / "bin" / "python", "report", "--results", results, "--out", out, cwd=results))
    text = (out / "report.md").read_text()
    assert done.stdout.strip().endswith(str(out / "report.md"))
    assert "| demo | `second` | 3 | complete (3 of 3 processes) |" in text
    assert "\n## Stability of the timings (clocks, load, step variation)\n" in text
