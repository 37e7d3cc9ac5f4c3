"""Every tampered path of the launcher's own (the code snapshots, the run's lock) is one named error,
nothing is written outside ``out``, and a dead launcher's temporary snapshot folders are removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stateaware.launch.snapshot import take_snapshot
from stateaware.names import PathOutsideError
from stateaware.records.runlock import TamperedPath, lock_path, run_lock
from stateaware.records.writer import temporary_path
from stateaware.source import source_hash
from tests.conftest import user_env


@pytest.fixture
def code():
    """The source hash, taken by each test: the code may change between tests (others edit it)."""
    return source_hash()


@pytest.fixture
def out(tmp_path):
    """``tmp_path/out``, beside a folder ``elsewhere`` that links may point to; what lies in
    ``tmp_path`` is the same after the test (nothing was written outside ``out``)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "mine.txt").write_text("not the launcher's")
    before = _listing(tmp_path)
    yield tmp_path / "out"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out"]
    assert [p for p in _listing(tmp_path) if not p.startswith("out/")] == [
        p for p in before if not p.startswith("out/")
    ]


def _listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _snapshot(out: Path, code: str) -> Path:
    return out / ".snapshots" / code[:16]


def _deny(monkeypatch, owner, name, locked):
    """``owner.name(path)`` raises ``PermissionError`` for ``locked``, as chmod 000 would for a
    user other than root (root, who runs some CIs, is not stopped by it): refuse the call itself."""
    original = getattr(owner, name)

    def refuse(path, *args, **kwargs):
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(owner, name, refuse)


def _refused(call, kind, message):
    with pytest.raises(kind) as caught:
        call()
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


def test_snapshots_folder_a_file(out, code):
    (out / ".snapshots").write_text("x")
    _refused(
        lambda: take_snapshot(out, code),
        TamperedPath,
        f"{out / '.snapshots'} is a file, not a folder; the launcher keeps the code snapshots in "
        f"{out / '.snapshots'}: move it away and re-run the command",
    )


def test_snapshots_folder_a_link_inside_out(out, code):
    (out / "other").mkdir()
    (out / ".snapshots").symlink_to(out / "other")
    _refused(
        lambda: take_snapshot(out, code),
        TamperedPath,
        f"{out / '.snapshots'} is a symbolic link to {out / 'other'}; the launcher makes a folder there and "
        "never a link: remove the link and re-run the command",
    )


def test_snapshots_folder_a_link_outside_out(out, code):
    (out / ".snapshots").symlink_to(out.parent / "elsewhere")
    with pytest.raises(PathOutsideError, match=r"^refusing to write .*\.snapshots: it resolves to .*elsewhere"):
        take_snapshot(out, code)


def test_a_snapshot_replaced_by_a_file(out, code):
    _snapshot(out, code).parent.mkdir()
    _snapshot(out, code).write_text("x")
    _refused(
        lambda: take_snapshot(out, code),
        TamperedPath,
        f"{_snapshot(out, code)} is a file, not a code snapshot folder; the launcher keeps the snapshot of the code "
        "there (never a link): move it away and re-run the command",
    )


def test_a_snapshot_that_is_a_link(out, code):
    real = take_snapshot(out, code).rename(out / "moved")  # a complete, right snapshot: still not followed
    _snapshot(out, code).symlink_to(real)
    _refused(
        lambda: take_snapshot(out, code),
        TamperedPath,
        f"{_snapshot(out, code)} is a symbolic link to {real}, not a code snapshot folder; the launcher keeps the "
        "snapshot of the code there (never a link): move it away and re-run the command",
    )
    _snapshot(out, code).unlink()
    _snapshot(out, code).symlink_to(out.parent / "elsewhere")
    with pytest.raises(PathOutsideError, match=r"^refusing to write .*: it resolves to .*elsewhere, outside"):
        take_snapshot(out, code)


def test_an_unreadable_snapshot_entry(out, monkeypatch, code):
    folder = take_snapshot(out, code)
    locked = folder / "stateaware" / "units.py"
    _deny(monkeypatch, Path, "read_bytes", locked)
    _refused(
        lambda: take_snapshot(out, code),
        TamperedPath,
        f"cannot read {locked} (permission denied); the launcher verifies a snapshot before reusing it: "
        f"restore its permissions (chmod -R u+rwX {folder}) or move {folder} away, then re-run the command",
    )


def test_an_unlistable_snapshot_folder(out, monkeypatch, code):
    folder = take_snapshot(out, code)
    locked = folder / "stateaware" / "records"
    _deny(monkeypatch, os, "scandir", locked)
    with pytest.raises(TamperedPath, match=rf"^cannot read {locked} \(permission denied\); "):
        take_snapshot(out, code)


