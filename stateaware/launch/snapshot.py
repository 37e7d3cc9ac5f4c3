"""Code snapshots: queued processes run the code as it was at submission.

A process may start minutes (a timing cohort run one at a time) or hours (a Slurm queue)
after its submission, while someone edits the files. The launcher therefore copies
exactly the files the source hash covers (:func:`stateaware.source.source_files`, under
their package-relative names — the layout of an installed wheel — and a user's own kind
module beside them: its file, or its top-level package folder) into
``OUT/.snapshots/<hash>/`` and starts processes with that folder first on
``PYTHONPATH`` (and ``PYTHONSAFEPATH=1``, so a working directory inside a checkout does
not shadow it); each process then imports ``stateaware`` and the user's kind from the
snapshot — never from the live directory the command ran in — and its source-hash check
compares the snapshot with the hash taken at submission.

Why not submitit's ``RsyncSnapshot``: it snapshots a git checkout's committed files and
relies on the working directory, which neither covers uncommitted edits nor redirects
``stateaware.cohorts``/``stateaware.analysis``, which an editable install maps to
top-level folders; copying the hashed file set does both, needs no rsync or git, and
makes "what ran" and "what was hashed" the same set of files by construction.

A snapshot is re-verified every time it is reused: its files (all but ``__pycache__``) are
hashed again, and a snapshot that no longer hashes to its name — a file edited after a
traceback pointed into it, one added or removed — is rebuilt, saying so in one line.
Otherwise every process would find its code drifted and every resume would end in
``source_drift``. Hashing the few hundred KiB of source costs milliseconds. A full disk
while copying raises :class:`~stateaware.records.writer.DiskFullError` and leaves no
partial snapshot behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from stateaware.records.writer import as_disk_full, disk_full

__all__ = ["SnapshotError", "take_snapshot", "snapshot_hash", "python_path_first", "import_environment"]


class SnapshotError(RuntimeError):
    """The code changed while it was being snapshotted."""


def take_snapshot(
    out: Path | str, source_hash: str, *, user_code: Sequence[str] = (), say: Callable[[str], None] | None = None
) -> Path:
    """The snapshot folder of ``source_hash`` under ``out``, created if absent, rebuilt if tampered with.

    ``user_code``: the top-level modules of the user's own code the run executes (a cohort
    kind outside ``stateaware``), copied beside ``stateaware/`` under the names the source
    hash gives them (:func:`stateaware.source.source_files`); ``source_hash`` covers them.

    Created under a temporary name, verified to hash to ``source_hash`` and renamed into
    place, so a folder that exists was complete and right; an existing folder is hashed
    again before reuse and rebuilt when it no longer matches (``say`` gets one line).
    Raises :class:`SnapshotError` when the files changed between hashing and copying,
    :class:`~stateaware.records.writer.DiskFullError` when the disk is full.
    """
    from stateaware.source import source_files

    dest = Path(out) / ".snapshots" / source_hash[:16]
    if dest.is_dir():
        if snapshot_hash(dest) == source_hash:
            return dest
        if say is not None:
            changed = _differences(dest, source_files(user_code))
            listed = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "") or "contents differ"
            say(f"snapshot {dest} no longer matches source hash {source_hash[:12]} ({listed}); rebuilding it")
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        _copy(tmp, source_hash, user_code)
        if dest.is_dir():  # a tampered snapshot: move it aside, then the verified copy in
            stale = dest.with_name(f".{dest.name}.stale-{os.getpid()}")
            shutil.rmtree(stale, ignore_errors=True)
            dest.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            tmp.rename(dest)
        except OSError:  # another launcher finished the same snapshot first
            if snapshot_hash(dest) != source_hash:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def snapshot_hash(folder: Path) -> str:
    """The source hash of a snapshot folder: every file in it except ``__pycache__`` (so an added file counts)."""
    from stateaware.source import hash_files

    files = (p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.relative_to(folder).parts)
    return hash_files((p.relative_to(folder).as_posix(), p) for p in files)


def _copy(tmp: Path, source_hash: str, user_code: Sequence[str]) -> None:
    from stateaware.source import UserCodeError, source_files

    try:
        files = source_files(user_code)
    except UserCodeError as exc:  # the user's kind module went away after it was hashed
        raise SnapshotError(f"{exc}; it was there when the code was hashed; re-run the command") from None
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for name, path in files:
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    except OSError as exc:
        if disk_full(exc):
            size = sum(path.stat().st_size for _, path in files)
            raise as_disk_full(exc, tmp.parent, size) from None
        raise
    if snapshot_hash(tmp) != source_hash:
        raise SnapshotError("the code changed while it was being snapshotted; re-run the command")


def _differences(folder: Path, files: list[tuple[str, Path]]) -> list[str]:
    """Names that differ between a snapshot folder and the current source files: edited, added or removed."""
    current = dict(files)
    held = {
        p.relative_to(folder).as_posix(): p
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.relative_to(folder).parts
    }
    out = [f"{n} removed" for n in sorted(current.keys() - held.keys())]
    out += [f"{n} added" for n in sorted(held.keys() - current.keys())]
    out += [
        f"{n} edited" for n in sorted(current.keys() & held.keys()) if held[n].read_bytes() != current[n].read_bytes()
    ]
    return out


def import_environment(folder: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that make a new interpreter import ``stateaware`` from ``folder``.

    ``folder`` goes first on ``PYTHONPATH``, and ``PYTHONSAFEPATH=1`` stops Python from
    putting the working directory before it: a process started from inside a checkout
    would otherwise import the live ``stateaware/`` folder there, not the snapshot.
    """
    before = (environ if environ is not None else os.environ).get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), before])), "PYTHONSAFEPATH": "1"}


@contextlib.contextmanager
def python_path_first(folder: Path) -> Iterator[None]:
    """Processes started inside the block import ``stateaware`` from ``folder`` (see :func:`import_environment`)."""
    updates = import_environment(folder)
    before = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
