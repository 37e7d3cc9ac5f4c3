"""DuckDB views over one results directory: the SQL face of the record store.

Every table of ``stateaware.records.columns`` becomes a view of the same name with exactly
that table's columns; a table with no parts yet is an empty view with the full schema, so
a query written today runs on any results directory. Two views are derived:

- ``attempts``: every ``processes`` row, one per attempt of a process;
- ``processes``: the latest attempt of each process (what "the status of process i" means).

The analysis' own result tables (``stateaware.records.columns.RESULT_COLUMNS``: ``comparisons``)
are views too, empty with their full schema until a report has written them. Nothing else
becomes a view: a folder of the results directory that is not one of these tables (``select``,
``Records``, ``damaged_parts``, ...) holding Parquet files is listed with one warning line and
otherwise ignored (NOTE [ Only the known tables are read ]).

NOTE [ Only parts that pass the check enter a view ]
Each ``*.parquet`` file under a table folder is checked first
(``stateaware.records.part_cache.PartChecks``: the footer each time, every page once
per version of the file): a truncated, zero-byte or random-bytes file, a page whose
checksum or decoding fails, a part whose identity columns disagree with its place (copied
from another run or process), or a Parquet file of another schema never enters a view — it
is listed in the ``damaged_parts`` table of the connection (``folder, path, run_id,
problem, ignored``), verification fails naming it, and the ``sql``/``status`` commands print
one warning line per file. So do an unreadable folder inside a table, a link to a folder
there (never followed: no loop, nothing outside), and a file where a table's folder should
be. Temporary files of interrupted writes (``.name.tmp-PID``) never match ``*.parquet``. The
views are a snapshot of the parts present at ``connect``; parts that land later are
seen by the next ``connect``.

NOTE [ Only the known tables are read ]
Views are made only for the record tables and the result tables, by name, every identifier
quoted: no folder name ever reaches SQL. Any other entry of the results directory is
ignored; one that is a folder holding ``*.parquet`` files is a row of ``damaged_parts``
with ``ignored`` true (one warning line from ``sql``, ``status`` and ``views``, not a
verification failure: it belongs to no table). Hidden entries (``.quarantine``,
``.snapshots``) and folders without Parquet files (a report's figures) are passed over
silently.

NOTE [ Pruning by run ]
A query on chosen runs (``--run-id``, ``--cohort``; ``snapshot``/``connect`` with
``run_ids``/``cohorts``) walks only their partitions, ``table/cohort=C/run_id=R/``
(``cohort=*`` when only run ids are given), so it checks and reads the same files however
many other runs the store holds. Part files lying directly in a table folder or a cohort
folder are listed all the same (they belong to no run's partition: damaged, and named);
a part in any other sub-folder of a table is seen only by a scan of every run. The views
still filter ``run_id``/``cohort``, so a pruned and an unpruned connection show the chosen
runs' rows alike.

NOTE [ Read-only by construction ]
``connect`` reads the parts through Arrow datasets handed to DuckDB, or has DuckDB read
the tables a query names into memory before the lock (``load``, NOTE [ Tables DuckDB reads
itself ]), so DuckDB needs no file access once a statement runs; with ``read_only=True``
(the default) it gets none: external access
off (no ``COPY … TO``, ``ATTACH``/``EXPORT`` of files, ``read_text``/``read_csv``/``glob``
of any path), no extension install, load or autoload, no Python replacement scans, and
the configuration locked so that no ``SET``/``PRAGMA``/``RESET`` can undo it. The views
(and in-memory scratch tables) are all a statement can reach. DuckDB's
``allowed_directories`` is deliberately not used: it admits writes as well as reads
under the directory it names (a ``COPY … TO`` a part file would pass), and so does
``allowed_paths``, file by file.

NOTE [ Tables DuckDB reads itself ]
Arrow opens a small part at about 0.45 ms, DuckDB's own Parquet reader at about 0.3 ms,
and DuckDB scanning an Arrow dataset adds its own cost on top: a whole-store query at 15,030
parts took 3× DuckDB alone (bench/bench_store.py). Views cannot read files once external access is off,
and allowing the files would allow writing them. So ``connect(load={table: columns})`` has
DuckDB read those tables (record or result tables) itself, before the lock, keeping only
``columns`` (``None``: all) plus the ones its views need (``run_id``, ``cohort``, and the
latest-attempt columns of ``processes``): a table in memory, read at DuckDB's speed, behind the same view, which no
statement can then write. The ``sql`` command loads exactly the tables and columns its
statements name (``stateaware.analysis.store.sql.read_statements``'s parse), a report every
table of the runs it reports (``LOAD_EVERY_TABLE``, each row's file kept as
``filename`` for verification, as an Arrow dataset of the parts has it); every other
view stays an Arrow dataset, read lazily. A query over a whole store that needs more memory
than ``--memory-limit`` allows ends in one line naming the limit.

NOTE [ No Arrow until it reads ]
pyarrow and numpy take ~0.15 s to import, half of a small ``sql`` query (bench/bench_store.py:
one compacted file per table answered in 0.3 s, 2.1× DuckDB reading it alone). Nothing on
the path of a query whose parts the cache already vouches for needs them: the tables'
columns are plain data (``stateaware.records.columns``), the cache answers from one
``stat`` per part, and DuckDB reads the tables a query names itself. So this module, the
part cache and ``analysis sql`` import pyarrow only where Arrow reads: a part the cache
cannot vouch for (``stateaware.records.check``), and the views left as Arrow datasets
(``_dataset``). ``tests/analysis/test_sql_imports.py`` holds the line.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import duckdb

from stateaware.records.columns import RENAMED, RESULT_COLUMNS, TABLE_COLUMNS, Columns
from stateaware.records.part_cache import PartChecks
from stateaware.text import sql_name

if TYPE_CHECKING:  # pyarrow is imported only where Arrow reads (NOTE [ No Arrow until it reads ])
    from typing import TypeAlias

    import pyarrow as pa

    #: A table's columns: ours as plain data, or an Arrow schema a caller gives.
    TableColumns: TypeAlias = Columns | pa.Schema

__all__ = [
    "LOAD_EVERY_TABLE",
    "VIEWS",
    "DamagedPart",
    "Snapshot",
    "connect",
    "damaged_parts",
    "scan_parts",
    "snapshot",
    "view_sql",
    "views_sql",
]

#: The views every connection has (and no other).
VIEWS = (
    "runs",
    "processes",
    "attempts",
    *(t for t in TABLE_COLUMNS if t not in ("runs", "processes")),
    *RESULT_COLUMNS,
)

#: Every folder with a known schema: the record tables, then the analysis' result tables.
_KNOWN: dict[str, Columns] = {**TABLE_COLUMNS, **RESULT_COLUMNS}

#: Current names of renamed columns: only a folder with one of them can hold parts under old names.
_RENAMED_TO = frozenset(new for new, _ in RENAMED.values())

# The hive keys stay strings: a run id like "2026" must not become an integer.
_HIVE_TYPES = "{'cohort': 'VARCHAR', 'run_id': 'VARCHAR'}"

#: The connection's relation holding the parts of ``folder``, with a ``filename`` column
#: (verification names the part files of duplicated rows from it).
PARTS_PREFIX = "_parts_"

#: DuckDB settings that make a connection read-only (NOTE [ Read-only by construction ]);
#: ``lock_configuration`` comes last, after which none of them can change.
_LOCKDOWN = (
    # No spilling: past its memory limit DuckDB would otherwise write ./.tmp in the working
    # directory. Set first: DuckDB refuses to change it once external access is off.
    ("temp_directory", "''"),
    ("python_enable_replacements", "false"),
    ("enable_external_access", "false"),
    ("autoinstall_known_extensions", "false"),
    ("autoload_known_extensions", "false"),
    ("allow_community_extensions", "false"),
    ("lock_configuration", "true"),
)


@dataclass(frozen=True)
class RunFilter:
    """Which runs a scan reads: ``run_ids`` and ``cohorts`` (None: any). NOTE [ Pruning by run ]."""

    run_ids: tuple[str, ...] | None = None
    cohorts: tuple[str, ...] | None = None

    def admits_run(self, run_id: str) -> bool:
        return self.run_ids is None or run_id in self.run_ids

    def admits_cohort(self, cohort: str) -> bool:
        return self.cohorts is None or cohort in self.cohorts

    def admits(self, part: DamagedPart) -> bool:
        """Whether a damaged part belongs to the chosen runs (or to no run at all)."""
        run = part.run_id
        cohort = next((p[len("cohort=") :] for p in part.path.parts if p.startswith("cohort=")), None)
        return (run is None or self.admits_run(run)) and (cohort is None or self.admits_cohort(cohort))

    @classmethod
    def of(cls, run_ids: Sequence[str] | None, cohorts: Sequence[str] | None = None) -> RunFilter | None:
        """The filter for these choices, or None when nothing is chosen (read every run)."""
        if run_ids is None and cohorts is None:
            return None
        return cls(None if run_ids is None else tuple(run_ids), None if cohorts is None else tuple(cohorts))


#: A scan's choice of runs: None reads every run.
Runs = RunFilter | None


@dataclass(frozen=True)
class DamagedPart:
    """A ``*.parquet`` file under a results folder that no view includes, and why.

    ``ignored``: an entry of the results directory that is not a table at all (its files are
    never read); verification does not fail for it, as it does for a damaged part.
    """

    folder: str
    path: Path
    problem: str
    ignored: bool = False

    @property
    def run_id(self) -> str | None:
        """The run whose partition holds the file, when it sits in one."""
        for part in self.path.parts:
            if part.startswith("run_id="):
                return part[len("run_id=") :]
        return None

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def scan_parts(
    results: Path | str,
    folder: str,
    schema: TableColumns | None = None,
    *,
    checks: PartChecks | None = None,
    runs: Runs = None,
) -> tuple[list[Path], list[DamagedPart]]:
    """The part files of ``results/folder`` that pass the part check, and those that do not.

    ``schema`` defaults to the known table's of that name (a record table, or an analysis
    result such as ``comparisons``, whose parts may lack columns added since they were
    written); ``KeyError`` for another folder without one. A file whose real path leaves
    ``results`` (a symbolic link out) is damaged too: nothing outside is ever read. Links to
    folders are not followed, and a folder that cannot be listed is named, not skipped.
    ``checks``: the cache to check through (one per scan of many folders; by default one
    for this call, saved at its end). ``runs``: only the partitions of these runs are
    walked (NOTE [ Pruning by run ]); None walks the whole table.
    """
    if schema is None and folder not in _KNOWN:
        raise KeyError(f"no table {folder!r}; tables: {', '.join(_KNOWN)}")
    schema = schema if schema is not None else _KNOWN[folder]
    if checks is None:
        with PartChecks(results) as own:
            return scan_parts(results, folder, schema, checks=own, runs=runs)
    good, damaged = _scan(Path(results), folder, schema, checks, runs)
    return [part.path for part in good], damaged


class _Good(NamedTuple):
    """A part that passed the check: its path as listed, its real path (what a view reads),
    the renamed columns it carries under an old name (``((old, new), ...)``, mostly none),
    and the columns it lacks (written before they were added; mostly none)."""

    path: Path
    real: str
    renamed: tuple[tuple[str, str], ...]
    missing: tuple[str, ...]


def _scan(
    results: Path, folder: str, schema: TableColumns, checks: PartChecks, runs: Runs
) -> tuple[list[_Good], list[DamagedPart]]:
    """``scan_parts``, keeping what ``snapshot`` needs of each good part.

    Per part, the cost a store of many small parts pays on every query (bench/bench_store.py measures it): one
    ``lstat`` and no ``realpath`` for a plain file (its folder's real path, the table's plus
    the folders below it, plus its name), and at most one footer read serving the footer check, the schema
    check, the old column names and the missing columns (one ``PartChecks.inspect``,
    answered from one ``stat`` once the part's footer and pages passed, NOTE [ Where the
    cache lives, and what it trusts ]).
    """
    inside = os.path.join(os.path.realpath(results), "")
    files, damaged = _part_files(results, folder, runs)
    good: list[_Good] = []
    # Every folder listed is the table's or lies below it through folders, never links
    # (_part_files follows none): its real path is the table's plus the rest, without the
    # lstat per component that os.path.realpath makes (600 folders of a compacted store).
    table, real_table = os.fspath(results / folder), os.path.realpath(results / folder)
    real_folders: dict[str, str] = {}
    missing_ok = folder in RESULT_COLUMNS
    for top, name, is_link in files:
        real_folder = real_folders.get(top)
        if real_folder is None:
            below = top[len(table) :] if top.startswith(table) else None
            real_folder = real_folders[top] = os.path.realpath(top) if below is None else real_table + below
        listed = os.path.join(top, name)
        # A link to a file may lead anywhere: only a link needs its own resolution.
        real = os.path.realpath(listed) if is_link else os.path.join(real_folder, name)
        path = Path(listed)
        if not real.startswith(inside):
            damaged.append(DamagedPart(folder, path, "a link to a file outside the results directory"))
            continue
        found = checks.inspect(path, schema, missing_ok=missing_ok)
        if found.problem is None:
            good.append(_Good(path, real, tuple(sorted(found.old_names.items())), found.missing))
        else:
            damaged.append(DamagedPart(folder, path, found.problem))
    return good, sorted(damaged, key=lambda d: d.path)


def _part_files(results: Path, folder: str, runs: Runs = None) -> tuple[list[tuple[str, str, bool]], list[DamagedPart]]:
    """The ``*.parquet`` files under ``results/folder`` as ``(folder, name, is a link)``, sorted
    by path, and what kept any from being listed.

    With ``runs``, only their partition folders are walked (NOTE [ Pruning by run ]). Strings,
    not paths, and the directory entries' own link bit: on a store of tens of thousands of
    parts, ``pathlib``'s parsing and comparisons and one ``lstat`` per part were a third of a
    query's own work."""
    base = results / folder
    if base.is_symlink() and not base.exists():
        return [], [DamagedPart(folder, base, "a link that leads nowhere (a loop or a missing target): no parts read")]
    if not base.exists():
        return [], []
    if not base.is_dir():
        return [], [DamagedPart(folder, base, "not a folder, where the table's folder should be: no parts read")]
    files: list[tuple[str, str, bool]] = []
    damaged: list[DamagedPart] = []

    def unreadable(exc: OSError) -> None:
        problem = f"unreadable folder ({exc.strerror or exc}): its parts cannot be checked"
        damaged.append(DamagedPart(folder, Path(exc.filename or base), problem))

    def linked(path: str) -> None:
        damaged.append(DamagedPart(folder, Path(path), "a link to a folder: not followed, its parts not read"))

    loose: list[Path] = []
    if runs is None:
        pending = [os.fspath(base)]
    else:
        pending = [os.fspath(r) for r in _run_partitions(base, runs, loose, unreadable, linked)]
    files += [(os.fspath(p.parent), p.name, p.is_symlink()) for p in loose]
    while pending:  # links to folders are not followed
        top = pending.pop()
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    if entry.is_symlink() and entry.is_dir():
                        linked(entry.path)
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.name.endswith(".parquet"):
                        files.append((top, entry.name, entry.is_symlink()))
        except OSError as exc:
            unreadable(exc)
    files.sort(key=lambda f: (*f[0].split(os.sep), f[1]))  # the order of sorted paths
    return files, damaged


