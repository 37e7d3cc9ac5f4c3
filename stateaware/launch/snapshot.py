"""Code snapshots: queued processes run the code as it was at submission.

A process may start minutes (a timing cohort run one at a time) or hours (a Slurm queue)
after its submission, while someone edits the files. The launcher therefore copies
exactly the files the source hash covers (:func:`stateaware.source.source_files`, under
their package-relative names — the layout of an installed wheel) into
``OUT/.snapshots/<hash>/`` and starts processes with that folder first on
``PYTHONPATH`` (and ``PYTHONSAFEPATH=1``, so a working directory inside a checkout does
not shadow it); each process then imports ``stateaware`` from the snapshot, and its
source-hash check compares the snapshot with the hash taken at submission.

Why not submitit's ``RsyncSnapshot``: it snapshots a git checkout's committed files and
relies on the working directory, which neither covers uncommitted edits nor redirects
``stateaware.cohorts``/``stateaware.analysis``, which an editable install maps to
top-level folders; copying the hashed file set does both, needs no rsync or git, and
makes "what ran" and "what was hashed" the same set of files by construction.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["SnapshotError", "take_snapshot", "python_path_first", "import_environment"]


class SnapshotError(RuntimeError):
    """The code changed while it was being snapshotted."""


def take_snapshot(out: Path | str, source_hash: str) -> Path:
    """The snapshot folder of ``source_hash`` under ``out``, created if absent.

    Created under a temporary name, verified to hash to ``source_hash`` and renamed into
    place, so a folder that exists is complete and right. Raises :class:`SnapshotError`
    when the files changed between hashing and copying.
    """
    from stateaware.source import hash_files, source_files

    dest = Path(out) / ".snapshots" / source_hash[:16]
    if dest.is_dir():
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for name, path in source_files():
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    copied = hash_files((p.relative_to(tmp).as_posix(), p) for p in tmp.rglob("*") if p.is_file())
    if copied != source_hash:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SnapshotError("the code changed while it was being snapshotted; re-run the command")
    try:
        tmp.rename(dest)
    except OSError:  # another launcher finished the same snapshot first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


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
