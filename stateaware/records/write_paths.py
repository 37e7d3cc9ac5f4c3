"""Whether a path may be written or moved under a results directory: the one rule every writer asks.

The rule, for a results directory ``out`` and a path about to be written, created or moved:

* ``out`` itself, and any folder above it, may be a symbolic link: scratch space on a
  cluster often is one, and the user chose it;
* no entry *below* ``out`` on the way to the path — ``out``'s child, each folder after it,
  and the path itself — may be a symbolic link, nor anything but a folder where a folder
  must be: a link planted inside the results would send a report, Hydra's files, exported
  source or a part somewhere else, and a resume would move healthy parts found through it;
* once every link is followed, the path lies inside ``out``'s real path
  (``stateaware.names.check_inside``).

``writable`` checks this at the write or the move itself, not once at the start, so
a link made while a command runs is refused too: every writer of the store
(``records/writer.py``'s atomic writes and so every part, manifest, report and figure,
quarantine, compaction, the run lock, snapshots, exported source, Hydra's sweep folders)
calls it right before it touches the file system. A refusal is one line naming the entry,
``LinkBelowOut`` (a ``PathOutsideError``, so every command
reports it as invalid input, exit 2).

# NOTE [ Links below out ]
# The walk is lexical from ``out`` as given: ``out`` is made absolute, never resolved, so a
# link at or above it is allowed, and each component after it is ``lstat``-ed. A path
# spelled through ``out``'s real path (a caller that resolved it) is walked from there.
# What does not exist yet ends the walk: the writer creates it, as a folder, next.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from stateaware.names import PathOutsideError, check_inside

__all__ = ["LinkBelowOut", "checked", "make_folder", "refuse_links", "writable", "writing_under"]


class LinkBelowOut(PathOutsideError):
    """An entry below the results directory on the way to a write is a link, or not a folder
    where a folder must be (nor a file where a file is written); the message names it."""


def _below(out: Path | str, path: Path | str) -> tuple[Path, tuple[str, ...]]:
    """``(start, components)``: where the walk to ``path`` starts, ``out`` as given or its real
    path, and the names after it; ``PathOutsideError`` when ``path`` is spelled under neither."""
    for root in (Path(os.path.abspath(out)), Path(os.path.realpath(out))):
        try:
            return root, Path(os.path.abspath(path)).relative_to(root).parts
        except ValueError:
            continue
    check_inside(out, path)  # spelled elsewhere: refused unless it resolves inside out
    root = Path(os.path.realpath(out))
    return root, Path(os.path.realpath(path)).relative_to(root).parts


def writable(out: Path | str, path: Path | str, *, file: bool = False, folder: bool = False) -> Path:
    """``path`` (as given) when it may be written, created or moved under ``out``; else
    ``LinkBelowOut`` naming the link (or the file where a folder must be), or
    ``PathOutsideError`` when it resolves outside ``out``.

    Links at or above ``out`` are allowed, none below it (NOTE [ Links below out ]). ``path``
    need not exist; an existing ``path`` may be a file or a folder, never a link — with
    ``file``, only a regular file (a folder or FIFO where a file is written is named too);
    with ``folder``, only a folder.
    Call it right before the write or move: it is one ``lstat`` per component.
    """
    _walk(out, path, folders=True)
    mode = os.lstat(path).st_mode if (file or folder) and os.path.lexists(path) else None
    if mode is not None and file and not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise LinkBelowOut(f"refusing to write {path}: it is {kind}, where a file must be; move it away and re-run")
    if mode is not None and folder and not stat.S_ISDIR(mode):
        raise LinkBelowOut(f"refusing to write {path}: a file where a folder must be; move it away and re-run")
    check_inside(out, path)
    return Path(path)


def refuse_links(out: Path | str, path: Path | str) -> None:
    """``LinkBelowOut`` when an entry below ``out`` on the way to ``path`` (``path`` included)
    is a symbolic link; the part of ``writable`` for a caller that names a file in the way itself."""
    _walk(out, path, folders=False)


def _walk(out: Path | str, path: Path | str, *, folders: bool) -> None:
    start, names = _below(out, path)
    entry = start
    for i, name in enumerate(names):
        entry = entry / name
        try:
            mode = os.lstat(entry).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise LinkBelowOut(f"refusing to write {path}: {entry} cannot be read ({exc.strerror or exc})") from None
        if stat.S_ISLNK(mode):
            raise LinkBelowOut(
                f"refusing to write {path}: {entry} is a symbolic link (to {os.readlink(entry)}) inside the results "
                f"directory {out}; only out itself or a folder above it may be a link: replace {entry} with a folder"
            )
        if folders and i < len(names) - 1 and not stat.S_ISDIR(mode):
            raise LinkBelowOut(
                f"refusing to write {path}: {entry} is a file where a folder must be; move it away and re-run"
            )


def make_folder(folder: Path | str, out: Path | str | None = None) -> Path:
    """Create ``folder`` (and its parents) after ``checked`` allows it under ``out``; ``folder``.

    An existing ``folder`` that is not a folder is refused like a file on the way."""
    folder = checked(folder, out, folder=True)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


#: The results directory the writes of this thread of control go under, when a command set one.
_ROOT: ContextVar[Path | None] = ContextVar("stateaware_results_root", default=None)


@contextmanager
def writing_under(out: Path | str) -> Iterator[Path]:
    """Make ``out`` the results directory that ``checked`` (so every atomic write) checks
    paths against while the block runs: for writers handed only a path, such as a report
    section's figures."""
    token = _ROOT.set(Path(out))
    try:
        yield Path(out)
    finally:
        _ROOT.reset(token)


def checked(path: Path | str, out: Path | str | None = None, *, file: bool = False, folder: bool = False) -> Path:
    """``path`` after ``writable`` allows it under ``out``, or else under the directory of the
    enclosing ``writing_under``; a path written outside any results directory is unchecked."""
    root = out if out is not None else _ROOT.get()
    return Path(path) if root is None else writable(root, path, file=file, folder=folder)
