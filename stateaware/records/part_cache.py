"""The part check, cached: every page of a part is read once, not on every ``sql``.

Reading every page (:func:`stateaware.records.check.content_problem`: checksums, decoding,
identity) costs a full read of the part; the footer check costs a few KiB. Every reader asks
:meth:`PartChecks.problem` (or the one-shot :func:`checked_problem`): the footer is checked
each time, the pages only when this cache has no answer for the file as it is now.

NOTE [ Where the cache lives, and what it trusts ]
One JSON file per results directory, named by the SHA-256 of its resolved path, in
``$STATEAWARE_CACHE/part-checks/`` — by default ``$XDG_CACHE_HOME/stateaware/part-checks/``,
else ``~/.cache/stateaware/part-checks/``. Never inside the results directory: reading
results must not change them (a cache folder set inside them is not written; the cache is
then kept in memory only, as it is when the folder cannot be written at all).

- The key of a part is its path (relative to the results directory) with its size,
  ``mtime_ns``, inode and ``ctime_ns``: any write, replacement or copy over it changes one of
  them, and the part is read again. The value is the problem found (``None``: none) and
  whether its pages carried checksums.
- A part changed less than :data:`SETTLE_NS` before it was checked is not cached: file times
  are coarse (a kernel tick), so a second write in the same tick would keep the key. Git's
  index has the same rule ("racily clean" entries).
- Writes are atomic (a temporary file in the same folder, then a rename), merged with what
  another process saved meanwhile; two writers racing lose at most one's new entries, which
  are checked again next time.
- The file carries the SHA-256 of its entries and the results path it belongs to; a file
  that does not parse, fails its digest, or belongs elsewhere is ignored whole (an empty
  cache, rebuilt by the next check) — a damaged cache can only cost a re-read, never turn a
  damaged part into a good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from stateaware.records import check

__all__ = ["CACHE_ENV", "SETTLE_NS", "PartChecks", "cache_file", "checked_problem"]

#: Environment variable naming the stateaware cache folder (part checks go to its ``part-checks/``).
CACHE_ENV = "STATEAWARE_CACHE"

#: A part changed less than this long before its check is checked again next time (see the NOTE).
SETTLE_NS = 2_000_000_000

_FORMAT = "stateaware.part-checks/1"

#: Entries of every results directory this process checked, by cache file: the cache when
#: the file cannot be written, and a second connection's head start when it can.
_MEMORY: dict[str, dict[str, list[Any]]] = {}


def cache_file(results: Path | str) -> Path:
    """The cache file of ``results`` (see NOTE [ Where the cache lives, and what it trusts ])."""
    root = os.environ.get(CACHE_ENV)
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "stateaware"
    digest = hashlib.sha256(os.fsencode(os.path.realpath(results))).hexdigest()[:32]
    return base / "part-checks" / f"{digest}.json"


class PartChecks:
    """The checked parts of one results directory: footer each time, pages once per version of a file.

    Use one per scan (``with PartChecks(results) as checks: ...``): it reads the cache file
    once and saves what it learnt once, at the end. Never raises for a bad part or a bad
    cache file; a cache that cannot be read or written only costs re-reads.
    """

    def __init__(self, results: Path | str):
        self.results = Path(results)
        self._root = os.path.realpath(self.results)
        self.file = cache_file(self.results)
        self._writable = not _inside(self.file, self._root)
        self._entries = {**_load(self.file, self._root), **_MEMORY.get(str(self.file), {})}
        self._new: dict[str, list[Any]] = {}

    def __enter__(self) -> PartChecks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.save()

    def problem(self, path: Path | str, schema: pa.Schema | str, *, missing_ok: bool = False) -> str | None:
        """What is wrong with ``path`` as a part of ``schema`` (one short phrase), or ``None``.

        The footer and schema check of :func:`stateaware.records.check.part_problem` (with
        ``missing_ok`` as there), then every page (:func:`stateaware.records.check.content_problem`),
        answered from the cache when the file has not changed since it was read.
        """
        problem = check.part_problem(path, schema, missing_ok=missing_ok)
        return problem if problem is not None else self.content(path).problem

    def content(self, path: Path | str) -> check.Content:
        """:func:`stateaware.records.check.content_problem` of ``path``, from the cache when it has the answer."""
        key = self._key(Path(path))
        try:
            stat = os.stat(path)
        except OSError as exc:
            return check.Content(f"unreadable ({exc.strerror or exc})", False)
        signature = [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]
        entry = self._entries.get(key)
        if entry is not None and entry[:4] == signature:
            return check.Content(entry[4], entry[5])
        started = time.time_ns()
        found = check.content_problem(path)
        if max(stat.st_mtime_ns, stat.st_ctime_ns) + SETTLE_NS <= started:
            self._entries[key] = self._new[key] = [*signature, found.problem, found.checksums]
        return found

    def save(self) -> None:
        """Store what this scan learnt (merged with what others stored meanwhile); quiet on failure."""
        if not self._new:
            return
        _MEMORY.setdefault(str(self.file), {}).update(self._new)
        if self._writable:
            try:
                merged = {**_load(self.file, self._root), **self._new}
                _store(self.file, self._root, merged)
            except OSError:
                self._writable = False  # a read-only or full cache folder: memory only from now on
        self._new = {}

    def _key(self, path: Path) -> str:
        try:
            return path.relative_to(self.results).as_posix()
        except ValueError:
            return os.path.realpath(path)


def checked_problem(
    results: Path | str, path: Path | str, schema: pa.Schema | str, *, missing_ok: bool = False
) -> str | None:
    """:meth:`PartChecks.problem` for one part (a scan of many should hold one :class:`PartChecks`)."""
    with PartChecks(results) as checks:
        return checks.problem(path, schema, missing_ok=missing_ok)


def _inside(file: Path, root: str) -> bool:
    target = os.path.realpath(file)
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def _digest(entries: dict[str, list[Any]]) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _load(file: Path, root: str) -> dict[str, list[Any]]:
    """The entries of ``file``; empty when it is missing, unreadable, damaged or another directory's."""
    try:
        data = json.loads(file.read_bytes())
        entries = data["entries"]
        if data["format"] != _FORMAT or data["results"] != root or data["sha256"] != _digest(entries):
            return {}
        if not all(_valid(key, value) for key, value in entries.items()):
            return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return entries


def _valid(key: object, value: object) -> bool:
    return (
        isinstance(key, str)
        and isinstance(value, list)
        and len(value) == 6
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value[:4])
        and (value[4] is None or isinstance(value[4], str))
        and isinstance(value[5], bool)
    )


def _store(file: Path, root: str, entries: dict[str, list[Any]]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    body = {"format": _FORMAT, "results": root, "sha256": _digest(entries), "entries": entries}
    tmp = file.with_name(f".{file.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        tmp.write_text(json.dumps(body, sort_keys=True, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)
