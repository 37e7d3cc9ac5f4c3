"""Code snapshots: queued processes run the code as it was at submission.

A process may start minutes (a timing cohort run one at a time) or hours (a Slurm queue)
after its submission, while someone edits the files. The launcher therefore copies
exactly the files the source hash covers (``stateaware.source.source_files``, under
their package-relative names — the layout of an installed wheel — and a user's own kind
module beside them: its file, or its top-level package folder) into
``OUT/.snapshots/<hash>/`` and starts each process with nothing of it importable: the
installed package's ``stateaware.launch.bootstrap`` checks the snapshot against the hash
taken at submission, then puts it first on ``sys.path``, and the process imports
``stateaware`` and the user's kind from the snapshot — never from the live directory the
command ran in, and never a file of the snapshot before it was checked.

Why not submitit's ``RsyncSnapshot``: it snapshots a git checkout's committed files and
relies on the working directory, which neither covers uncommitted edits nor redirects
``stateaware.cohorts``/``stateaware.analysis``, which an editable install maps to
top-level folders; copying the hashed file set does both, needs no rsync or git, and
makes "what ran" and "what was hashed" the same set of files by construction.

**No bytecode.** The source hash covers sources, but Python runs a ``__pycache__/*.pyc``
beside a source whenever its header matches the source's mtime and size — a pyc compiled
from an edited copy and given the original's header would run under an unchanged hash.
So a snapshot holds no bytecode at all, and none can be written into it: every folder of
it that holds a ``.py`` file has an empty *file* named ``__pycache__`` where Python's
bytecode folder would go, so Python finds no pyc there (and cannot write one: the write
fails quietly), and compiles the snapshot's modules from the hashed sources at every start.
``worker_environment`` also empties ``PYTHONPYCACHEPREFIX``, which would otherwise
move the bytecode lookup to a folder outside the snapshot. Measured cost, a worker
importing submitit, ``stateaware.launch.worker`` and ``stateaware.cohorts.demo`` (Python
3.11, CPU time, fastest of 15 starts): 0.33 s with the snapshot's bytecode, 0.35 s without
(+0.02 s; +0.05 s in another series), for the 15 snapshot modules a worker imports;
libraries keep their own bytecode. Why not the alternatives: a ``PYTHONPYCACHEPREFIX``
pointing to an empty private folder ignores *every* library's bytecode too (1.17 s for
the same imports; ``import torch`` 3.0 s → 7.3 s), and protects no better — a file added
to the snapshot after the launcher's check (a ``.so`` beside ``units.py`` is imported
instead of it) is caught only by a check of the snapshot, as here; checked-hash pycs
(``PycInvalidationMode.CHECKED_HASH``) tie a pyc to its source's hash but not its code to
that source — a planted pyc with the right hash field (or the unchecked flag) still runs.

A snapshot is re-verified every time it is reused: it must hold exactly the files that
hash to its name and the empty ``__pycache__`` files, nothing else — a file edited after a
traceback pointed into it, one added or removed, bytecode, a symbolic link — or it is
rebuilt, saying so in one line. Otherwise every process would find its code drifted and
every resume would end in ``source_drift`` (or, for bytecode, run code nobody hashed).
Checking the 1.3 MiB of source takes about 40 ms. Every worker checks it again before
importing anything of it (``stateaware.launch.bootstrap``), and its code checks it once
more after its imports (``running_snapshot_problem``).

A snapshot is built under a temporary name (``.<hash>.tmp-<host>-<pid>``, the rule of
``stateaware.records.writer.temporary_path``) and renamed into place; the temporary
folders of launchers that died are removed by the next snapshot taken in the same
``out`` (``stale_temporary``: never those of a live one,
nor of another host). A full disk while copying raises
``DiskFullError`` and leaves no partial snapshot behind.
A ``.snapshots`` folder or snapshot that is not what the launcher makes there (a file, a
symbolic link, an entry it may not read) raises
``TamperedPath`` naming it; every path written lies inside
``out`` (``stateaware.names.check_inside``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath

import stateaware
from stateaware.names import check_inside
from stateaware.records.runlock import TamperedPath, describe_entry, launcher_folder
from stateaware.records.write_paths import writable
from stateaware.records.writer import as_disk_full, disk_full, stale_temporary, temporary_path
from stateaware.source import SOURCE_SUFFIXES, UserCodeError, hash_files, source_files

__all__ = [
    "SnapshotError",
    "take_snapshot",
    "snapshot_hash",
    "snapshot_problems",
    "running_snapshot_problem",
    "started_clean",
    "worker_environment",
    "batch_script_lines",
]

#: The name of Python's bytecode folder; in a snapshot, an empty file that keeps one from existing.
PYCACHE = "__pycache__"

# What every process started on a snapshot gets besides PYTHONPATH: the working directory
# never shadows the snapshot, and bytecode is looked up beside the sources (where there
# is none), never under a prefix folder outside the snapshot.
_FLAGS: dict[str, str] = {"PYTHONSAFEPATH": "1", "PYTHONPYCACHEPREFIX": ""}


class SnapshotError(RuntimeError):
    """The code changed while it was being snapshotted."""


def take_snapshot(
    out: Path | str,
    source_hash: str,
    *,
    user_code: Sequence[str] = (),
    say: Callable[[str], None] | None = None,
    files: Sequence[tuple[str, Path]] | None = None,
) -> Path:
    """The snapshot folder of ``source_hash`` under ``out``, created if absent, rebuilt if tampered with.

    ``user_code``: the top-level modules of the user's own code the run executes (a cohort
    kind outside ``stateaware``), copied beside ``stateaware/`` under the names the source
    hash gives them (``stateaware.source.source_files``); ``source_hash`` covers them.
    ``files``: the ``(package-relative name, path)`` pairs to snapshot instead of the running
    code's (another version of the code: ``stateaware.launch.pair``); ``source_hash`` is
    their ``hash_files``.

    Created under a temporary name, verified (``snapshot_problems``) and renamed into
    place, so a folder that exists was complete and right; an existing folder is verified
    again before reuse and rebuilt when it is not exactly the snapshot (``say`` gets one
    line). Temporary folders of dead launchers are removed first. Raises
    ``SnapshotError`` when the files changed between hashing and copying,
    ``DiskFullError`` when the disk is full,
    ``TamperedPath`` when ``OUT/.snapshots`` or the snapshot
    is a file, a symbolic link or unreadable, ``PathOutsideError``
    when either resolves outside ``out``.
    """

    def listed() -> list[tuple[str, Path]]:
        return list(files) if files is not None else source_files(user_code)

    dest = Path(out) / ".snapshots" / source_hash[:16]
    launcher_folder(out, dest.parent, "the code snapshots")
    _remove_stale_temporaries(dest.parent)
    if _existing_snapshot(out, dest):
        problems = _readable(dest, lambda: snapshot_problems(dest, source_hash))
        if not problems:
            return dest
        if say is not None:
            changed = _readable(dest, lambda: _differences(dest, listed())) or problems
            shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
            say(f"snapshot {dest} no longer matches source hash {source_hash[:12]} ({shown}); rebuilding it")
    tmp = temporary_path(dest)
    writable(out, tmp)
    try:
        _copy(tmp, source_hash, listed)
        _install(out, tmp, dest, source_hash)
    finally:
        _remove(tmp)
    return dest


def _existing_snapshot(out: Path | str, dest: Path) -> bool:
    """Whether ``dest`` is a folder (to verify); ``False`` when absent; ``TamperedPath`` when it
    is anything else, ``PathOutsideError`` when it resolves outside ``out``."""
    check_inside(out, dest)
    if not os.path.lexists(dest):
        return False
    if dest.is_symlink() or not dest.is_dir():
        raise TamperedPath(
            f"{dest} is {describe_entry(dest)}, not a code snapshot folder; the launcher keeps the snapshot of "
            "the code there (never a link): move it away and re-run the command"
        )
    return True


def _install(out: Path | str, tmp: Path, dest: Path, source_hash: str) -> None:
    """Rename the verified folder ``tmp`` to ``dest``, moving a tampered ``dest`` aside first."""
    if os.path.lexists(dest):  # a tampered snapshot: move it aside, then the verified copy in
        aside = temporary_path(dest.with_name(f"{dest.name}.old"))  # a dead launcher's is stale like tmp
        writable(out, aside)
        _remove(aside)
        with contextlib.suppress(FileNotFoundError):  # another launcher moved it first
            dest.rename(aside)
        _remove(aside)
    writable(out, tmp)  # at the move itself: a link planted meanwhile on the way is refused
    try:
        tmp.rename(dest)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        # Another launcher put its verified copy in first: use it if it is still right.
        if _readable(dest, lambda: snapshot_problems(dest, source_hash)):
            raise SnapshotError(f"snapshot {dest} changed while it was being rebuilt; re-run the command") from None


def snapshot_hash(folder: Path) -> str:
    """The source hash of a snapshot folder: every regular file in it but those named ``__pycache__``
    (so an added file counts). Links, special files and bytecode folders are left out here;
    ``snapshot_problems`` reports them."""
    return hash_files(_sources(_entries(folder)).items())


def snapshot_problems(folder: Path, source_hash: str) -> list[str]:
    """Why ``folder`` is not exactly the snapshot of ``source_hash``: ``[]`` when it is.

    Exactly: the regular files that hash to ``source_hash`` (``snapshot_hash``), an empty
    file ``__pycache__`` in every folder that holds a ``.py`` file, and nothing else (empty
    folders aside). Each problem is a short phrase (``stateaware/__pycache__ is a bytecode
    folder``). An unreadable entry raises ``PermissionError`` (``take_snapshot`` names it).
    """
    entries = _entries(folder)
    problems = _layout_problems(entries)
    found = hash_files(_sources(entries).items())
    if found != source_hash:
        problems.append(f"its files hash to {found[:12]}")
    return problems


def _layout_problems(entries: dict[str, Path | str]) -> list[str]:
    """What in a snapshot's entries (``_entries``) can be no source file nor a ``__pycache__``
    blocker where one belongs: links, bytecode, files the hash never covers (a ``.so``, a
    ``.pyc``, a hidden file), blockers missing, misplaced or not empty."""
    sources = _sources(entries)
    blockers = _blockers(sources)
    problems = [f"{name} removed" for name in sorted(blockers - entries.keys())]
    for name, entry in sorted(entries.items()):
        if isinstance(entry, str):
            problems.append(f"{name} is {entry}")
        elif name in sources:
            path = PurePosixPath(name)
            if path.suffix not in SOURCE_SUFFIXES or any(part.startswith(".") for part in path.parts):
                problems.append(f"{name} added")
        elif name not in blockers:
            problems.append(f"{name} added")
        elif entry.stat().st_size:
            problems.append(f"{name} is not empty")
    return problems


def _blockers(names: Iterable[str]) -> set[str]:
    """The ``__pycache__`` files a snapshot of source files ``names`` holds: one per folder with a ``.py`` file."""
    return {(PurePosixPath(name).parent / PYCACHE).as_posix() for name in names if name.endswith(".py")}


def running_snapshot_problem(source_hash: str) -> str | None:
    """Why the snapshot this process imported ``stateaware`` from is not exactly the snapshot
    of ``source_hash`` (one line), or ``None`` when it is — or when ``stateaware`` was not
    imported from a snapshot (``OUT/.snapshots/<hash>/stateaware``).

    For a process started on a snapshot (a worker), after its own imports: an entry added
    to the snapshot after the launcher checked it (bytecode, a ``.so`` that shadows a
    module, a link) is caught here, where a source hash over ``*.py`` files would miss it.
    """
    folder = Path(stateaware.__file__).resolve().parent.parent
    if folder.parent.name != ".snapshots":
        return None
    try:
        problems = snapshot_problems(folder, source_hash)
    except OSError as exc:
        problems = [f"{exc.filename} cannot be read ({exc.strerror})"]
    if not problems:
        return None
    return f"the code snapshot {folder} is not the one the launcher made: " + ", ".join(problems[:5])


def _entries(folder: Path) -> dict[str, Path | str]:
    """Every entry under ``folder`` but folders: posix name → its path when a regular file, else
    what it is (``a symbolic link to X``, ``a bytecode folder`` for a ``__pycache__`` folder, ...).

    Links are never followed and a ``__pycache__`` folder is not entered: either is a problem
    whatever it holds. Raises ``PermissionError`` for a folder that cannot be listed.
    """
    found: dict[str, Path | str] = {}
    with os.scandir(folder) as listing:
        for entry in listing:
            path = Path(entry.path)
            name = path.relative_to(folder).as_posix()
            if entry.is_dir(follow_symlinks=False) and entry.name != PYCACHE:
                found.update({f"{name}/{sub}": what for sub, what in _entries(path).items()})
            elif entry.is_file(follow_symlinks=False):
                found[name] = path
            elif entry.is_dir(follow_symlinks=False):
                found[name] = "a bytecode folder"
            else:
                found[name] = describe_entry(path)
    return found


def _sources(entries: dict[str, Path | str]) -> dict[str, Path]:
    """The entries of ``_entries`` the hash covers: regular files not named ``__pycache__``."""
    return {n: e for n, e in entries.items() if isinstance(e, Path) and PurePosixPath(n).name != PYCACHE}


def _readable(dest: Path, check: Callable[[], list[str]]) -> list[str]:
    """``check()``, an unreadable entry of ``dest`` raised as one ``TamperedPath`` line."""
    try:
        return check()
    except PermissionError as exc:
        raise TamperedPath(
            f"cannot read {exc.filename} (permission denied); the launcher verifies a snapshot before reusing "
            f"it: restore its permissions (chmod -R u+rwX {dest}) or move {dest} away, then re-run the command"
        ) from None


def _copy(tmp: Path, source_hash: str, listed: Callable[[], list[tuple[str, Path]]]) -> None:
    """Fill ``tmp`` with the hashed files and the ``__pycache__`` blockers, and verify it."""
    try:
        files = listed()
    except UserCodeError as exc:  # the user's kind module went away after it was hashed
        raise SnapshotError(f"{exc}; it was there when the code was hashed; re-run the command") from None
    _remove(tmp)  # a folder of this name is a dead process's: this pid is ours now
    try:
        tmp.mkdir()
        for name, path in files:
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        for folder in {(tmp / name).parent for name, _ in files if name.endswith(".py")}:
            (folder / PYCACHE).touch(exist_ok=False)
    except OSError as exc:
        if disk_full(exc):
            size = sum(path.stat().st_size for _, path in files)
            raise as_disk_full(exc, tmp.parent, size) from None
        if isinstance(exc, PermissionError):
            raise TamperedPath(
                f"cannot write the code snapshot in {tmp.parent} (permission denied at {exc.filename}); give "
                f"yourself write permission there (chmod u+rwx {tmp.parent}) or pass out=DIR elsewhere"
            ) from None
        raise
    if snapshot_problems(tmp, source_hash):
        raise SnapshotError("the code changed while it was being snapshotted; re-run the command")


def _remove_stale_temporaries(snapshots: Path) -> None:
    """Remove the temporary folders (``.<hash>.tmp-<host>-<pid>``) of launchers that are gone.

    The rule of the records' temporary files (``stale_temporary``):
    one of a live launcher, or of another host, is never touched.
    """
    try:
        names = os.listdir(snapshots)
    except PermissionError:
        raise TamperedPath(
            f"cannot list {snapshots} (permission denied); restore its permissions (chmod u+rwx {snapshots}) "
            "and re-run the command"
        ) from None
    for name in names:
        if name.startswith(".") and ".tmp-" in name and stale_temporary(snapshots / name):
            _remove(snapshots / name)


def _remove(path: Path) -> None:
    """Delete ``path`` (a folder with what it holds, a file or a link — never a link's target); quiet when absent."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _differences(folder: Path, files: list[tuple[str, Path]]) -> list[str]:
    """What differs between a snapshot folder and the current source files: sources edited, added
    or removed, then what is not a source at all (bytecode, a link; ``_layout_problems``)."""
    current = dict(files)
    entries = _entries(folder)
    held = _sources(entries)
    out = [f"{n} removed" for n in sorted(current.keys() - held.keys())]
    out += [f"{n} added" for n in sorted(held.keys() - current.keys())]
    out += [
        f"{n} edited" for n in sorted(current.keys() & held.keys()) if held[n].read_bytes() != current[n].read_bytes()
    ]
    return out + [problem for problem in _layout_problems(entries) if problem not in out]


def worker_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of a worker started on a snapshot: nothing of the snapshot importable at start-up.

    The snapshot is on no path: the worker's ``FromSnapshot``
    checks it, then puts it first on ``sys.path`` (NOTE [ Nothing of a snapshot runs before it
    is verified ] in ``stateaware.launch.bootstrap``). ``PYTHONSAFEPATH=1`` keeps the working
    directory off the path (a checkout there would shadow the installed verifier and, later,
    the snapshot), and ``PYTHONPYCACHEPREFIX`` is emptied (Python then reads bytecode beside the
    sources, where a snapshot has none; see the module docstring). A ``PYTHONPATH`` entry that
    is a snapshot folder (``.snapshots/<hash>``, a launcher started inside a worker's
    environment) is dropped; the user's other entries stay. ``environ``: the environment the
    ``PYTHONPATH`` is read from (default ``os.environ``).
    """
    before = (environ if environ is not None else os.environ).get("PYTHONPATH", "")
    kept = [entry for entry in before.split(os.pathsep) if entry and Path(entry).parent.name != ".snapshots"]
    return {"PYTHONPATH": os.pathsep.join(kept), **_FLAGS}


def batch_script_lines() -> list[str]:
    """``worker_environment``'s flags as ``export`` lines of a batch script, for a Slurm job that a
    requeue starts again (the ``PYTHONPATH`` the job finds is left as it is)."""
    return [f"export {key}={shlex.quote(value)}" for key, value in _FLAGS.items()]


@contextlib.contextmanager
def started_clean() -> Iterator[None]:
    """Processes started inside the block get ``worker_environment``; restored after it."""
    updates = worker_environment()
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