def _run_partitions(
    base: Path,
    runs: RunFilter,
    files: list[Path],
    unreadable: Callable[[OSError], None],
    linked: Callable[[str], None],
) -> list[Path]:
    """The ``cohort=C/run_id=R`` folders of ``base`` that ``runs`` chooses. What lies directly in
    ``base`` or in a cohort folder, outside every run, is still named, as a scan of every run
    names it: part files go to ``files`` (damaged: no run's partition holds them), links to
    folders to ``linked``."""
    chosen = []
    for level, is_cohort in ((base, False), *((c, True) for c in _subfolders(base, "cohort=", unreadable))):
        try:
            with os.scandir(level) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.is_symlink() and entry.is_dir():
                        linked(entry.path)
                    elif entry.name.endswith(".parquet") and not entry.is_dir(follow_symlinks=False):
                        files.append(level / entry.name)
        except OSError as exc:
            unreadable(exc)
            continue
        if not is_cohort or not runs.admits_cohort(level.name[len("cohort=") :]):
            continue
        chosen += [r for r in _subfolders(level, "run_id=", unreadable) if runs.admits_run(r.name[len("run_id=") :])]
    return chosen


def runs_present(results: Path | str) -> dict[str, set[str]]:
    """``run id -> cohorts`` of every run with a partition folder in any table of ``results``:
    a directory listing, no part opened (what a pruned query checks its choice against)."""
    found: dict[str, set[str]] = {}
    for folder in _KNOWN:
        for cohort in _subfolders(Path(results) / folder, "cohort=", lambda exc: None):
            for run in _subfolders(cohort, "run_id=", lambda exc: None):
                found.setdefault(run.name[len("run_id=") :], set()).add(cohort.name[len("cohort=") :])
    return found


