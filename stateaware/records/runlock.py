"""One launcher per run: an advisory lock file in the run's folder.

``OUT/runs/cohort=<c>/run_id=<r>/.launcher.lock`` is held with ``fcntl.flock`` for as long
as a launcher plans, launches and collects the run, and holds a line saying who holds it
(host, pid, since when). A second launch of the same run finds it held and stops with that
line. Why ``flock`` rather than a pid file: the kernel releases the lock when its holder
dies however it dies (kill -9 included), so a lock left by a dead launcher is simply free
— the next launch takes it over and says whose it was — and no pid is ever guessed about.

Limits: on NFS, Linux maps ``flock`` onto NFS byte-range locks (NFSv4, or NFSv3 with lockd),
which hold across hosts while the server and clients keep their leases; a mount with
``nolock``/``local_lock=all`` makes the lock local to each host, so two hosts could then
both launch one run. With ``launcher=slurm wait=false`` the submitting launcher exits while
its jobs run, so the lock covers the submission only; the jobs in flight are known from
``submissions.json`` and Slurm's own accounting, and a later launch waits for them rather
than submitting them again (see ``stateaware.launch.slurm.run_array``).

The launcher's own paths — this lock file and the folders above it, and the code snapshots
(``stateaware.launch.snapshot``) — are checked before they are used: each lies inside
``out`` (``stateaware.names.check_inside``), and one that is not what the launcher makes
there (a file where a folder belongs, a folder or a symbolic link where the lock file
belongs, an entry it may not read or write) raises ``TamperedPath``, whose one-line
message names the path and what to do. Nothing there is deleted: the launcher never
removes what it did not make.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from stateaware.names import check_inside
from stateaware.records.part_names import run_folder
from stateaware.records.write_paths import refuse_links

__all__ = ["RunLocked", "TamperedPath", "lock_path", "run_lock", "launcher_folder", "describe_entry"]


class RunLocked(RuntimeError):
    """Another live launcher holds the run; the message names it and what to do."""


class TamperedPath(ValueError):
    """A path the launcher keeps for itself is not what it makes there; the one-line message
    names the path and what to do (the command exits 2)."""


def lock_path(out: Path | str, cohort: str, run_id: str) -> Path:
    """Where the lock file of run ``run_id`` of ``cohort`` lies (as given under ``out``, not resolved)."""
    return run_folder(out, "runs", cohort, run_id) / ".launcher.lock"


@contextlib.contextmanager
def run_lock(
    out: Path | str, cohort: str, run_id: str, *, on_takeover: Callable[[str], None] | None = None
) -> Iterator[Path]:
    """Hold the run's lock inside the block; raise ``RunLocked`` if a live launcher has it.

    ``on_takeover(line)`` is called with a one-line note when the lock file names an
    earlier holder that is gone (its lock was released when it died). Raises
    ``TamperedPath`` when the lock file or a folder above it is not what the launcher
    makes there, ``PathOutsideError`` when it resolves outside ``out``.
    """
    path = lock_path(out, cohort, run_id)
    launcher_folder(out, path.parent, "the run's lock")
    check_inside(out, path)
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read(fd))
            raise RunLocked(
                f"run {run_id} (cohort {cohort}) is being launched by {holder}; wait for that launch to end "
                f"and re-run this command to resume, or pass run_id=NAME for a separate run (lock: {path})"
            ) from None
        previous = _read(fd)
        if previous and on_takeover is not None:
            on_takeover(f"run {run_id}: taking over the lock of {_describe(previous)}, which is gone ({path})")
        _write(
            fd,
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "since": datetime.now(UTC).isoformat(timespec="seconds"),
            },
        )
        try:
            yield path
        finally:
            _write(fd, {})  # released: the file says no one holds it
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _open_lock(path: Path) -> int:
    """A descriptor of the lock file at ``path``, created if absent; ``TamperedPath`` when
    ``path`` is a folder, a link or anything but a regular file, or may not be opened."""
    redo = "move it away and re-run the command (the launcher makes a fresh lock file there)"
    try:
        # O_NOFOLLOW: a link planted as the lock file must not make the launcher write its target.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ELOOP):
            raise TamperedPath(f"{path} is {describe_entry(path)}, not the run's lock file; {redo}") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise TamperedPath(
                f"cannot open the run's lock file {path} (permission denied); give it back read and write "
                f"permission (chmod u+rw {path}) or {redo}"
            ) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device opens too, but is no lock file
        os.close(fd)
        raise TamperedPath(f"{path} is {describe_entry(path)}, not the run's lock file; {redo}")
    return fd


def launcher_folder(out: Path | str, folder: Path | str, purpose: str) -> Path:
    """``folder`` (a path under ``out``) as a real folder, made with the folders above it when absent.

    For the launcher's own folders (the run's lock folder, ``OUT/.snapshots``); ``purpose``
    says what it keeps there, for the message (``the code snapshots``). Raises
    ``PathOutsideError`` when ``folder`` resolves outside ``out``, and
    ``TamperedPath`` when ``folder`` is a symbolic link (the launcher never makes one),
    ``LinkBelowOut`` when a folder between ``out`` and it is,
    when it or a folder above it is a file, or when it may not be created. Never deletes.
    """
    folder = Path(folder)
    check_inside(out, folder)
    if folder.is_symlink():
        raise TamperedPath(
            f"{folder} is {describe_entry(folder)}; the launcher makes a folder there and never a link: "
            "remove the link and re-run the command"
        )
    refuse_links(out, folder.parent)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        # The folders below the one in the way do not exist yet: the lowest existing entry is it.
        blocker = next((p for p in (folder, *folder.parents) if os.path.lexists(p) and not p.is_dir()), folder)
        raise TamperedPath(
            f"{blocker} is {describe_entry(blocker)}, not a folder; the launcher keeps {purpose} in {folder}: "
            "move it away and re-run the command"
        ) from None
    except PermissionError as exc:
        raise TamperedPath(
            f"cannot create {folder}: permission denied at {exc.filename}; give yourself write permission "
            "there or pass out=DIR elsewhere"
        ) from None
    return folder


def describe_entry(path: Path | str) -> str:
    """What ``path`` is, for a message: ``a file``, ``a folder``, ``a symbolic link to X``, ..., ``missing``."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "missing"
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(path)}"
    kinds = {stat.S_ISREG: "a file", stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
    return next((name for test, name in kinds.items() if test(mode)), "a device file")


def _read(fd: int) -> dict:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        return json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}


def _write(fd: int, holder: dict) -> None:
    with contextlib.suppress(OSError):  # a full disk must not stop a lock being held or released
        data = (json.dumps(holder) + "\n").encode() if holder else b""
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)


def _describe(holder: dict) -> str:
    if not holder:
        return "another launcher (it has not written its host and pid yet)"
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since {holder.get('since', '?')}"
