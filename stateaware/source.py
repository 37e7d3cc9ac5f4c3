"""Source identity: one SHA-256 over the code and config that produce records.

Which files count: every ``*.py``, ``*.yaml``, ``*.sql`` and ``*.json`` file of the
installed packages ``stateaware`` (with ``stateaware.cohorts``, ``stateaware.analysis``
and ``stateaware.conf``, wherever they are installed from), excluding ``__pycache__``
and hidden files. Each file enters the hash as its package-relative name (e.g.
``stateaware/cohorts/semantic.py``), its byte length and its bytes, in sorted name order,
so an editable checkout and a wheel install of the same code hash alike, and renaming a
file changes the hash. Tests, benchmarks and README do not produce records and do not
count.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SOURCE_SUFFIXES", "source_files", "source_hash", "hash_files"]

SOURCE_SUFFIXES = (".py", ".yaml", ".sql", ".json")

# Packages whose folders may live outside stateaware/ (pyproject's package-dir mapping).
_ROOTS = ("stateaware", "stateaware.cohorts", "stateaware.analysis", "stateaware.conf")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not importable; is stateaware installed?")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def source_files() -> list[tuple[str, Path]]:
    """``(package-relative name, path)`` of every file the source hash covers, sorted."""
    dirs = {name: _package_dir(name) for name in _ROOTS}
    nested = set(dirs.values()) - {dirs["stateaware"]}
    files: dict[str, Path] = {}
    for name, root in dirs.items():
        prefix = name.replace(".", "/")
        for path in root.rglob("*"):
            if not path.is_file() or path.suffix not in SOURCE_SUFFIXES:
                continue
            rel = path.relative_to(root)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            # In a wheel, stateaware/cohorts is inside stateaware/: count it once, by its
            # own package's name.
            if name == "stateaware" and any(d in path.parents for d in nested):
                continue
            files[f"{prefix}/{rel.as_posix()}"] = path
    return sorted(files.items())


def hash_files(named: Iterable[tuple[str, Path]]) -> str:
    """SHA-256 (hex) over ``(name, path)`` pairs in name order: name, NUL, length, NUL, bytes."""
    digest = hashlib.sha256()
    for name, path in sorted(named):
        data = path.read_bytes()
        digest.update(name.encode())
        digest.update(b"\0%d\0" % len(data))
        digest.update(data)
    return digest.hexdigest()


def source_hash() -> str:
    """SHA-256 (hex) over :func:`source_files`; see the module docstring for the rule."""
    return hash_files(source_files())