def _subfolders(folder: Path, prefix: str, unreadable: Callable[[OSError], None]) -> list[Path]:
    """The folders of ``folder`` named ``prefix…`` (links not followed), sorted."""
    try:
        with os.scandir(folder) as entries:
            return sorted(
                Path(e.path) for e in entries if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)
            )
    except OSError as exc:
        unreadable(exc)
        return []


def _ignored(results: Path) -> list[DamagedPart]:
    """The entries of ``results`` that are not tables yet hold Parquet files: one warning each."""
    try:
        entries = sorted(results.iterdir()) if results.is_dir() else []
    except OSError:
        return []  # the directory itself unreadable: every table then reads empty
    ignored = []
    for entry in entries:
        if entry.name in _KNOWN or entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        held = _holds_parquet(entry)
        if held:
            ignored.append(DamagedPart(entry.name, entry, _not_a_table(entry.name, held), ignored=True))
    return ignored


def _holds_parquet(folder: Path) -> str:
    """``"parts"`` when ``folder`` holds a ``*.parquet`` file (links not followed), ``"unreadable"``
    when part of it cannot be listed, else ``""``."""
    errors: list[OSError] = []
    for _top, _dirs, names in os.walk(folder, onerror=errors.append):
        if any(n.endswith(".parquet") for n in names):
            return "parts"
    return "unreadable" if errors else ""


