"""An interleaved comparison: one cohort on two versions of the code, process by process.

``python -m stateaware cohort=NAME compare_to=REV`` (a git revision of the checkout the
running code comes from) or ``compare_to=PATH`` (a source tree laid out as this
repository: ``stateaware/``, ``cohorts/``, ``analysis/``, ``conf/``) launches two runs
together: side ``a`` runs the code launched, side ``b`` the code named, and their
processes alternate — process 0 of A, then process 0 of B, then process 1 of A, ... — so
load that drifts during the launch falls on both sides alike, and ``python -m
stateaware.analysis compare RUN_A RUN_B`` pairs process i of A with process i of B (same
seed, same parameters). Each side keeps its own code snapshot and source hash, so
verification stays per run; both runs' ``runs`` rows carry the same ``pair_id`` and their
``side``.

NOTE [ Side B's code ]
    A revision is exported with ``git archive`` (only the four source folders) into
    ``OUT/.compare/<commit>/``, written under a temporary name and renamed into place, so
    an interrupted export is never taken for a complete one. Its files are named as an
    installed package names them (``cohorts/x.py`` is ``stateaware/cohorts/x.py``, after
    pyproject's package-dir), hashed by the same rule as the running code
    (``stateaware.source.hash_files``) and snapshotted like it
    (``stateaware.launch.snapshot.take_snapshot``). Side B runs with A's process
    parameters (the cohort's ``expand`` of the code launched): the comparison is of code,
    not of configs. A tree whose config schema differs from ours — the fields of the
    ``ProcessSpec`` each process is handed (``stateaware/kinds/process_spec.py``, or
    ``stateaware/launch/spec.py`` in a revision older than the kind contract's leaf) — or that lacks
    the cohort's YAML, is refused: its processes could not read what they are sent.
"""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import stateaware
from stateaware.config import ConfigError
from stateaware.kinds import process_spec
from stateaware.launch.bootstrap import ENTRY
from stateaware.records.write_paths import make_folder, writable
from stateaware.source import SOURCE_SUFFIXES, hash_files

__all__ = ["OtherCode", "PACKAGE_DIRS", "other_code", "pair_id", "run_ids"]

#: Package-relative prefix -> the repository folder it is installed from (pyproject's package-dir).
PACKAGE_DIRS = {
    "stateaware": "stateaware",
    "stateaware/cohorts": "cohorts",
    "stateaware/analysis": "analysis",
    "stateaware/conf": "conf",
}


@dataclass(frozen=True)
class OtherCode:
    """Side B's code: where its tree is, its files as the snapshot names them, their hash,
    and what the user named (``compare_to``) with the commit it resolved to (or None)."""

    root: Path
    files: tuple[tuple[str, Path], ...]
    source_hash: str
    label: str
    commit: str | None


def run_ids(base: str) -> tuple[str, str]:
    """The run ids of sides A and B for the run id ``base``."""
    return f"{base}-a", f"{base}-b"


def pair_id(base: str, a_hash: str, b_hash: str) -> str:
    """The id both runs of a comparison carry: ``base`` and a digest of the two codes."""
    digest = hashlib.sha256(f"{a_hash}\0{b_hash}".encode()).hexdigest()[:12]
    return f"{base}~{digest}"


def other_code(ref: str, out: Path, cohort: str) -> OtherCode:
    """Side B's code for ``compare_to=ref`` (NOTE [ Side B's code ]); ``ConfigError``
    naming ``ref`` when it is neither a source tree nor a revision, or its config differs."""
    path = Path(ref).expanduser()
    if path.is_dir():
        root, commit = path.resolve(), None
    else:
        commit = _commit(ref)
        root = _export(commit, out)
    if not (root / "stateaware" / "__init__.py").is_file():
        raise ConfigError(
            f"compare_to={ref!r}: {root} holds no stateaware/ package; allowed values are a git revision "
            "of this checkout or a source tree laid out as it (stateaware/, cohorts/, analysis/, conf/)"
        )
    _check_config(ref, root, cohort)
    _check_entry(ref, root)
    files = tuple(_tree_files(root))
    return OtherCode(root, files, hash_files(files), ref, commit)


def _repository() -> Path:
    return Path(stateaware.__file__).resolve().parent.parent


