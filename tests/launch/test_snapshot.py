"""Snapshots: processes import the code as hashed at submission, mapped packages included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stateaware.launch.snapshot import started_clean, take_snapshot
from stateaware.source import source_files, source_hash


def test_the_snapshot_is_the_hashed_file_set_and_no_bytecode(tmp_path):
    code = source_hash()
    folder = take_snapshot(tmp_path, code)
    copied = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    names = [name for name, _ in source_files()]
    assert [n for n in copied if not n.endswith("/__pycache__")] == names
    # Where Python would look for bytecode, an empty file: one in every folder with a .py file.
    blockers = {n for n in copied if n.endswith("/__pycache__")}
    assert blockers == {n.rpartition("/")[0] + "/__pycache__" for n in names if n.endswith(".py")}
    assert all((folder / n).stat().st_size == 0 for n in blockers)
    assert take_snapshot(tmp_path, code) == folder  # idempotent


def test_a_process_started_under_the_snapshot_imports_it_and_hashes_alike(tmp_path):
    code = source_hash()
    folder = take_snapshot(tmp_path, code)
    probe = (
        "import sys\n"
        "from stateaware.launch.bootstrap import enter_snapshot\n"
        "assert enter_snapshot(sys.argv[1], sys.argv[2]) is None\n"
        "import json, stateaware, stateaware.cohorts, stateaware.analysis, stateaware.conf\n"
        "from stateaware.source import source_hash\n"
        "print(json.dumps({'files': [m.__file__ for m in (stateaware, stateaware.cohorts, stateaware.analysis,"
        " stateaware.conf)], 'hash': source_hash()}))"
    )
    # Started from inside the checkout, whose stateaware/ folder would shadow a PYTHONPATH entry.
    checkout = Path(__file__).resolve().parents[2]
    with started_clean():
        done = subprocess.run(
            [sys.executable, "-c", probe, str(folder), code], capture_output=True, text=True, cwd=checkout, check=True
        )
    seen = json.loads(done.stdout)
    assert all(f.startswith(str(folder)) for f in seen["files"]), seen["files"]
    assert seen["hash"] == code


def test_the_environment_is_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/a")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    with started_clean():
        import os

        assert os.environ["PYTHONPATH"] == "/a"
        assert os.environ["PYTHONSAFEPATH"] == "1" and os.environ["PYTHONPYCACHEPREFIX"] == ""
    assert os.environ["PYTHONPATH"] == "/a" and "PYTHONSAFEPATH" not in os.environ
    assert "PYTHONPYCACHEPREFIX" not in os.environ


def _tamper_edit(folder):
    path = folder / "stateaware" / "source.py"
    path.write_text(path.read_text() + "\n# edited after a traceback pointed here\n")
    return "stateaware/source.py edited"


def _tamper_add(folder):
    (folder / "stateaware" / "extra.py").write_text("X = 1\n")
    return "stateaware/extra.py added"


def _tamper_remove(folder):
    (folder / "stateaware" / "units.py").unlink()
    return "stateaware/units.py removed"


@pytest.mark.parametrize("tamper", [_tamper_edit, _tamper_add, _tamper_remove])
def test_a_tampered_snapshot_is_rebuilt_before_reuse_saying_so(tmp_path, tamper):
    from stateaware.launch.snapshot import snapshot_hash

    code = source_hash()
    folder = take_snapshot(tmp_path, code)
    what = tamper(folder)
    said: list[str] = []
    assert take_snapshot(tmp_path, code, say=said.append) == folder
    assert said == [f"snapshot {folder} no longer matches source hash {code[:12]} ({what}); rebuilding it"]
    assert snapshot_hash(folder) == code
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no temporary or stale copy left


def test_a_resume_after_the_snapshot_was_edited_runs_the_right_code(compose, tmp_path, sql, capsys):
    from stateaware.cli import run

    out = tmp_path / "out"
    cfg = compose(
        "cohort=demo",
        "cohort.kind=tests.kinds.clock",
        "++cohort.params={sleep_s:0.0,rows:1,fail_index:1}",
        f"out={out}",
        "processes=2",
    )
    assert run(cfg, progress=False) == 1
    folder = next((out / ".snapshots").iterdir())
    _tamper_edit(folder)  # someone "fixed" the code where the traceback pointed
    capsys.readouterr()
    assert run(cfg, progress=False) == 1  # process 1 still fails on purpose, but not as source drift
    err = capsys.readouterr().err
    assert f"snapshot {folder} no longer matches source hash" in err and "rebuilding it" in err
    assert sql(out, "SELECT attempt, status FROM attempts WHERE process_index = 1 ORDER BY 1") == [
        (1, "failed"),
        (2, "failed"),
    ]