def _not_a_table(name: str, held: str) -> str:
    near = [t for t in _KNOWN if t.lower() == name.lower()]
    hint = f" (names are case-sensitive: the table is {near[0]!r})" if near else ""
    what = "holds Parquet files" if held == "parts" else "cannot be read in full"
    return f"a folder that is not a table{hint} {what}; ignored (only the tables `views` lists are read)"


def _by_old_names(good: Sequence[_Good], schema: TableColumns) -> dict[tuple[tuple[str, str], ...], list[Path]]:
    """Good parts grouped by the renamed columns they carry under an old name (most: none).

    Only a folder whose schema has a renamed column (``schema.RENAMED``) can hold old names;
    the others are one group. The names come from the scan's own footer read: the
    ``records`` footers, once read twice a query for this, are read once.
    """
    if not _RENAMED_TO.intersection(schema.names):
        return {(): [part.path for part in good]} if good else {}
    groups: dict[tuple[tuple[str, str], ...], list[Path]] = {}
    for part in good:
        groups.setdefault(part.renamed, []).append(part.path)
    return dict(sorted(groups.items()))  # the current names' group first


def _renaming_columns(schema: TableColumns, renamed: dict[str, str]) -> str:
    new_to_old = {new: old for old, new in renamed.items()}
    return ", ".join(
        f"{sql_name(new_to_old[f.name])} AS {sql_name(f.name)}" if f.name in new_to_old else sql_name(f.name)
        for f in schema
    )


def _group_name(folder: str, index: int, groups: int) -> str:
    return PARTS_PREFIX + folder if groups == 1 else f"{PARTS_PREFIX}{folder}_{index}"


def _view_name(folder: str) -> str:
    """The view of ``folder``'s parts, quoted (every folder here is a known table)."""
    return sql_name("attempts" if folder == "processes" else folder)


def _scope(run_ids: Sequence[str] | None, cohorts: Sequence[str] | None = None) -> str:
    def listed(values: Sequence[str]) -> str:
        return ", ".join("'" + v.replace("'", "''") + "'" for v in values) or "NULL"

    conditions = [f"{column} IN ({listed(values)})" for column, values in (("run_id", run_ids), ("cohort", cohorts))
                  if values is not None]  # fmt: skip
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


