"""Bytecode never bypasses the source hash: a worker runs the snapshot's hashed sources, never a pyc."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stateaware.launch.snapshot import (
    batch_script_lines,
    running_snapshot_problem,
    snapshot_hash,
    snapshot_problems,
    take_snapshot,
    worker_environment,
)
from stateaware.source import source_hash

# What a worker does first (the installed package checks the snapshot, then puts it on the
# path), then what it imports, the edited module's mark and its code's own check of the snapshot.
_PROBE = (
    "import json, sys\n"
    "from stateaware.launch.bootstrap import enter_snapshot\n"
    "refused = enter_snapshot(sys.argv[2], sys.argv[1])\n"
    "if refused:\n"
    "    print(json.dumps({'refused': refused}))\n"
    "    sys.exit()\n"
    "import stateaware.launch.worker, stateaware.units as units\n"
    "from stateaware.launch.snapshot import running_snapshot_problem\n"
    "print(json.dumps({'planted': getattr(units, 'PLANTED', False), 'file': units.__file__,"
    " 'prefix': sys.pycache_prefix, 'problem': running_snapshot_problem(sys.argv[1])}))"
)


def _worker_import(folder: Path, code: str, cwd: Path) -> dict:
    """Import as a worker started on the snapshot ``folder`` does: a fresh interpreter with
    ``worker_environment``'s variables, bytecode writing left on (as in a user's shell)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(worker_environment(env))
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, code, str(folder)], capture_output=True, text=True, cwd=cwd, env=env, check=True
    )
    return json.loads(done.stdout)


def _malicious_pyc(source: Path, pyc: Path) -> None:
    """Write at ``pyc`` the bytecode of an edited ``source``, its header claiming the original's
    mtime and size (magic, flags 0 = timestamp-checked, mtime, size): Python takes it for the
    bytecode of the unchanged source."""
    edited = source.read_text() + "\nPLANTED = True\n"
    st = source.stat()
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.parent.mkdir(parents=True, exist_ok=True)
    pyc.write_bytes(header + marshal.dumps(compile(edited, str(source), "exec")))


def _pyc_name(module: str) -> str:
    return f"{module}.{sys.implementation.cache_tag}.pyc"


def test_a_planted_pyc_is_refused_by_the_launcher_and_never_runs_in_a_worker(tmp_path):
    code = source_hash()
    folder = take_snapshot(tmp_path, code)
    units = folder / "stateaware" / "units.py"
    (folder / "stateaware" / "__pycache__").unlink()  # the empty file that keeps a bytecode folder out
    _malicious_pyc(units, folder / "stateaware" / "__pycache__" / _pyc_name("units"))

    # The plant would run if imported (the source hash is unchanged); a worker's check of the
    # snapshot itself refuses it before importing anything from it.
    assert snapshot_hash(folder) == code
    seen = _worker_import(folder, code, tmp_path)
    assert seen == {
        "refused": f"the code snapshot {folder} is not the one the launcher made: "
        "stateaware/__pycache__ is a bytecode folder"
    }

    said: list[str] = []
    assert take_snapshot(tmp_path, code, say=said.append) == folder  # what every launch does before starting workers
    assert said == [
        f"snapshot {folder} no longer matches source hash {code[:12]} (stateaware/__pycache__ is a bytecode folder); "
        "rebuilding it"
    ]
    seen = _worker_import(folder, code, tmp_path)
    assert seen["planted"] is False and seen["file"] == str(units) and seen["problem"] is None
    assert not list(folder.rglob("*.pyc"))


def test_a_worker_reads_and_writes_no_bytecode_in_or_for_the_snapshot(tmp_path, monkeypatch):
    code = source_hash()
    folder = take_snapshot(tmp_path / "out", code)
    # A user's own pycache prefix would move the bytecode lookup out of the snapshot, to a
    # folder no snapshot check covers: a pyc planted there must not run either.
    prefix = tmp_path / "prefix"
    units = folder / "stateaware" / "units.py"
    _malicious_pyc(units, prefix / units.parent.relative_to("/") / _pyc_name("units"))
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(prefix))

    seen = _worker_import(folder, code, tmp_path)
    assert seen == {"planted": False, "file": str(units), "prefix": None, "problem": None}
    assert not list(folder.rglob("*.pyc"))  # nothing written beside the sources either
    assert snapshot_problems(folder, code) == []
    said: list[str] = []
    take_snapshot(tmp_path / "out", code, say=said.append)
    assert said == []


def _sourceless(folder: Path) -> str:
    (folder / "stateaware" / "evil.pyc").write_bytes(importlib.util.MAGIC_NUMBER + bytes(12))
    return "stateaware/evil.pyc added"


def _extension(folder: Path) -> str:  # a .so beside units.py is imported instead of it
    name = "units" + importlib.machinery.EXTENSION_SUFFIXES[0]
    (folder / "stateaware" / name).write_bytes(b"\x7fELF")
    return f"stateaware/{name} added"


def _link(folder: Path) -> str:
    (folder / "stateaware" / "linked.py").symlink_to(folder / "stateaware" / "units.py")
    return f"stateaware/linked.py is a symbolic link to {folder / 'stateaware' / 'units.py'}"


def _blocker_removed(folder: Path) -> str:
    (folder / "stateaware" / "records" / "__pycache__").unlink()
    return "stateaware/records/__pycache__ removed"


def _blocker_filled(folder: Path) -> str:
    (folder / "stateaware" / "__pycache__").write_bytes(b"x")
    return "stateaware/__pycache__ is not empty"


@pytest.mark.parametrize("tamper", [_sourceless, _extension, _link, _blocker_removed, _blocker_filled])
def test_anything_but_the_hashed_files_is_tampering_and_rebuilt(tmp_path, tamper):
    code = source_hash()
    folder = take_snapshot(tmp_path, code)
    what = tamper(folder)
    assert what in snapshot_problems(folder, code)
    said: list[str] = []
    take_snapshot(tmp_path, code, say=said.append)
    assert said == [f"snapshot {folder} no longer matches source hash {code[:12]} ({what}); rebuilding it"]
    assert snapshot_problems(folder, code) == []
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no temporary or old copy left


def test_a_process_not_started_on_a_snapshot_has_no_snapshot_to_check():
    assert running_snapshot_problem("0" * 64) is None


def test_the_batch_script_lines_give_a_job_the_same_environment(tmp_path):
    script = "\n".join(
        ["export PYTHONPYCACHEPREFIX=/elsewhere PYTHONPATH=/kept", *batch_script_lines()]
        + ['printf "%s\\n" "$PYTHONPATH" "$PYTHONSAFEPATH" "${PYTHONPYCACHEPREFIX-unset}"']
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env={})
    assert done.stdout.splitlines() == ["/kept", "1", ""]  # nothing of the snapshot on the path
    env = worker_environment({"PYTHONPATH": "/kept"})
    assert done.stdout.splitlines() == [env["PYTHONPATH"], env["PYTHONSAFEPATH"], env["PYTHONPYCACHEPREFIX"]]
