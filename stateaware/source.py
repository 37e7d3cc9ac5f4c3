"""Source identity: one SHA-256 over the code and config that produce records.

Which files count: every ``*.py``, ``*.yaml``, ``*.sql`` and ``*.json`` file of the
installed packages ``stateaware`` (with ``stateaware.cohorts``, ``stateaware.analysis``
and ``stateaware.conf``, wherever they are installed from), excluding ``__pycache__``
and hidden files. Each file enters the hash as its package-relative name (e.g.
``stateaware/cohorts/semantic.py``), its byte length and its bytes, in sorted name order,
so an editable checkout and a wheel install of the same code hash alike, and renaming a
file changes the hash. Tests, benchmarks and README do not produce records and do not
count.

A user's own code counts too when a run executes it: ``user_code`` names top-level
modules outside ``stateaware`` (a cohort kind ``mylab.kinds.fast`` gives ``mylab``). A
plain module enters as its file name (``mykind.py``); a package as every source file
under its folder (``mylab/kinds/fast.py``), by the same rules — so the code snapshot can
copy it beside ``stateaware/`` and a worker that imports it from there hashes alike. A
namespace package spread over several folders counts (and is copied) by the folder
Python imports its modules from first.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["SOURCE_SUFFIXES", "UserCodeError", "source_files", "user_code_files", "source_hash", "hash_files"]

SOURCE_SUFFIXES = (".py", ".yaml", ".sql", ".json")

# Packages whose folders may live outside stateaware/ (pyproject's package-dir mapping).
_ROOTS = ("stateaware", "stateaware.cohorts", "stateaware.analysis", "stateaware.conf")


class UserCodeError(ValueError):
    """A user's module that the source hash cannot cover: not importable, or not a source file."""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not importable; is stateaware installed?")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _source_files_under(root: Path) -> Iterable[tuple[str, Path]]:
    """``(posix path relative to root, path)`` of the source files under ``root``: the
    ``SOURCE_SUFFIXES``, hidden files and folders and ``__pycache__`` excluded."""
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in SOURCE_SUFFIXES:
            rel = path.relative_to(root)
            if not any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                yield rel.as_posix(), path


def source_files(user_code: Sequence[str] = ()) -> list[tuple[str, Path]]:
    """``(package-relative name, path)`` of every file the source hash covers, sorted.

    ``user_code``: top-level module names of the user's code the run executes (see the
    module docstring); their files come after the same rules (``user_code_files``).
    """
    dirs = {name: _package_dir(name) for name in _ROOTS}
    nested = set(dirs.values()) - {dirs["stateaware"]}
    files: dict[str, Path] = {}
    for name, root in dirs.items():
        prefix = name.replace(".", "/")
        for rel, path in _source_files_under(root):
            # In a wheel, stateaware/cohorts is inside stateaware/: count it once, by its
            # own package's name.
            if name == "stateaware" and any(d in path.parents for d in nested):
                continue
            files[f"{prefix}/{rel}"] = path
    for name in user_code:
        files.update(user_code_files(name))
    return sorted(files.items())


def user_code_files(module: str) -> list[tuple[str, Path]]:
    """``(name, path)`` of the source files of top-level module ``module``, as Python finds it now.

    A plain module gives its one file (``mykind.py``), a package every ``*.py``,
    ``*.yaml``, ``*.sql`` and ``*.json`` file under its folder (``mylab/...``), hidden
    files and ``__pycache__`` excluded. Found through ``sys.path`` without importing it,
    so a process whose path puts a snapshot first finds the snapshot's copy. Raises
    ``UserCodeError`` when ``module`` is dotted, is ``stateaware`` (already
    counted), is not importable, or is not Python source (a built-in or compiled module).
    """
    if "." in module or module == "stateaware":
        raise UserCodeError(f"user code {module!r}: expected a top-level module name other than 'stateaware'")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise UserCodeError(f"module {module!r} is not importable from here (the current directory or PYTHONPATH)")
    if spec.submodule_search_locations:  # a package (or a namespace package: its first folder)
        root = Path(next(iter(spec.submodule_search_locations))).resolve()
        return sorted((f"{module}/{rel}", path) for rel, path in _source_files_under(root))
    origin = Path(spec.origin) if spec.origin and spec.has_location else None
    if origin is None or origin.suffix != ".py":
        raise UserCodeError(
            f"module {module!r} is not a Python source file ({spec.origin}); "
            "a cohort kind must be a .py module or a package of them"
        )
    return [(f"{module}.py", origin.resolve())]


def hash_files(named: Iterable[tuple[str, Path]]) -> str:
    """SHA-256 (hex) over ``(name, path)`` pairs in name order: name, NUL, length, NUL, bytes."""
    digest = hashlib.sha256()
    for name, path in sorted(named):
        data = path.read_bytes()
        digest.update(name.encode())
        digest.update(b"\0%d\0" % len(data))
        digest.update(data)
    return digest.hexdigest()


def source_hash(user_code: Sequence[str] = ()) -> str:
    """SHA-256 (hex) over ``source_files`` (with ``user_code``); see the module docstring for the rule."""
    return hash_files(source_files(user_code))