_LATEST_ATTEMPT = (
    'CREATE VIEW "processes" AS SELECT * FROM "attempts" '
    "QUALIFY row_number() OVER (PARTITION BY run_id, cohort, process_index "
    "ORDER BY attempt DESC, finished_at DESC) = 1;"
)


def view_sql(files: Sequence[Path]) -> str:
    """The plain-SQL ``SELECT`` of ``files`` (a bare DuckDB reads them itself)."""
    listed = ", ".join("'" + Path(f).resolve().as_posix().replace("'", "''") + "'" for f in files)
    return (
        f"SELECT * FROM read_parquet([{listed}], union_by_name = true, hive_partitioning = true, "
        f"hive_types = {_HIVE_TYPES})"
    )


@dataclass(frozen=True)
class Snapshot:
    """The checked part files of one results directory at one moment (see ``snapshot``)."""

    #: ``(folder, schema, good parts grouped by old column names, damaged parts)`` per known table.
    folders: tuple[tuple[str, TableColumns, dict[tuple[tuple[str, str], ...], list[Path]], list[DamagedPart]], ...]
    #: Entries of the results directory that are not tables (NOTE [ Only the known tables are read ]).
    ignored: tuple[DamagedPart, ...] = ()
    #: The runs the scan read (None: all of them; NOTE [ Pruning by run ]).
    runs: Runs = None
    #: The real path of every good part, resolved by the scan (what ``connect`` reads,
    #: without resolving each again); a part missing here is resolved by ``connect``.
    real_paths: Mapping[Path, str] = field(default_factory=dict)
    #: The columns a good part lacks, for the parts that lack any (written before the columns
    #: were added: a view shows nulls there).
    missing: Mapping[Path, tuple[str, ...]] = field(default_factory=dict)

    #: The tables scanned (None: every one); the others' views are empty.
    tables: tuple[str, ...] | None = None

    def updated(self, newer: Snapshot) -> Snapshot:
        """This snapshot with the tables ``newer`` scanned taken from it (``newer``: a
        ``snapshot`` of the same results with ``tables``, e.g. after a report wrote its
        comparisons): the other tables' parts are not checked again."""
        fresh = set(newer.tables or _KNOWN)
        folders = tuple(new if new[0] in fresh else old for old, new in zip(self.folders, newer.folders, strict=True))
        real_paths = {**self.real_paths, **newer.real_paths}
        missing = {**self.missing, **newer.missing}
        return Snapshot(folders, newer.ignored, self.runs, real_paths, missing, self.tables)


def snapshot(
    results: Path | str,
    run_ids: Sequence[str] | None = None,
    *,
    cohorts: Sequence[str] | None = None,
    tables: Sequence[str] | None = None,
) -> Snapshot:
    """Check every part file under ``results`` once, for several ``connect`` calls.

    A report opens one connection per section (each holding only that section's runs);
    scanning once and connecting from the scan checks every part once instead of once per
    connection (and every page once per version of a file, through the part-check cache).
    Parts written after the scan are not in it: scan again to see them. ``run_ids`` and
    ``cohorts`` prune the scan to those runs' partitions (NOTE [ Pruning by run ]): a
    connection from the snapshot then holds only their rows. ``tables``: only these folders
    are scanned, the others' views are empty (a report lists the runs from ``runs`` and
    ``processes`` alone); ``KeyError`` naming the tables for an unknown one.
    """
    results = Path(results)
    runs = RunFilter.of(run_ids, cohorts)
    unknown = sorted(set(tables or ()) - set(_KNOWN))
    if unknown:
        raise KeyError(f"no table {unknown[0]!r}; tables: {', '.join(_KNOWN)}")
    folders = []
    real_paths: dict[Path, str] = {}
    missing: dict[Path, tuple[str, ...]] = {}
    with PartChecks(results) as checks:
        for folder, schema in _KNOWN.items():
            if tables is not None and folder not in tables:
                folders.append((folder, schema, {(): []}, []))
                continue
            good, bad = _scan(results, folder, schema, checks, runs)
            folders.append((folder, schema, _by_old_names(good, schema) or {(): []}, bad))
            real_paths.update((part.path, part.real) for part in good)
            missing.update((part.path, part.missing) for part in good if part.missing)
    chosen = None if tables is None else tuple(tables)
    return Snapshot(tuple(folders), tuple(_ignored(results)), runs, real_paths, missing, chosen)


_DUCKDB_TYPES = {
    "string": "VARCHAR",
    "int16": "SMALLINT",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "double": "DOUBLE",
    "bool": "BOOLEAN",
    "timestamp[us, tz=UTC]": "TIMESTAMPTZ",
    "list<item: string>": "VARCHAR[]",
}


def _empty_sql(schema: TableColumns, *, filename: bool = False) -> str:
    """A ``SELECT`` of no rows with ``schema``'s columns (and a ``filename``, as a parts relation has)."""
    columns = [f"CAST(NULL AS {_DUCKDB_TYPES[str(f.type)]}) AS {sql_name(f.name)}" for f in schema]
    return f"SELECT {', '.join([*columns, *(['CAST(NULL AS VARCHAR) AS filename'] if filename else [])])} WHERE false"


