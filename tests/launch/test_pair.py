"""An interleaved comparison (``compare_to=``): two code versions, process by process, one verdict.

A/A: the same code on both sides, launched beside two busy processes: ``compare`` may say
``same``, ``inconclusive`` or ``unreliable`` (it flags the load), never ``faster``/``slower``.
A/B: side B's demo kind does 25 % more arithmetic per step: ``compare`` finds B slower, its
interval above 1 — or, when other work on the machine flags the processes, ``unreliable``
(claiming nothing), never ``same`` or ``faster``. Side B is a copy of this source tree (``compare_to=PATH``); a git
revision goes through the same path after ``git archive``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ["cohort=demo", "processes=4", "cohort.params.size=256", "cohort.params.steps=40", "launcher=local"]
# the line keeps the indentation of the one it replaces, wherever demo.py nests its loop
SLOWER = 'wall_ms, cpu_ms = time_step(lambda: (product.__setitem__("c", a @ b), a[: size // 4] @ b))\n'


def _launch(out: Path, run_id: str, compare_to: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    args = [*PARAMS, f"out={out}", f"run_id={run_id}", f"compare_to={compare_to}"]
    return subprocess.run([sys.executable, "-m", "stateaware", *args], capture_output=True, text=True, env=env)


def _compare(out: Path, a: str, b: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "compare", a, b, "--results", str(out), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    return row


def _tree(dest: Path, slower: bool) -> Path:
    for folder in ("stateaware", "cohorts", "analysis", "conf"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    if slower:
        demo = dest / "cohorts" / "demo.py"
        lines = demo.read_text().splitlines(keepends=True)
        (at,) = [i for i, line in enumerate(lines) if "time_step(lambda: product.__setitem__" in line]
        lines[at] = lines[at][: len(lines[at]) - len(lines[at].lstrip())] + SLOWER
        demo.write_text("".join(lines))
    return dest


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {**os.environ, "STATEAWARE_CACHE": str(tmp_path / "cache")}


def test_a_a_beside_busy_processes_is_never_called_faster_or_slower(tmp_path, env):
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        done = _launch(tmp_path / "results", "aa", ROOT, env)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert done.returncode == 0, done.stderr
    assert "compare them with: python -m stateaware.analysis compare aa-a aa-b" in done.stdout
    row = _compare(tmp_path / "results", "aa-a", "aa-b")
    assert row["paired"] and row["a_processes"] == row["b_processes"] == 4
    assert row["verdict"] in ("same", "inconclusive", "unreliable"), row
    print(f"A/A beside two busy loops: {row['ratio']:.3f} [{row['lower']:.3f}, {row['upper']:.3f}] {row['verdict']}")


def test_a_b_with_a_quarter_more_work_is_slower_and_each_side_keeps_its_code(tmp_path, env):
    side_b = _tree(tmp_path / "slower", slower=True)
    done = _launch(tmp_path / "results", "ab", side_b, env)
    assert done.returncode == 0, done.stderr
    row = _compare(tmp_path / "results", "ab-a", "ab-b")
    print(f"A/B (+25 % work): {row['ratio']:.3f} [{row['lower']:.3f}, {row['upper']:.3f}] {row['verdict']}")
    # On a machine busy with other work the flags make it `unreliable` (which claims nothing);
    # any verdict that claims something must be the true one, its interval above 1.
    assert row["verdict"] in ("slower", "unreliable"), row
    if row["verdict"] == "slower":
        assert row["lower"] > 1.0, row
    else:
        assert row["unreliable_because"], row
    query = "SELECT run_id, side, pair_id, source_hash FROM runs ORDER BY run_id"
    out = subprocess.run(
        [sys.executable, "-m", "stateaware.analysis", "sql", "--results", str(tmp_path / "results"), "--format",
         "json", query],
        capture_output=True, text=True,
    )  # fmt: skip
    rows = json.loads(out.stdout)
    assert [(r["run_id"], r["side"]) for r in rows] == [("ab-a", "a"), ("ab-b", "b")]
    assert rows[0]["pair_id"] == rows[1]["pair_id"] and rows[0]["pair_id"].startswith("ab~")
    assert rows[0]["source_hash"] != rows[1]["source_hash"]  # each side its own code, verified per run


def test_a_tree_with_another_process_spec_or_no_such_cohort_is_refused(tmp_path, env):
    other = _tree(tmp_path / "other", slower=False)
    spec = other / "stateaware" / "kinds" / "process_spec.py"
    spec.write_text(spec.read_text().replace("    cpus: tuple[int, ...] | None = None\n", "    gpus: int = 0\n"))
    done = _launch(tmp_path / "results", "x", other, env)
    assert done.returncode == 2
    assert "its process spec (ProcessSpec" in done.stderr and "other fields" in done.stderr
    done = _launch(tmp_path / "results", "x", tmp_path / "nowhere", env)
    assert done.returncode == 2 and "not a path to a source tree nor a git revision" in done.stderr


def test_a_tree_whose_worker_lacks_the_entry_point_is_refused_before_launch(tmp_path, env):
    from stateaware.launch.bootstrap import ENTRY

    other = _tree(tmp_path / "other", slower=False)
    worker = other / "stateaware" / "launch" / "worker.py"
    name = ENTRY.partition(":")[2]
    worker.write_text(worker.read_text().replace(f"def {name}(", f"def {name}_renamed("))
    done = _launch(tmp_path / "results", "x", other, env)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        f"error: compare_to={str(other)!r}: its worker (stateaware/launch/worker.py) defines no {name}()"
    )
    assert not (tmp_path / "results" / "processes").exists()  # nothing launched
