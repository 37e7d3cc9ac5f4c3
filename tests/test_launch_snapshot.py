"""Snapshots: processes import the code as hashed at submission, mapped packages included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stateaware.launch.snapshot import python_path_first, take_snapshot
from stateaware.source import source_files, source_hash


def test_the_snapshot_is_the_hashed_file_set(tmp_path):
    code = source_hash()
    folder = take_snapshot(tmp_path, code)
    copied = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert copied == [name for name, _ in source_files()]
    assert take_snapshot(tmp_path, code) == folder  # idempotent


def test_a_process_started_under_the_snapshot_imports_it_and_hashes_alike(tmp_path):
    code = source_hash()
    folder = take_snapshot(tmp_path, code)
    probe = ("import json, stateaware, stateaware.cohorts, stateaware.analysis, stateaware.conf\n"
             "from stateaware.source import source_hash\n"
             "print(json.dumps({'files': [m.__file__ for m in (stateaware, stateaware.cohorts, stateaware.analysis,"
             " stateaware.conf)], 'hash': source_hash()}))")
    # Started from inside the checkout, whose stateaware/ folder would shadow a PYTHONPATH entry.
    checkout = Path(__file__).resolve().parent.parent
    with python_path_first(folder):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=checkout, check=True)
    seen = json.loads(done.stdout)
    assert all(f.startswith(str(folder)) for f in seen["files"]), seen["files"]
    assert seen["hash"] == code


def test_the_environment_is_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/a")
    with python_path_first(tmp_path):
        import os

        assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "/a"]
        assert os.environ["PYTHONSAFEPATH"] == "1"
    assert os.environ["PYTHONPATH"] == "/a" and "PYTHONSAFEPATH" not in os.environ