def views_sql(results: Path | str, run_ids: Sequence[str] | None = None, *, parts: Snapshot | None = None) -> list[str]:
    """The ``CREATE VIEW`` statements for ``results``, in an order that runs as written.

    Plain SQL, so the same views work in the ``duckdb`` CLI
    (``python -m stateaware.analysis views --sql > views.sql; duckdb -init views.sql``).
    Each view lists its checked part files (damaged ones left out, see ``damaged_parts``),
    so it is a snapshot: re-generate it after new parts land. ``run_ids`` restricts every
    view to those runs (a report of chosen runs). These statements need file access; the
    read-only connection of ``connect`` does not use them. ``parts``: as for ``connect``.
    """
    parts = parts if parts is not None else snapshot(results)
    scope = _scope(run_ids)
    statements = []
    for folder, _schema, groups, _damaged in parts.folders:
        good = [path for paths in groups.values() for path in paths]
        if good:
            if len(groups) == 1 and not next(iter(groups)):
                statements.append(f"CREATE VIEW {_view_name(folder)} AS {view_sql(good)}{scope};")
            else:  # parts written before a rename: read their old column under its new name
                union = " UNION ALL BY NAME ".join(
                    f"SELECT * EXCLUDE ({', '.join(sql_name(o) for o, _ in renamed)}), "
                    f"{', '.join(f'{sql_name(o)} AS {sql_name(n)}' for o, n in renamed)} FROM ({view_sql(paths)})"
                    if renamed
                    else view_sql(paths)
                    for renamed, paths in groups.items()
                )
                statements.append(f"CREATE VIEW {_view_name(folder)} AS SELECT * FROM ({union}){scope};")
        else:
            statements.append(f"CREATE VIEW {_view_name(folder)} AS {_empty_sql(_KNOWN[folder])};")
        if folder == "processes":
            statements.append(_LATEST_ATTEMPT)
    return statements


def damaged_parts(
    results: Path | str, run_ids: Sequence[str] | None = None, *, parts: Snapshot | None = None
) -> list[DamagedPart]:
    """Every part file under ``results`` that no view includes (of ``run_ids``, or outside any run),
    then every ignored entry that is not a table (``ignored`` true).

    ``parts``: as for ``connect``.
    """
    parts = parts if parts is not None else snapshot(results, run_ids)
    found = [d for _folder, _schema, _groups, damaged in parts.folders for d in damaged]
    found += parts.ignored
    return [d for d in found if run_ids is None or d.run_id is None or d.run_id in run_ids]


def _may_hold(chosen: RunFilter, path: Path) -> bool:
    """Whether the part at ``path`` may hold rows of the ``chosen`` runs, from the hive folders
    right above it. A report connects once per section from one snapshot of every run;
    handing Arrow only the sections' partitions keeps it from opening every other run's
    parts for rows the view's ``WHERE`` would drop. Only the ``key=value`` folders right
    above a part are read, as the part check reads them (``check._expected_identity``): a
    part that passed holds exactly their ``run_id`` and ``cohort``. A part in no run's
    folder is kept: the ``WHERE`` decides."""
    for folder in path.parents:
        key, sep, value = folder.name.partition("=")
        if not sep or not key.isidentifier():
            return True  # above the partitions: the table folder
        if (key == "run_id" and not chosen.admits_run(value)) or (key == "cohort" and not chosen.admits_cohort(value)):
            return False
    return True


#: ``connect``'s ``load`` for every table whole, each row's file kept (``filename``, by which
#: verification names the parts of a duplicated row): what a report's connections read.
LOAD_EVERY_TABLE: Mapping[str, tuple[str, ...]] = {
    folder: (*schema.names, "filename") for folder, schema in _KNOWN.items()
}

#: The columns a view over a loaded table needs besides those a query names (and the run
#: filter's): the latest attempt's, for ``processes``.
_VIEW_COLUMNS = {
    "processes": ("cohort", "run_id", "process_index", "attempt", "finished_at"),
}


def _dataset(files: Sequence[str], schema: TableColumns, renamed: Mapping[str, str]) -> Any:
    """An Arrow dataset of ``files`` with ``schema`` (its ``renamed`` columns, ``old -> new``,
    under the old names these files carry) and a ``filename`` column, each file's path."""
    # NOTE [ No Arrow until it reads ]: imported here, so a `sql` command whose tables DuckDB
    # loads itself never pays for pyarrow (~0.15 s) nor pyarrow.dataset (~0.25 s more).
    # lazy: `sql` over parts the part cache vouches for loads neither pyarrow nor numpy
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    from stateaware.records.schema import arrow_schema  # lazy: it imports pyarrow

    new_to_old = {new: old for old, new in renamed.items()}
    arrow = arrow_schema(schema)
    arrow = pa.schema([f.with_name(new_to_old.get(f.name, f.name)) for f in arrow], metadata=arrow.metadata)
    return ds.FileSystemDataset.from_paths(
        list(files),
        schema=arrow.append(pa.field("filename", pa.string())),
        format=ds.ParquetFileFormat(),
        filesystem=pafs.LocalFileSystem(),
        partitions=[ds.field("filename") == f for f in files],
    )


#: The most files of one shape a loaded table reads in their listed order, one read (the
#: rows come in that order as they are read); more are read in parallel in any order and
#: sorted back. Where the two cross, on small parts of 30 rows: equal at 100-350 files, the
#: sort 15 % cheaper at 1,000 and 30 % at 3,000.
ORDERED_READ_MAX_FILES = 500


