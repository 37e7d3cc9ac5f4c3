"""Shared fixtures: compose real Hydra configs and run cohorts into a temporary directory."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

# Models of the test matrix are built from configs with random init: nothing may download.
os.environ["HF_HUB_OFFLINE"] = "1"

# `make test` runs the suite on pytest-xdist workers, one per core by default. Each worker
# (and every process it starts) keeps to one torch/OpenMP thread: two workers with a thread
# per core each would oversubscribe the cores, and OpenMP's spinning threads then stall
# each other (in a trial, a docs block of 18 s took 132 s). Set before any module imports torch.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


#: What a user's shell would not have: the checkout on the import path (the autouse fixture
#: below puts it there for the test kinds), the tests' venv, a results folder chosen for a test.
_NOT_A_USERS = ("PYTHONPATH", "PYTHONSAFEPATH", "PYTHONHOME", "VIRTUAL_ENV", "HYDRA_FULL_ERROR", "STATEAWARE_RESULTS")


def user_env() -> dict[str, str]:
    """The environment of a user's shell for commands a test runs as a reader would: the tests'
    venv ``bin`` first on ``PATH`` (as after activating it), nothing pointing into this checkout,
    no byte-code written."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_A_USERS}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(autouse=True, scope="session")
def _part_checks_cached_in_the_session(tmp_path_factory):
    # The part-check cache (stateaware.records.part_cache) lives in the user's cache folder;
    # the tests' thousands of temporary results folders must not fill it.
    saved = os.environ.get("STATEAWARE_CACHE")
    os.environ["STATEAWARE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if saved is None:
        os.environ.pop("STATEAWARE_CACHE", None)
    else:
        os.environ["STATEAWARE_CACHE"] = saved


@pytest.fixture(autouse=True)
def _importable_test_kinds(monkeypatch):
    # Fresh processes started by submitit must import tests.kinds.* too.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def compose():
    """compose(*overrides) -> the DictConfig `python -m stateaware` would run with."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    from stateaware.config import register_configs

    register_configs()

    def _compose(*overrides: str):
        with initialize_config_module("stateaware.conf", version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides))

    return _compose


@pytest.fixture
def sql():
    """sql(results, query) -> list of row tuples, through the read-only front end."""
    from stateaware.analysis.store.sql import query

    def _sql(results, text):
        return query(results, text)[-1][1]

    return _sql


@pytest.fixture
def one_thread():
    """One intra-op torch thread for the test: profiling times segments, and one thread
    keeps a shared machine's stalls out of those times."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_part_cache(tmp_path, monkeypatch):
    """A part-check cache of this test's own, empty at its start: for tests that damage
    parts or count the part checks a command makes."""
    monkeypatch.setenv("STATEAWARE_CACHE", str(tmp_path / "cache"))


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Any]) -> Any:
    """``build(folder)``'s JSON-able result, ``folder`` filled once per test run: the
    pytest-xdist workers of one run share the run's temporary folder, so the first to ask
    builds under a lock and the others wait for it and reuse what it built."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, built = shared / name, shared / f"{name}.built.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on a failed build
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way
            folder.mkdir()
            built.write_text(json.dumps(build(folder)))
    return json.loads(built.read_text())


@pytest.fixture(scope="session")
def demo_results(tmp_path_factory) -> Path:
    """A results folder holding one small real run, made once per test run: ``python -m
    stateaware cohort=demo launcher=inline processes=2 run_id=r1 cohort.params.steps=2
    cohort.params.warmup=1`` (``launch_small_run``). Read-only: a test that changes it,
    or launches into it, copies it first (``shutil.copytree``)."""

    def build(folder: Path) -> str:
        launch_small_run(folder / "results", "r1", "cohort.params.steps=2", "cohort.params.warmup=1")
        return str(folder / "results")

    return Path(built_once(tmp_path_factory, "demo-results", build))


@pytest.fixture(scope="session")
def tiny_timing_cards(tmp_path_factory):
    """``(folder, {cell: digest})``: the tiny timing cells' frozen cards
    (tests/cohorts/test_timing.py), profiled once per test run, for the timing cohorts' and
    the report's tests. Read-only: copy the folder to change or add a card."""
    from tests.cohorts.test_timing import freeze_tiny_cards

    def build(folder: Path) -> list:
        return [str(folder), freeze_tiny_cards(folder)]

    folder, digests = built_once(tmp_path_factory, "tiny-timing-cards", build)
    return Path(folder), digests


@pytest.fixture(scope="session")
def stateaware_wheel(tmp_path_factory) -> Path:
    """This checkout's wheel (tests/wheel_cache.py's ``project_wheel``), built once per test
    run for the tests that install it. Read-only."""
    from tests.wheel_cache import project_wheel

    return Path(built_once(tmp_path_factory, "wheel", lambda folder: str(project_wheel(folder))))


def launch_small_run(out, run_id: str, *overrides: str, cohort: str = "demo", processes: int = 2) -> None:
    """``python -m stateaware cohort=COHORT launcher=inline`` into ``out`` (a fresh interpreter,
    the part-check cache beside ``out``): a small real run for tests that read results."""
    import subprocess

    args = [f"cohort={cohort}", "launcher=inline", f"processes={processes}", f"out={out}", f"run_id={run_id}"]
    env = {**os.environ, "STATEAWARE_CACHE": str(Path(out).parent / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "stateaware", *args, *overrides], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
