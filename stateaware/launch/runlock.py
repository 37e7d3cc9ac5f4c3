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
than submitting them again (see :func:`stateaware.launch.slurm.run_array`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["RunLocked", "lock_path", "run_lock"]


class RunLocked(RuntimeError):
    """Another live launcher holds the run; the message names it and what to do."""


def lock_path(out: Path | str, cohort: str, run_id: str) -> Path:
    return Path(out) / "runs" / f"cohort={cohort}" / f"run_id={run_id}" / ".launcher.lock"


@contextlib.contextmanager
def run_lock(out: Path | str, cohort: str, run_id: str, *, on_takeover=None) -> Iterator[Path]:
    """Hold the run's lock inside the block; raise :class:`RunLocked` if a live launcher has it.

    ``on_takeover(line)`` is called with a one-line note when the lock file names an
    earlier holder that is gone (its lock was released when it died).
    """
    path = lock_path(out, cohort, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