def _load_table(
    con: duckdb.DuckDBPyConnection,
    folder: str,
    schema: TableColumns,
    groups: Mapping[tuple[tuple[str, str], ...], Sequence[Path]],
    columns: Collection[str] | None,
    parts: Snapshot,
    scoped: Collection[str],
) -> None:
    """``_parts_<folder>`` as a table DuckDB read itself (NOTE [ Tables DuckDB reads itself ]),
    with ``columns`` and the ``scoped`` ones its view filters on.

    One ``read_parquet`` per shape of part (the columns it carries under old names and those
    it lacks, which read as typed nulls): for a store written by one schema version, one.
    ``filename`` among ``columns`` keeps each row's file too (its real path, as an Arrow
    dataset of the parts names it), under that name."""
    wanted = set(schema.names) if columns is None else {*columns, *scoped, *_VIEW_COLUMNS.get(folder, ())}
    kept = [name for name in schema.names if name in wanted] or ["run_id"]  # count(*) reads no column
    if "filename" in wanted:
        kept.append("filename")
    shapes: dict[tuple[tuple[tuple[str, str], ...], tuple[str, ...]], list[str]] = {}
    for renamed, paths in groups.items():
        for path in paths:
            shape = (renamed, parts.missing.get(path, ()))
            shapes.setdefault(shape, []).append(parts.real_paths.get(path) or path.resolve().as_posix())
    # The part's own run_id and cohort columns (the part check matched them to its folders),
    # not hive keys parsed from the path, which DuckDB would type as numbers ("2026").
    table = sql_name(PARTS_PREFIX + folder)
    if not shapes:
        columns_kept = Columns([schema.field(n) for n in kept if n != "filename"])
        con.execute(f"CREATE TABLE {table} AS {_empty_sql(columns_kept, filename='filename' in kept)}")
        return
    if len(shapes) == 1 and len(files := next(iter(shapes.values()))) <= ORDERED_READ_MAX_FILES:
        # Few files (a compacted store): one read keeping the listed order as it goes costs
        # less than reading in any order and sorting back (measured on compacted `timings`
        # files of 1,050 rows: 30 files 18 ms against 25 ms, 300 files 131 ms against 146 ms).
        [shape] = shapes
        con.execute("SET preserve_insertion_order = true")  # what keeps the order (a config may not)
        con.execute(
            f"CREATE TABLE {table} AS SELECT {_shaped_columns(schema, kept, *shape)} "
            "FROM read_parquet(?, hive_partitioning = false, filename = true)",
            [files],
        )
        return
    # The shape's number, each file's index in its list and each row's place in its file
    # (DuckDB's virtual columns): the order the parts are listed in.
    order = "_shape, file_index, file_row_number"
    selects = " UNION ALL ".join(
        f"SELECT {_shaped_columns(schema, kept, *shape)}, {i} AS _shape, file_index, file_row_number "
        "FROM read_parquet(?, hive_partitioning = false, filename = true)"
        for i, shape in enumerate(shapes)
    )
    # Read in parallel, files in any order, then sorted back into the listed order: a view's
    # rows come in the same order on every connection (what an unordered SELECT shows), and
    # the read no longer keeps to that order file by file. Loading timings and records whole
    # at 15,030 parts (bench/bench_store.py's store) took 15-19 s that way, 8-10 s this way.
    con.execute("SET preserve_insertion_order = false")
    try:
        con.execute(
            f"CREATE TABLE {table} AS SELECT * EXCLUDE ({order}) FROM ({selects}) ORDER BY {order}",
            list(shapes.values()),
        )
    finally:
        con.execute("SET preserve_insertion_order = true")


def _shaped_columns(
    schema: TableColumns, kept: Sequence[str], renamed: tuple[tuple[str, str], ...], lacking: tuple[str, ...]
) -> str:
    """The select list reading ``kept`` from parts carrying ``renamed`` columns under their old
    names and lacking ``lacking`` (typed nulls)."""
    new_to_old = {new: old for old, new in renamed}

    def column(name: str) -> str:
        if name == "filename":  # read_parquet's, not the table's
            return "filename"
        if name in lacking:
            return f"CAST(NULL AS {_DUCKDB_TYPES[str(schema.field(name).type)]}) AS {sql_name(name)}"
        return f"{sql_name(new_to_old[name])} AS {sql_name(name)}" if name in new_to_old else sql_name(name)

    return ", ".join(map(column, kept))