def test_an_unlistable_snapshots_folder(out, monkeypatch, code):
    take_snapshot(out, code)
    _deny(monkeypatch, os, "listdir", out / ".snapshots")
    _refused(
        lambda: take_snapshot(out, code),
        TamperedPath,
        f"cannot list {out / '.snapshots'} (permission denied); restore its permissions "
        f"(chmod u+rwx {out / '.snapshots'}) and re-run the command",
    )


def test_lock_file_a_folder(out):
    path = lock_path(out, "demo", "x")
    path.mkdir(parents=True)
    _refused(
        lambda: run_lock(out, "demo", "x").__enter__(),
        TamperedPath,
        f"{path} is a folder, not the run's lock file; move it away and re-run the command "
        "(the launcher makes a fresh lock file there)",
    )


@pytest.mark.parametrize("depth", [1, 3])  # the run's folder, or runs/ itself
def test_lock_folder_a_file(out, depth):
    path = lock_path(out, "demo", "x")
    blocker = path.parents[depth - 1]
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("x")
    _refused(
        lambda: run_lock(out, "demo", "x").__enter__(),
        TamperedPath,
        f"{blocker} is a file, not a folder; the launcher keeps the run's lock in {path.parent}: "
        "move it away and re-run the command",
    )


def test_lock_file_a_link(out):
    path = lock_path(out, "demo", "x")
    path.parent.mkdir(parents=True)
    (out / "other.lock").write_text("")
    path.symlink_to(out / "other.lock")
    _refused(
        lambda: run_lock(out, "demo", "x").__enter__(),
        TamperedPath,
        f"{path} is a symbolic link to {out / 'other.lock'}, not the run's lock file; move it away and re-run "
        "the command (the launcher makes a fresh lock file there)",
    )
    path.unlink()
    path.symlink_to(out.parent / "elsewhere" / "mine.txt")
    with pytest.raises(PathOutsideError, match=r"^refusing to write .*\.launcher\.lock: it resolves to"):
        run_lock(out, "demo", "x").__enter__()
    assert (out.parent / "elsewhere" / "mine.txt").read_text() == "not the launcher's"


def test_lock_file_a_fifo(out):
    path = lock_path(out, "demo", "x")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    _refused(
        lambda: run_lock(out, "demo", "x").__enter__(),
        TamperedPath,
        f"{path} is a FIFO, not the run's lock file; move it away and re-run the command "
        "(the launcher makes a fresh lock file there)",
    )


def test_temporary_snapshots_of_dead_launchers_are_removed_and_no_live_ones(out, code):
    dest = _snapshot(out, code)
    dest.parent.mkdir()
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead_pid.stdout)
    live = temporary_path(dest.with_name("0123456789abcdef"))  # this process's, for another hash
    dead = live.with_name(live.name.replace(f"-{os.getpid()}", f"-{pid}"))
    dead_aside = temporary_path(dest.with_name(f"{dest.name}.old")).name.replace(f"-{os.getpid()}", f"-{pid}")
    legacy = dest.parent / f".{dest.name}.tmp-{pid}"  # a host-less name is this host's
    other_host = dest.parent / f".{dest.name}.tmp-elsewhere-{pid}"
    for folder in (live, dead, dest.parent / dead_aside, legacy, other_host):
        (folder / "stateaware").mkdir(parents=True)
        (folder / "stateaware" / "half.py").write_text("")
    take_snapshot(out, code)
    assert sorted(p.name for p in dest.parent.iterdir()) == sorted([dest.name, live.name, other_host.name])


def _cli(out: Path, cwd: Path) -> subprocess.CompletedProcess:
    args = ["-m", "stateaware", "cohort=noop", f"out={out}", "run_id=x", "processes=1", "launcher=local"]
    return subprocess.run(
        [sys.executable, *args, "hardware=cpu"], capture_output=True, text=True, env=user_env(), cwd=cwd, timeout=300
    )


def test_the_command_names_a_snapshots_link_outside_out_in_one_line(out, code):
    (out / ".snapshots").symlink_to(out.parent / "elsewhere")
    done = _cli(out, out.parent)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: refusing to write {out / '.snapshots'}: it resolves to ")


def test_the_command_names_a_snapshots_file_in_one_line(out):
    (out / ".snapshots").write_text("x")
    done = _cli(out, out.parent)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {out / '.snapshots'} is a file, not a folder; the launcher keeps the code snapshots in "
        f"{out / '.snapshots'}: move it away and re-run the command"
    ]