def _commit(ref: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(_repository()), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise ConfigError(
            f"compare_to={ref!r}: not a path to a source tree nor a git revision of {_repository()}; "
            "allowed values are a revision (a commit, branch or tag: HEAD~1, main) or a folder"
        )
    return done.stdout.strip()


def _export(commit: str, out: Path) -> Path:
    """``OUT/.compare/<commit>/``: the revision's source folders, exported once, atomically."""
    dest = writable(out, out / ".compare" / commit[:16])  # a link on the way is refused, never followed
    if dest.is_dir():
        return dest
    make_folder(dest.parent, out)
    tmp = writable(out, dest.with_name(f".{dest.name}.tmp-{os.getpid()}"))
    tmp.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(_repository()), "archive", "--format=tar", commit, "--", *PACKAGE_DIRS.values()],
        capture_output=True,
    )
    if archive.returncode != 0:
        raise ConfigError(f"compare_to: git archive of {commit[:12]} failed: {archive.stderr.decode().strip()}")
    tar_path = tmp / ".archive.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp, filter="data")  # no links out, no absolute paths
        else:  # a Python without extraction filters (before 3.11.4): git's own archive, checked
            members = tar.getmembers()
            bad = [
                m.name
                for m in members
                if not (m.isfile() or m.isdir()) or m.name.startswith("/") or ".." in m.name.split("/")
            ]
            if bad:
                raise ConfigError(f"compare_to: the archive of {commit[:12]} holds unsafe entries: {bad[:3]}")
            tar.extractall(tmp, members=members)  # noqa: S202 - every member checked above
    tar_path.unlink()
    os.replace(tmp, writable(out, dest))
    return dest


def _tree_files(root: Path) -> list[tuple[str, Path]]:
    """``(package-relative name, path)`` of the tree's source files, as the source hash names them."""
    files = []
    for prefix, folder in PACKAGE_DIRS.items():
        base = root / folder
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(base)
            hidden = any(part.startswith(".") or part == "__pycache__" for part in rel.parts)
            if path.is_file() and path.suffix in SOURCE_SUFFIXES and not hidden:
                files.append((f"{prefix}/{rel.as_posix()}", path))
    return files


def _config_fields(path: Path) -> dict[str, list[str]]:
    """The annotated field names of each class in a ``config.py`` (its schema), by class name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name: [
            item.target.id
            for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        ]
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


#: Where a revision defines ``ProcessSpec``: the kind contract's leaf, or the launcher in a
#: revision older than that leaf (whose workers still unpickle the specs this one sends).
_PROCESS_SPEC_FILES = ("stateaware/kinds/process_spec.py", "stateaware/launch/spec.py")


def _process_spec_fields(root: Path) -> list[str] | None:
    """The field names of ``ProcessSpec`` in the source tree ``root`` (``None``: no such class)."""
    for rel in _PROCESS_SPEC_FILES:
        if (root / rel).is_file() and "ProcessSpec" in (fields := _config_fields(root / rel)):
            return fields["ProcessSpec"]
    return None


def _check_config(ref: str, root: Path, cohort: str) -> None:
    # What side B's workers read is a ProcessSpec this launcher pickled: its fields are the
    # config schema the two sides must share (the cohort's params go through it as plain data).
    ours = _process_spec_fields(Path(process_spec.__file__).parents[2])  # the tree this code runs from
    theirs = _process_spec_fields(root)
    if theirs is None or theirs != ours:
        raise ConfigError(
            f"compare_to={ref!r}: its process spec (ProcessSpec, what each process is given) has "
            "other fields than this code's, so its processes could not read what this launcher sends. Tip: "
            "compare against a revision with the same ProcessSpec fields"
        )
    if not (root / "conf" / "cohort" / f"{cohort}.yaml").is_file():
        raise ConfigError(f"compare_to={ref!r}: it has no cohort {cohort!r} (conf/cohort/{cohort}.yaml)")


def _top_level_names(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
    return names


def _check_entry(ref: str, root: Path) -> None:
    """Side B's processes start at its own worker's entry point (``stateaware.launch.bootstrap.ENTRY``,
    imported from its snapshot once checked): a tree without it is refused before anything launches."""
    module, _, name = ENTRY.partition(":")
    relative = Path(*module.split(".")).with_suffix(".py")
    path = root / relative
    try:
        found = path.is_file() and name in _top_level_names(path)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        found = False
    if not found:
        raise ConfigError(
            f"compare_to={ref!r}: its worker ({relative.as_posix()}) defines no {name}(), the entry point this "
            f"launcher starts each process with, so side B's processes could not start; compare against a "
            f"revision whose {relative.as_posix()} defines {name}"
        )