def connect(
    results: Path | str,
    run_ids: Sequence[str] | None = None,
    *,
    cohorts: Sequence[str] | None = None,
    read_only: bool = True,
    parts: Snapshot | None = None,
    config: Mapping[str, str] | None = None,
    load: Mapping[str, Collection[str] | None] | None = None,
    unread: Collection[str] = (),
    database: duckdb.DuckDBPyConnection | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the views over ``results``.

    Only parts that pass the part check enter a view; the others are rows of the
    connection's ``damaged_parts`` table (NOTE [ Only parts that pass the check enter a
    view ]), and so are the entries that are not tables, with ``ignored`` true. With
    ``read_only=True`` (the default) the connection can neither write nor read any file,
    nor install or load an extension, whatever the statement (NOTE [ Read-only by
    construction ]); ``read_only=False`` leaves DuckDB's defaults, for a caller who wants
    to ``COPY`` a result out. The views are a snapshot
    of the parts present now, or of those in ``parts`` (a ``snapshot`` of ``results``).
    ``config``: DuckDB settings the database starts with (``memory_limit``, ...), fixed
    before the configuration is locked. ``run_ids`` and ``cohorts`` restrict every view to
    those runs; without ``parts`` only their partitions are scanned (NOTE [ Pruning by run ]).
    ``load``: tables DuckDB reads into memory itself before the lock, each with only
    the columns given (``None``: all; ``filename`` among them: each row's file too, in the
    ``_parts_`` table only) and those its view needs; their views then have only
    these columns (NOTE [ Tables DuckDB reads itself ]). ``KeyError`` naming the known
    tables for another name. ``unread``: tables whose views are empty (with their columns),
    for a connection that runs only statements that do not read them. ``database``: a
    connection to a new in-memory database, holding nothing yet, to build the views in
    instead of opening one (``config`` is then set on it before the lock): ``analysis sql``
    hands over the one it parsed the statements with, since opening a database costs
    15-20 ms, a tenth of a small query.
    """
    load = dict(load or {})
    unknown = sorted(set(load) - set(_KNOWN))
    if unknown:
        raise KeyError(f"cannot load {unknown[0]!r}: DuckDB loads the known tables only ({', '.join(_KNOWN)})")

    parts = parts if parts is not None else snapshot(results, run_ids, cohorts=cohorts)
    if database is None:
        con = duckdb.connect(":memory:", config=dict(config or {}))
    else:
        con = database
        for name, value in (config or {}).items():
            con.execute(f"SET {name} = '{value.replace(chr(39), chr(39) * 2)}'")
    scope = _scope(run_ids, cohorts)
    chosen = RunFilter.of(run_ids, cohorts)
    damaged: list[DamagedPart] = []
    for folder, schema, groups, bad in parts.folders:
        damaged += bad
        if chosen is not None:  # NOTE [ Pruning by run ], for a snapshot of more runs
            groups = {renamed: [p for p in paths if _may_hold(chosen, p)] for renamed, paths in groups.items()}
        if folder in load or folder in unread:
            if folder in load:
                scoped = [c for c, values in (("run_id", run_ids), ("cohort", cohorts)) if values is not None]
                _load_table(con, folder, schema, groups, load[folder], parts, scoped)
                files = "EXCLUDE (filename) " if "filename" in (load[folder] or ()) else ""
                relation = f"SELECT * {files}FROM {sql_name(PARTS_PREFIX + folder)}{scope}"
            else:  # no statement of this connection reads it
                relation = _empty_sql(schema)
            con.execute(f"CREATE VIEW {_view_name(folder)} AS {relation}")
            if folder == "processes":
                con.execute(_LATEST_ATTEMPT)
            continue
        if not any(groups.values()):  # no part (or none of the chosen runs): nothing for Arrow to read
            groups = {}
            con.execute(f"CREATE VIEW {sql_name(PARTS_PREFIX + folder)} AS {_empty_sql(schema, filename=True)}")
        for i, (renamed, paths) in enumerate(groups.items()):
            files = [parts.real_paths.get(p) or p.resolve().as_posix() for p in paths]
            # Each file's path becomes its rows' `filename`, the way hive keys become columns.
            # One fragment and partition expression per file, chosen over one plain dataset
            # per table: measured at 15,030 parts (bench/bench_store.py's stores, timings'
            # 10,500 parts, interleaved, medians of 4) both took 5.8-5.9 s, the cost being
            # Arrow opening each fragment, not the expressions; the plain dataset would have
            # needed a second relation to keep `filename` for verification.
            dataset = _dataset(files, schema, dict(renamed))
            con.register(_group_name(folder, i, len(groups)), dataset)
        if len(groups) > 1:  # parts written before a rename: read their old column under its new name
            con.execute(
                f"CREATE VIEW {sql_name(PARTS_PREFIX + folder)} AS "
                + " UNION ALL ".join(
                    f"SELECT {_renaming_columns(schema, dict(renamed))}, filename "
                    f"FROM {sql_name(_group_name(folder, i, 2))}"
                    for i, renamed in enumerate(groups)
                )
            )
        con.execute(
            f"CREATE VIEW {_view_name(folder)} AS SELECT * EXCLUDE (filename) FROM {sql_name(PARTS_PREFIX + folder)}"
            f"{scope}"
        )
        if folder == "processes":
            con.execute(_LATEST_ATTEMPT)
    con.execute(
        "CREATE TEMP TABLE damaged_parts (folder VARCHAR, path VARCHAR, run_id VARCHAR, problem VARCHAR, "
        "ignored BOOLEAN)"
    )
    rows = [
        (d.folder, d.path.as_posix(), d.run_id, d.problem, d.ignored)
        for d in [*damaged, *parts.ignored]
        if chosen is None or chosen.admits(d)
    ]
    if rows:
        con.executemany("INSERT INTO damaged_parts VALUES (?, ?, ?, ?, ?)", rows)
    if read_only:
        for name, value in _LOCKDOWN:
            con.execute(f"SET {name} = {value}")
    return con
