"""The store's file names: where a run's parts live, what a part or a compacted file is called.

Every record table keeps one run's rows under ``OUT/<table>/cohort=<cohort>/run_id=<run_id>/``
in files of two kinds:

* a part, ``p<process index, at least 6 digits>-<part>.parquet``, written by one process
  (``records/writer.py``); status parts are ``p<index>-a<attempt>.parquet``;
* a compacted file, ``compacted-<the first 12 hex digits of its rows' digest>.parquet``,
  which holds the rows of many completed processes' parts (``records/compact.py``) and lists
  them in its footer.

A part moved aside (``OUT/.quarantine/``) keeps its name with a time stamp after it. Every
module that writes, parses or globs these names asks this one, so a name the writer makes is
read back by the same rule everywhere, at the same strictness.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from stateaware.names import InvalidName

__all__ = [
    "COMPACTED_NAME",
    "MAX_PART_NAME",
    "PART_NAME",
    "PartName",
    "check_part_name",
    "compacted_file_name",
    "compacted_files",
    "parse_part_name",
    "part_file_name",
    "part_files",
    "run_folder",
    "status_parts",
    "unstamped",
]

#: The longest part name: ``.p000000-<part>.parquet.tmp-<host>-<pid>`` (a 64-character host,
#: a 7-digit pid) must stay within the 255 bytes a file name may have.
MAX_PART_NAME = 160
_PART_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-=")

#: A part's file name, exactly as ``part_file_name`` writes it: the index with at least six
#: digits (``:06d``; seven once a run has a million processes), the part by the part-name rule.
PART_NAME = re.compile(rf"p(\d{{6,}})-([A-Za-z0-9][A-Za-z0-9._=-]{{0,{MAX_PART_NAME - 1}}})\.parquet")

#: A compacted file's name: ``compacted-<the first 12 hex digits of its rows' digest>.parquet``.
COMPACTED_NAME = re.compile(r"compacted-[0-9a-f]{12}\.parquet")

#: The suffix every file of the store ends in; a temporary file (``.<name>.tmp-<host>-<pid>``)
#: or a quarantined one (``<name>.<UTC time>``) does not, so no glob of it reads one.
SUFFIX = ".parquet"


class PartName(NamedTuple):
    """What a part's file name says: the process that wrote it and the part's own name."""

    process_index: int
    part: str


def run_folder(out: Path | str, table: str, cohort: str, run_id: str) -> Path:
    """``OUT/<table>/cohort=<cohort>/run_id=<run_id>``: where one run's files of ``table`` live.

    The names are used as given: check them with ``stateaware.names.check_name`` first where
    they come from outside (``records.writer.part_path`` does).
    """
    return Path(out) / table / f"cohort={cohort}" / f"run_id={run_id}"


def check_part_name(part: str) -> None:
    """Raise ``InvalidName`` unless ``part`` follows the part-name rule.

    The name rule of ``stateaware.names.check_name`` with ``=`` allowed (``method=joint``):
    1 to ``MAX_PART_NAME`` characters from ``A-Z a-z 0-9 . _ - =``, starting with a letter or
    digit. The message names the part and what is wrong with it.
    """
    if not isinstance(part, str) or not part or len(part) > MAX_PART_NAME:
        problem = "empty" if part == "" else (f"{len(part)} characters long" if isinstance(part, str) else "not text")
    elif set(part) - _PART_CHARACTERS:
        problem = "contains " + " ".join(repr(c) for c in sorted(set(part) - _PART_CHARACTERS))
    elif not part[0].isalnum():
        problem = f"starts with {part[0]!r}"
    else:
        return
    raise InvalidName(
        f"invalid part name {part!r}: {problem}; a part name is 1 to {MAX_PART_NAME} characters from "
        "A-Z a-z 0-9 . _ - =, starting with a letter or digit (it becomes one file name)"
    )


def part_file_name(process_index: int, part: str) -> str:
    """The file name of ``part`` of process ``process_index``: ``p000003-a1.parquet``.

    ``part`` is taken as checked (``check_part_name``); ``process_index`` is at least 0.
    """
    return f"p{process_index:06d}-{part}{SUFFIX}"


def compacted_file_name(digest: str) -> str:
    """The file name of a compacted file whose rows' digest (hex) is ``digest``."""
    return f"compacted-{digest[:12]}{SUFFIX}"


def parse_part_name(name: str) -> PartName | None:
    """What the part file name ``name`` says, or ``None`` when the writer would not make it.

    The whole name must match ``PART_NAME``: a quarantined copy (a time stamp after
    ``.parquet``), a temporary file, a compacted file, or an index of fewer than six digits is
    not a part.
    """
    match = PART_NAME.fullmatch(name)
    return PartName(int(match.group(1)), match.group(2)) if match else None


def unstamped(name: str) -> str:
    """``name`` without the time stamp a move to the quarantine adds (``….parquet.<UTC time>``)."""
    head, sep, _ = name.partition(SUFFIX)
    return head + sep


def part_files(folder: Path) -> list[Path]:
    """Every file of ``folder`` with the store's suffix (parts, compacted files, and any other), sorted."""
    return sorted(folder.glob(f"*{SUFFIX}"))


def status_parts(folder: Path, process_index: int, *, stamped: bool = False) -> list[Path]:
    """The status parts (``p<index>-a<attempt>.parquet``) of one process in ``folder``, sorted.

    ``stamped``: names with a time stamp after the suffix count too (a folder under ``OUT/.quarantine/``).
    """
    stamp = "*" if stamped else ""
    return sorted(folder.glob(f"p{process_index:06d}-a*{SUFFIX}{stamp}"))


def compacted_files(folder: Path, *, stamped: bool = False) -> list[Path]:
    """The compacted files in ``folder``, sorted (``stamped``: names with a time stamp after the suffix too)."""
    stamp = "*" if stamped else ""
    return sorted(folder.glob(f"compacted-*{SUFFIX}{stamp}"))
