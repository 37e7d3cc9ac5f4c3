"""The part check, cached: every page of a part is read once, not on every ``sql``.

Reading every page (``stateaware.records.check.content_problem``: checksums, decoding,
identity) costs a full read of the part; the footer check costs a few KiB, but on a store
of tens of thousands of parts it was most of every query (bench/bench_store.py). Every reader asks
``PartChecks.problem`` (or the one-shot ``checked_problem``): the pages are read only
when this cache has no answer for the file as it is now, and the footer only when it has no
answer for the file as it is now *against this schema* (a footer that failed is read each
time: rare, and cheap to find again).

NOTE [ Where the cache lives, and what it trusts ]
One folder per results directory, named by the SHA-256 of its resolved path, in
``$STATEAWARE_CACHE/part-checks/`` — by default ``$XDG_CACHE_HOME/stateaware/part-checks/``,
else ``~/.cache/stateaware/part-checks/``. Never inside the results directory: reading
results must not change them (a cache folder set inside them is not written; the cache is
then kept in memory only, as it is when the folder cannot be written at all).

- The folder holds one JSON file per run (its ``cohort=C/run_id=R`` partition, whatever the
  table), named by the SHA-256 of that partition, and one for the parts in no run's
  partition: a query pruned to one run loads and saves that run's file only, so its cost
  does not grow with the store's history (``bench/bench_store.py``: one file of every part
  made a one-run query at 60,000 parts 1.6× the same query on a store of that run alone). A file is read
  the first time a scan asks about one of its parts, and written only if that scan learnt
  something new about them.

- The key of a part is its path (relative to the results directory) with its size,
  ``mtime_ns``, inode and ``ctime_ns``: any write, replacement or copy over it changes one of
  them, and the part is read again. The value is the problem found (``None``: none) and
  whether its pages carried checksums, then, once its footer passed, the schemas it passed
  against (``_schema_digest``: the table's columns and types, ``missing_ok``, the schema
  version and the renames) with the old column names it carries and the columns it lacks
  (written before they were added) — so a change of the code's schema reads every footer
  again, never trusts an answer given for another.
- A part changed less than ``SETTLE_NS`` before it was checked is not cached: file times
  are coarse (a kernel tick), so a second write in the same tick would keep the key. Git's
  index has the same rule ("racily clean" entries).
- Writes are atomic (a temporary file in the same folder, then a rename), merged with what
  another process saved meanwhile; two writers racing lose at most one's new entries, which
  are checked again next time. A save keeps only the entries of parts still there: the
  parts a compaction replaced (or a launch quarantined, or a user deleted) leave their run's
  file at its next save, instead of being loaded by every query after.
- A file carries the SHA-256 of its entries, the results path and the run it belongs to; a
  file that does not parse, fails its digest, belongs elsewhere or holds a part of another
  run is ignored whole (an empty cache for that run, rebuilt by the next check) — a damaged
  cache can only cost a re-read, never turn a damaged part into a good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from stateaware.records.columns import RENAMED, SCHEMA_VERSION, Columns, columns_for
from stateaware.records.verdicts import Content, Footer

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CACHE_ENV", "SETTLE_NS", "PartChecks", "cache_file", "checked_problem"]

#: Environment variable naming the stateaware cache folder (part checks go to its ``part-checks/``).
CACHE_ENV = "STATEAWARE_CACHE"

#: A part changed less than this long before its check is checked again next time (see the NOTE).
SETTLE_NS = 2_000_000_000

_FORMAT = "stateaware.part-checks/2"

#: Entries of every results directory this process checked, by cache file: the cache when
#: the file cannot be written, and a second connection's head start when it can.
_MEMORY: dict[str, dict[str, list[Any]]] = {}


def cache_file(results: Path | str, part: str = "") -> Path:
    """The cache file holding the entry of ``part`` (a path relative to ``results``, ``/``-separated;
    default: a part in no run's partition). See NOTE [ Where the cache lives, and what it trusts ]."""
    return _cache_folder(results) / _shard_file_name(_shard(part))


def _cache_folder(results: Path | str) -> Path:
    root = os.environ.get(CACHE_ENV)
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "stateaware"
    digest = hashlib.sha256(os.fsencode(os.path.realpath(results))).hexdigest()[:32]
    return base / "part-checks" / digest


def _shard(key: str) -> str:
    """The run partition (``cohort=C/run_id=R``) a part's key lies in, or ``""`` for none."""
    parts = key.split("/", 3)
    if len(parts) == 4 and parts[1].startswith("cohort=") and parts[2].startswith("run_id="):
        return f"{parts[1]}/{parts[2]}"
    return ""


def _shard_file_name(shard: str) -> str:
    return (hashlib.sha256(shard.encode()).hexdigest()[:32] if shard else "outside-runs") + ".json"


class PartChecks:
    """The checked parts of one results directory: footer each time, pages once per version of a file.

    Use one per scan (``with PartChecks(results) as checks: ...``): it reads the cache file
    once and saves what it learnt once, at the end. Never raises for a bad part or a bad
    cache file; a cache that cannot be read or written only costs re-reads.
    """

    def __init__(self, results: Path | str):
        self.results = Path(results)
        self._root = os.path.realpath(self.results)
        # Keys are paths relative to this prefix, cut as strings: Path.relative_to cost more
        # than the footer check itself on a store of small parts.
        self._prefix = os.path.join(os.fspath(self.results), "")
        self.folder = _cache_folder(self.results)
        self._writable = not _inside(self.folder, self._root)
        self._shards: dict[str, dict[str, list[Any]]] = {}  # by run partition, read when first asked
        self._new: dict[str, dict[str, list[Any]]] = {}  # by run partition: what this scan learnt

    def __enter__(self) -> PartChecks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.save()

    def problem(self, path: Path | str, schema: Columns | pa.Schema | str, *, missing_ok: bool = False) -> str | None:
        """What is wrong with ``path`` as a part of ``schema`` (one short phrase), or ``None``.

        The footer and schema check of ``stateaware.records.check.part_problem`` (with
        ``missing_ok`` as there), then every page (``stateaware.records.check.content_problem``),
        answered from the cache when the file has not changed since it was read.
        """
        return self.inspect(path, schema, missing_ok=missing_ok).problem

    def inspect(self, path: Path | str, schema: Columns | pa.Schema | str, *, missing_ok: bool = False) -> Footer:
        """``problem``, with the old column names the part carries and the columns it lacks
        (a scan groups parts by them) and its ``stat``: what a scan of many parts needs, each
        footer read at most once.

        A part whose footer passed against this schema and whose pages passed, as the file is
        now (the same key as the pages' answer), is answered from one ``stat``.
        """
        schema = columns_for(schema) if isinstance(schema, str) else schema
        key = self._key(path)
        digest = _schema_digest(schema, missing_ok)
        try:
            stat = os.stat(path)
        except OSError:
            stat = None
        entry = self._entry(key)
        if stat is not None and entry is not None and entry[:4] == _signature(stat) and entry[4] is None:
            passed = entry[6].get(digest) if len(entry) > 6 else None
            if passed is not None:
                return Footer(None, dict(passed[0]), stat, tuple(passed[1]))
        # Arrow only now, for a part this cache cannot vouch for (NOTE [ No Arrow until it reads ]).
        # lazy: pyarrow and numpy only for a part the cache has not vouched for (`sql` over vouched parts loads neither)
        from stateaware.records import check
        from stateaware.records.schema import arrow_schema

        footer = check.part_footer(path, arrow_schema(schema), missing_ok=missing_ok)
        if footer.problem is not None or footer.stat is None:
            return footer
        problem = self.content(path, footer.stat).problem
        if problem is not None:
            return footer._replace(problem=problem, old_names={})
        entry = self._entry(key)  # stored by content() unless the file had not settled
        if entry is not None and entry[:4] == _signature(footer.stat) and entry[4] is None:
            passed_against = {**(entry[6] if len(entry) > 6 else {}), digest: [footer.old_names, list(footer.missing)]}
            self._remember(key, [*entry[:6], passed_against])
        return footer

    def content(self, path: Path | str, stat: os.stat_result | None = None) -> Content:
        """``stateaware.records.check.content_problem`` of ``path``, from the cache when it has the answer.

        ``stat``: the file's, when the caller just took it (the footer check does): one
        system call a part less.
        """
        key = self._key(path)
        if stat is None:
            try:
                stat = os.stat(path)
            except OSError as exc:
                return Content(f"unreadable ({exc.strerror or exc})", False)
        signature = _signature(stat)
        entry = self._entry(key)
        if entry is not None and entry[:4] == signature:
            return Content(entry[4], entry[5])
        # lazy: pyarrow and numpy only for a part the cache has not vouched for (`sql` over vouched parts loads neither)
        from stateaware.records import check

        started = time.time_ns()
        found = check.content_problem(path)
        if max(stat.st_mtime_ns, stat.st_ctime_ns) + SETTLE_NS <= started:
            self._remember(key, [*signature, found.problem, found.checksums])
        return found

    def save(self) -> None:
        """Store what this scan learnt (merged with what others stored meanwhile); quiet on failure."""
        for shard, new in self._new.items():
            file = self.folder / _shard_file_name(shard)
            _MEMORY.setdefault(str(file), {}).update(new)
            if self._writable:
                try:
                    merged = {**_load(file, self._root, shard), **new}
                    _store(file, self._root, shard, self._present(merged))
                except OSError:
                    self._writable = False  # a read-only or full cache folder: memory only from now on
        self._new = {}

    def _present(self, entries: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """``entries`` without those of parts no longer there (compacted, quarantined, deleted):
        a run's file would otherwise keep every part it ever held, and every query would load
        them (a compacted run: 5 live entries of 505). One ``lstat`` per entry, on a save only."""
        kept = {}
        for key, entry in entries.items():
            path = key if os.path.isabs(key) else os.path.join(self._prefix, key)
            if os.path.lexists(path):
                kept[key] = entry
        return kept

    def _entry(self, key: str) -> list[Any] | None:
        shard = _shard(key)
        entries = self._shards.get(shard)
        if entries is None:
            file = self.folder / _shard_file_name(shard)
            entries = self._shards[shard] = {**_load(file, self._root, shard), **_MEMORY.get(str(file), {})}
        return entries.get(key)

    def _remember(self, key: str, entry: list[Any]) -> None:
        shard = _shard(key)
        self._entry(key)  # the shard loaded, so this entry is not lost under a later first read
        self._shards[shard][key] = self._new.setdefault(shard, {})[key] = entry

    def _key(self, path: Path | str) -> str:
        text = os.fspath(path)
        if isinstance(path, PurePath) and text.startswith(self._prefix):
            # Both sides are pathlib-normalized and relative_to is lexical: the same key.
            return text[len(self._prefix) :].replace(os.sep, "/")
        try:
            return Path(path).relative_to(self.results).as_posix()
        except ValueError:
            return os.path.realpath(path)


def _signature(stat: os.stat_result) -> list[int]:
    """What changes whenever a file is written, replaced or copied over (see the NOTE)."""
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]


#: Bumped when the footer check itself changes what it accepts: the answers it cached go.
_FOOTER_RULES = 1

#: Digests by schema object (kept, so an id is never reused while its digest is here).
_DIGESTS: dict[int, tuple[Columns | pa.Schema, bool, str]] = {}


def _schema_digest(schema: Columns | pa.Schema, missing_ok: bool) -> str:
    """A short name for everything a footer's answer depends on besides the file itself."""
    known = _DIGESTS.get(id(schema))
    if known is not None and known[0] is schema and known[1] == missing_ok:
        return known[2]
    columns = [(f.name, str(f.type)) for f in schema]
    text = json.dumps([_FOOTER_RULES, SCHEMA_VERSION, sorted(RENAMED.items()), missing_ok, columns])
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    _DIGESTS[id(schema)] = (schema, missing_ok, digest)
    return digest


def checked_problem(
    results: Path | str, path: Path | str, schema: Columns | pa.Schema | str, *, missing_ok: bool = False
) -> str | None:
    """``PartChecks.problem`` for one part (a scan of many should hold one ``PartChecks``)."""
    with PartChecks(results) as checks:
        return checks.problem(path, schema, missing_ok=missing_ok)


def _inside(file: Path, root: str) -> bool:
    target = os.path.realpath(file)
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def _digest(entries: dict[str, list[Any]]) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _load(file: Path, root: str, shard: str) -> dict[str, list[Any]]:
    """The entries of ``file``; empty when it is missing, unreadable, damaged, another
    directory's or another run's."""
    try:
        data = json.loads(file.read_bytes())
        entries = data["entries"]
        if data["format"] != _FORMAT or data["results"] != root or data["run"] != shard:
            return {}
        if data["sha256"] != _digest(entries):
            return {}
        if not all(_valid(key, value) and _shard(key) == shard for key, value in entries.items()):
            return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return entries


def _valid(key: object, value: object) -> bool:
    # Exact types, spelt out: this runs once per part of a run on every load of its file.
    return (
        type(key) is str
        and type(value) is list
        and len(value) in (6, 7)
        and type(value[0]) is int
        and type(value[1]) is int
        and type(value[2]) is int
        and type(value[3]) is int
        and (value[4] is None or type(value[4]) is str)
        and type(value[5]) is bool
        and (len(value) == 6 or _valid_footers(value[6]))
    )


def _valid_footers(value: object) -> bool:
    """``{schema digest: [{old name: new name}, [missing column, ...]]}``, every name a string."""
    return type(value) is dict and all(
        type(digest) is str
        and type(answer) is list
        and len(answer) == 2
        and type(answer[0]) is dict
        and all(type(k) is str and type(v) is str for k, v in answer[0].items())
        and type(answer[1]) is list
        and all(type(name) is str for name in answer[1])
        for digest, answer in value.items()
    )


def _store(file: Path, root: str, shard: str, entries: dict[str, list[Any]]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    body = {"format": _FORMAT, "results": root, "run": shard, "sha256": _digest(entries), "entries": entries}
    tmp = file.with_name(f".{file.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        tmp.write_text(json.dumps(body, sort_keys=True, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)
