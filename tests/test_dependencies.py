"""The environment cannot hide a missing dependency.

``make install`` creates ``.venv`` with ``--system-site-packages`` so an already installed
torch is reused; that is safe only if nothing the code imports comes from outside what
pyproject declares. These checks make a fresh machine and this one equivalent: every
third-party module the code (or the tests) imports belongs to a declared distribution,
and every declared distribution is installed at a version its range allows.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

from stateaware.source import source_files

REPO = Path(__file__).resolve().parent.parent


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> dict[str, tuple[str, str | None]]:
    """Declared requirement name -> (requirement text, extra or None)."""
    from packaging.requirements import Requirement

    out = {}
    for text in md.requires("stateaware") or []:
        req = Requirement(text)
        extra = re.search(r'extra == "([^"]+)"', str(req.marker)) if req.marker else None
        out[_normal(req.name)] = (text, extra.group(1) if extra else None)
    return out


def _guarded(tree: ast.AST) -> set[ast.AST]:
    """Import nodes inside a ``try`` whose handlers catch ImportError: optional imports."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers
        ):
            guarded |= {n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return guarded


def _imported(paths, *, optional: bool = False) -> dict[str, set[str]]:
    """Top-level module -> files importing it (absolute imports only, anywhere in the file).

    ``optional=False`` gives the imports the code needs; ``True`` those it guards with
    ``except ImportError`` (it runs without them).
    """
    found: dict[str, set[str]] = {}
    for path in paths:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        guarded = _guarded(tree)
        for node in ast.walk(tree):
            if (node in guarded) != optional:
                continue
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                else []
            )
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path))
    return found


def _undeclared(imported: dict[str, set[str]], allowed_extras: set[str | None]) -> list[str]:
    declared = {name for name, (_, extra) in _requirements().items() if extra in allowed_extras}
    owners = md.packages_distributions()
    ours = {"stateaware", "tests", "__future__"}
    problems = []
    for module, files in sorted(imported.items()):
        if module in sys.stdlib_module_names or module in ours:
            continue
        dists = {_normal(d) for d in owners.get(module, [])}
        if not dists & declared:
            problems.append(
                f"{module} (from {sorted(dists) or 'no installed distribution'}), imported by {sorted(files)[0]}"
            )
    return problems


def test_every_module_the_code_imports_is_a_declared_dependency():
    code = [path for name, path in source_files() if name.endswith(".py")]
    assert _undeclared(_imported(code), {None}) == []


def test_an_optional_import_that_is_installed_comes_from_a_declared_extra():
    # Not installed, an optional import hides nothing (the code runs without it); installed,
    # it must be one a user can ask for by name (pyproject's optional dependencies).
    code = [path for name, path in source_files() if name.endswith(".py")]
    owners = md.packages_distributions()
    present = {m: f for m, f in _imported(code, optional=True).items() if m in owners}
    extras = {extra for _, extra in _requirements().values()}
    assert _undeclared(present, extras) == []


def test_every_module_the_tests_import_is_a_declared_dependency():
    tests = sorted((REPO / "tests").rglob("*.py"))
    assert _undeclared(_imported(tests), {None, "test"}) == []


def test_every_declared_dependency_is_installed_within_its_range():
    from packaging.requirements import Requirement

    wrong = []
    for name, (text, extra) in _requirements().items():
        req = Requirement(text)
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            if extra in (None, "test"):  # what make install installs; other extras are the user's choice
                wrong.append(f"{text}: not installed")
            continue
        if version not in req.specifier:
            wrong.append(f"{text}: {version} installed")
    assert wrong == [], f"re-run make install (pip install -e '.[test]'): {wrong}"


def test_the_checks_see_an_undeclared_import():
    # The check itself can fail: a module no declared distribution provides is named.
    assert _undeclared({"yaml": {"x.py"}, "json": {"x.py"}, "numpy": {"x.py"}}, {None}) == [
        "yaml (from ['pyyaml']), imported by x.py"
    ]
