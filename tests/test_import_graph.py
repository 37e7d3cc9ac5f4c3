"""Who may import whom (DESIGN.md), checked by reading every module's imports.

The scan is ``ast`` over every module of ``stateaware/``, ``cohorts/`` (installed as
``stateaware.cohorts``) and ``analysis/`` (``stateaware.analysis``). An import anywhere in
a file counts — module level or inside a function — because a function-level import is
still a dependency, only a later one. ``from pkg import name`` depends on ``pkg.name`` when
that is a module, else on ``pkg``; importing a submodule is not counted as depending on its
parent packages' ``__init__`` (every submodule would otherwise "import" its package).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Source folder -> the package it is installed as (pyproject's package-dir mapping).
ROOTS = {"stateaware": "stateaware", "cohorts": "stateaware.cohorts", "analysis": "stateaware.analysis"}

#: Modules of ``stateaware/`` that may import the orchestration (the launcher, the command
#: line, the config layer). ``records/`` is not among them: it needs none of it.
ORCHESTRATION = ("stateaware.launch", "stateaware.cli", "stateaware.config", "stateaware.run", "stateaware.__main__")

#: What the library never imports (DESIGN.md, "Who may import whom").
FORBIDDEN_IN_LIBRARY = ("stateaware.cohorts", "hydra", "omegaconf", "submitit")

#: What the analysis never imports: it runs where the results are, without the GPU stack.
GPU_STACK = ("torch", "torchvision", "jax", "jaxlib")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the three source folders."""
    found = {}
    for folder, package in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
                continue
            found[".".join([package, *parts])] = path
    return found


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name of ``node``'s module (relative imports resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_edges(module: str, path: Path, nodes: Iterable[ast.AST], known: set[str]) -> set[tuple[str, str | None]]:
    """The imports among ``nodes`` (of ``module``'s file ``path``) as (module imported, name taken
    from it or ``None``): ``from pkg import name`` is ``pkg.name`` when that is one of ours
    (``known``), else ``pkg`` with ``name``."""
    out: set[tuple[str, str | None]] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {(alias.name, None) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add((sub, None) if sub in known else (target, alias.name))
    return out


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``module`` imports, anywhere in its file: ours by full name, others as written."""
    nodes = ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    return {target for target, _ in import_edges(module, path, nodes, known)}


def graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (itself excluded)."""
    files = modules()
    known = set(files)
    return {m: {t for t in imports_of(m, p, known) if t in known and t != m} for m, p in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def _names(imported: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in imported if any(n == p or n.startswith(p + ".") for p in prefixes))


def test_the_scan_sees_every_source_folder_and_resolves_relative_imports():
    files = modules()
    assert {"stateaware.cli", "stateaware.planner", "stateaware.cohorts.timing", "stateaware.analysis.views"} <= set(
        files
    )
    edges = graph()
    # stateaware/planner/records.py imports ``from .profile_card import ...``.
    assert "stateaware.planner.profile_card" in edges["stateaware.planner.records"]
    # cohorts/semantic.py imports stateaware.semantic_programs inside run().
    assert "stateaware.semantic_programs" in edges["stateaware.cohorts.semantic"]


def test_the_cycle_finder_finds_a_function_level_cycle_and_nothing_else():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_back_into_a_module_that_imports_it():
    assert cycles(graph()) == []


def test_the_library_never_imports_the_orchestration():
    files = modules()
    known = set(files)
    problems = {
        m: _names(imports_of(m, p, known), FORBIDDEN_IN_LIBRARY)
        for m, p in files.items()
        if m.startswith("stateaware.")
        and not m.startswith(("stateaware.cohorts", "stateaware.analysis"))
        and not any(m == o or m.startswith(o + ".") for o in ORCHESTRATION)
    }
    assert {m: names for m, names in problems.items() if names} == {}


def test_the_analysis_never_imports_the_gpu_stack():
    files = modules()
    known = set(files)
    problems = {
        m: _names(imports_of(m, p, known), GPU_STACK) for m, p in files.items() if m.startswith("stateaware.analysis")
    }
    assert {m: names for m, names in problems.items() if names} == {}


@pytest.mark.parametrize(
    "source, found",
    [
        ("from omegaconf import OmegaConf\n", ["omegaconf"]),
        ("def f():\n    import hydra.core\n", ["hydra.core"]),
        ("def f():\n    from stateaware.cohorts.timing import run\n", ["stateaware.cohorts.timing"]),
        ("import omegaconfig\n", []),
    ],
)
def test_the_forbidden_names_are_found_at_any_depth(tmp_path, source, found):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _names(imports_of("stateaware.m", path, set()), FORBIDDEN_IN_LIBRARY) == found
