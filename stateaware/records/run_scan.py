"""One run's state, read from its records: the latest status per process and the parts not to trust.

Resume is by records, not by memory: a process counts as done only if its latest
``processes`` row says ``completed`` and none of its parts is damaged. One scan of the run's
part files (every record table's and the result tables') checks each part once
(``records.part_cache``), folds the status rows, compares each completed process's parts
with what its attempt recorded writing, and names the compacted files that hold rows of a
process that runs again. The launcher (resume, quarantine) and compaction read a run's
state through this module; the views (report, status, sql) scan the whole store with the
same part checks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from stateaware.records.check import compacted_parts
from stateaware.records.damage import QUARANTINE, quarantine
from stateaware.records.part_cache import PartChecks
from stateaware.records.part_names import COMPACTED_NAME, parse_part_name, part_files, run_folder
from stateaware.records.schema import RESULT_TABLES, TABLES
from stateaware.records.write_paths import writable
from stateaware.records.writer import part_path

__all__ = ["DAMAGED", "damaged_parts", "latest_statuses", "quarantine_run", "run_state"]

#: The status resume gives a process with a damaged part: not completed, so relaunched.
DAMAGED = "damaged"


def _run_parts(out: Path, cohort: str, run_id: str) -> list[tuple[str, Path]]:
    """``(folder, part)`` for every part file of a run: every record table, then the analysis'
    result tables (``comparisons``), whose damaged parts a launch moves aside too."""
    return [
        (folder, part)
        for folder in (*TABLES, *RESULT_TABLES)
        for part in part_files(run_folder(out, folder, cohort, run_id))
    ]


#: Tables whose parts no worker's ``parts_json`` lists: status rows are the record itself, and the
#: ``runs`` manifest is the launcher's.
_UNCOUNTED = ("processes", "runs")


@dataclass(frozen=True)
class _Latest:
    """The latest recorded attempt of one process, as its readable status parts say."""

    attempt: int
    status: str
    parts_json: str | None  # what that attempt wrote (null before schema version 6, and on launcher rows)


def _scan_run(out: Path, cohort: str, run_id: str) -> tuple[dict[int, _Latest], list[tuple[Path, str]]]:
    """The latest attempt per process, and every part of the run that cannot be trusted, with why.

    One check per part (``stateaware.records.part_cache.PartChecks``: footer, schema,
    every page once per version of the file), then each completed process's parts against
    what its attempt recorded (``_disagreements``). Never raises for a bad file; raises
    ``LinkBelowOut`` when a table's or the run's folder is
    reached through a link below ``out``: its parts are another folder's, not to judge or move.
    """
    for folder in (*TABLES, *RESULT_TABLES):  # before any part is read, and so before any is moved
        writable(out, run_folder(out, folder, cohort, run_id), folder=True)
    latest: dict[int, _Latest] = {}
    damaged: list[tuple[Path, str]] = []
    good: list[tuple[str, Path]] = []
    with PartChecks(out) as checks:
        for folder, part in _run_parts(out, cohort, run_id):
            schema = TABLES.get(folder, RESULT_TABLES.get(folder))
            problem = checks.problem(part, schema, missing_ok=folder in RESULT_TABLES)
            if problem is not None:
                damaged.append((part, problem))
                continue
            good.append((folder, part))
            if folder == "processes":
                _read_statuses(part, latest)
    damaged += _disagreements(out, cohort, run_id, latest, good)
    damaged += _superseded(good, latest, damaged)
    return latest, damaged


def _read_statuses(part: Path, latest: dict[int, _Latest]) -> None:
    """Fold the status rows of one (checked) ``processes`` part into ``latest``."""
    wanted = ["process_index", "attempt", "status", "parts_json"]
    with pq.ParquetFile(part) as file:  # one open for the schema and the rows (read_table opens twice)
        rows = file.read(columns=[c for c in wanted if c in file.schema_arrow.names])
    columns = [rows.column(c).to_pylist() if c in rows.column_names else [None] * rows.num_rows for c in wanted]
    for index, attempt, status, parts_json in zip(*columns, strict=True):
        if index not in latest or attempt >= latest[index].attempt:
            latest[index] = _Latest(attempt, status, parts_json)


def _disagreements(
    out: Path, cohort: str, run_id: str, latest: dict[int, _Latest], good: list[tuple[str, Path]]
) -> list[tuple[Path, str]]:
    """Parts of completed processes that differ from what the completed attempt recorded writing.

    A part with another row count than recorded (emptied, or replaced by another run's), a
    part of the process the attempt did not write (a stray, or an earlier attempt's), and a
    recorded part that is gone (named at the path it had) — each makes verification fail,
    so each makes the process run again. Processes without ``parts_json`` (recorded before
    schema version 6) are trusted as before.
    """
    recorded: dict[int, dict[tuple[str, str], int]] = {}
    for index, last in latest.items():
        if last.status == "completed" and last.parts_json is not None:
            try:
                parts = {(p["table"], p["part"]): int(p["rows"]) for p in json.loads(last.parts_json)}
                for table, name in parts:
                    part_path(out, table, cohort, run_id, index, name)  # names a path inside out, or raises
                recorded[index] = parts
            except (ValueError, TypeError, KeyError):  # InvalidName and PathOutsideError are ValueErrors
                recorded[index] = {}  # an unreadable record vouches for nothing: every part is a stray
    found: dict[int, dict[tuple[str, str], Path]] = {}
    held: dict[tuple[int, str, str], int] = {}  # (process, table, part) -> rows, of compacted files
    footers: dict[Path, tuple[int, None] | tuple[None, str]] = {}  # part -> its rows, or why they are unknown
    for folder, part in good:
        if folder in _UNCOUNTED:
            continue
        listed, footers[part] = _footer_facts(part)
        if listed is not None:  # records/compact.py: many processes' parts in one file, listed in its footer
            for entry in listed:
                if entry["process"] in recorded:
                    found.setdefault(entry["process"], {})[(folder, entry["part"])] = part
                    held[(entry["process"], folder, entry["part"])] = entry["rows"]
            continue
        named = parse_part_name(part.name)
        if named is not None and named.process_index in recorded:
            found.setdefault(named.process_index, {})[(folder, named.part)] = part
    problems: list[tuple[Path, str]] = []
    for index, parts in sorted(recorded.items()):
        attempt = latest[index].attempt
        for key, path in sorted(found.get(index, {}).items()):
            if key not in parts:
                problems.append((path, f"not a part process {index}'s completed attempt {attempt} wrote (a stray?)"))
                continue
            # A compacted file's per-part rows are its footer's (the part check vouched for
            # each process's total); a part's own are its row count.
            rows, unreadable = (held[(index, *key)], None) if (index, *key) in held else footers[path]
            if unreadable is not None:  # gone or changed since its check a moment ago: not trusted either
                problems.append((path, f"unreadable since its check ({unreadable})"))
                continue
            if rows != parts[key]:
                wrote = f"process {index}'s completed attempt {attempt} wrote {parts[key]}"
                problems.append((path, f"holds {rows} rows, but {wrote} (emptied or replaced since)"))
        for (table, name), rows in sorted(parts.items()):
            if (table, name) not in found.get(index, {}):
                path = part_path(out, table, cohort, run_id, index, name)
                if path.exists():  # there, but damaged: already named by its check
                    continue
                problems.append((path, f"missing: process {index}'s attempt {attempt} wrote it with {rows} rows"))
    return problems


def _superseded(
    good: list[tuple[str, Path]], latest: dict[int, _Latest], damaged: list[tuple[Path, str]]
) -> list[tuple[Path, str]]:
    """The sound compacted files that hold rows of a process which runs again.

    NOTE [ A process that runs again leaves no rows in a compacted file ]
    A process runs again when its latest attempt did not complete or a part of its is
    damaged — a compacted file of another table damaged or lost, say, which held rows of
    every process of the run. Its new attempt writes parts of its own, by name; its old rows
    inside the run's other compacted files (``records/compact.py``) would stay beside them,
    every row twice. So such a file is named here, and moved aside with the damaged parts
    (``quarantine_run``); every process it holds runs again with it (its rows go
    with the file), and so on until no sound compacted file holds a process that runs
    again. A run compacts every table of the same completed processes, so in practice the
    processes of the damaged file are all there is: nothing runs that would not have.
    """
    again = {index for index, last in latest.items() if last.status != "completed"}
    again |= {index for part, _problem in damaged for index in _owners(part)}
    if not again:  # the usual case: no footer read
        return []
    compacted = {part: _owners(part) for _folder, part in good if COMPACTED_NAME.fullmatch(part.name)}
    named: dict[Path, list[int]] = {}
    grew = True
    while grew:  # a file named makes all it holds run again, which may name another
        grew = False
        for part, held in compacted.items():
            if part not in named and held & again:
                named[part] = sorted(held & again)
                again |= held
                grew = True
    return [
        (part, f"holds rows of {_processes(indices)}, which run again (their new rows would repeat these)")
        for part, indices in named.items()
    ]


def _processes(indices: Sequence[int]) -> str:
    """``process 3`` or ``processes 0, 1``."""
    return f"process {indices[0]}" if len(indices) == 1 else f"processes {', '.join(map(str, indices))}"


def _owners(part: Path) -> set[int]:
    """The processes whose rows ``part`` holds: the one its name gives, or those a compacted
    file's footer lists (none where the footer cannot be read: its processes' parts are then
    missing, and named so)."""
    named = parse_part_name(part.name)
    if named is not None:
        return {named.process_index}
    if not COMPACTED_NAME.fullmatch(part.name):
        return set()
    listed, _rows = _footer_facts(part)
    return {entry["process"] for entry in listed or ()}


def _footer_facts(part: Path) -> tuple[list[dict] | None, tuple[int, None] | tuple[None, str]]:
    """From one footer read: the parts a compacted file (``records/compact.py``) lists
    (``None`` for a plain part), and the file's row count — or, for a file changed since its
    check a moment ago, why it could not be read (then it reads as a plain part)."""
    try:
        footer = pq.read_metadata(part)
        return compacted_parts(footer.metadata), (footer.num_rows, None)
    except (OSError, ValueError) as exc:
        return None, (None, str(exc))


def damaged_parts(out: Path | str, cohort: str, run_id: str) -> list[tuple[Path, str]]:
    """Every part of a run that cannot be trusted, with what is wrong with it.

    Damaged or of another schema (every page read once per version of the file), copied from
    another run or process, or — for a completed process that recorded what it wrote
    (``processes.parts_json``) — holding other rows than recorded, not recorded at all, or
    missing (its path named, though no file is there). Verification fails on each of these.
    """
    return _scan_run(Path(out), cohort, run_id)[1]


def latest_statuses(out: Path, cohort: str, run_id: str) -> dict[int, str]:
    """Latest recorded status per process index of a run.

    A process with any part ``damaged_parts`` names gets ``"damaged"``: it counts as not
    completed, whatever its readable rows say, so resume and verification agree. Never raises
    for a bad file.
    """
    return run_state(out, cohort, run_id)[0]


def run_state(out: Path | str, cohort: str, run_id: str) -> tuple[dict[int, str], list[tuple[Path, str]]]:
    """``latest_statuses`` and ``damaged_parts`` from one scan of the run's parts: what a
    caller that needs both (compaction) reads, each part checked once."""
    latest, damaged = _scan_run(Path(out), cohort, run_id)
    statuses = {index: last.status for index, last in latest.items()}
    for part, _problem in damaged:
        for index in _owners(part):
            statuses[index] = DAMAGED
    return statuses, damaged


def quarantine_run(
    out: Path | str, cohort: str, run_id: str, processes: Collection[int], mark_damaged: Callable[[int, str], None]
) -> list[str]:
    """Move every damaged part of a run to ``OUT/.quarantine/``; one line per part named.

    Each process among ``processes`` that had a damaged part is first marked damaged
    (``mark_damaged(process_index, message)`` records its ``damaged`` status row, the message
    naming the parts), then its parts are moved: the row is what makes the process run again,
    and writing it before moving anything means a launcher killed in between loses nothing —
    the next launch finds the same parts and does the same. A missing part has nothing to
    move; its line says its process runs again. A damaged part of a result table
    (``comparisons``) belongs to no process: it is moved, and the next report writes it again.
    """
    out = Path(out)
    found = damaged_parts(out, cohort, run_id)
    by_process: dict[int, list[str]] = {}
    owned = {part: sorted(_owners(part) & set(processes)) for part, _problem in found}
    for part, problem in found:
        for index in owned[part]:
            by_process.setdefault(index, []).append(f"{part.relative_to(out)} ({problem})")
    for index, parts in by_process.items():
        mark_damaged(index, f"damaged part(s) moved to {QUARANTINE}/, the process runs again: {'; '.join(parts)}")
    lines = []
    for part, problem in found:
        rerun = f"; {_processes(owned[part])} will run again" if owned[part] else ""
        if not part.exists():
            lines.append(f"missing part {part}: {problem}{rerun}")
            continue
        moved = quarantine(out, part)
        lines.append(f"quarantined damaged part {part}: {problem}; moved to {moved}{rerun}")
    return lines
