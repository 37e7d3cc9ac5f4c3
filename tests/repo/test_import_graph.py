"""Who may import whom (docs/architecture.md), checked by reading every module's imports.

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

REPO = Path(__file__).resolve().parents[2]

#: Source folder -> the package it is installed as (pyproject's package-dir mapping).
ROOTS = {"stateaware": "stateaware", "cohorts": "stateaware.cohorts", "analysis": "stateaware.analysis"}

#: Modules of ``stateaware/`` that may import the orchestration (the launcher, the command
#: line, the config layer). ``records/`` is not among them: it needs none of it.
ORCHESTRATION = (
    "stateaware.launch",
    "stateaware.cli",
    "stateaware.config",
    "stateaware.config_files",
    "stateaware.run_spec",
    "stateaware.__main__",
    "stateaware.commands",
)

#: What the library never imports: it runs inside a user's training script, without the orchestration.
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
    """Module -> the modules of ours it imports (itself excluded), its ``if __name__ == "__main__":``
    block left out: run as a program the module is a second module object (``__main__``), so a
    forwarding block that imports the command line importing the module back is no cycle."""
    files = modules()
    known = set(files)
    edges = {}
    for m, p in files.items():
        nodes = _outside_main_block(ast.parse(p.read_text(encoding="utf-8")))
        edges[m] = {t for t, _ in import_edges(m, p, nodes, known) if t in known and t != m}
    return edges


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
    assert {
        "stateaware.cli",
        "stateaware.planner",
        "stateaware.cohorts.timing",
        "stateaware.analysis.store.views",
    } <= set(files)
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


# Who may import whom, by package: each tier imports only its own tier and the tiers before it.
# A package not listed fails the test until it is placed (a new folder must choose its tier).
PACKAGE_ORDER: tuple[tuple[str, ...], ...] = (
    # Leaves: plain rules and constants, the standard library and small third-party ones only.
    ("stateaware", "stateaware.names", "stateaware.units", "stateaware.clocks", "stateaware.exits",
     "stateaware.hardware", "stateaware.source", "stateaware.text", "stateaware.thresholds", "stateaware.conf",
     "stateaware.kinds"),
    # The library: what a user imports into a training script.
    ("stateaware.torch_replay", "stateaware.finite", "stateaware.semantic_programs", "stateaware.jax_replay",
     "stateaware.planner", "stateaware.auto", "stateaware.integrations", "stateaware.cost_runtime", "stateaware.app"),
    # The record store: its files, names, checks and one run's state.
    ("stateaware.records",),
    # The run description: the composed config and the run spec made from it.
    ("stateaware.config", "stateaware.run_spec"),
    # The launcher and the cohort kinds (siblings: the launcher loads a kind by its name).
    ("stateaware.launch", "stateaware.cohorts"),
    # The analysis of a results folder.
    ("stateaware.analysis",),
    # The command line.
    # A package's ``__main__`` is its command line, whatever the package's own tier.
    ("stateaware.cli", "stateaware.__main__", "stateaware.plan", "stateaware.commands", "stateaware.analysis.__main__"),
)  # fmt: skip


def tier_of(module: str) -> int | None:
    """The index in ``PACKAGE_ORDER`` of the package ``module`` belongs to (the longest match)."""
    best: tuple[int, int] | None = None
    for tier, packages in enumerate(PACKAGE_ORDER):
        for package in packages:
            if (module == package or module.startswith(package + ".")) and (best is None or len(package) > best[1]):
                best = (tier, len(package))
    return best[0] if best else None


def _outside_main_block(tree: ast.Module) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if __name__ == "__main__":`` — the block that
    runs only when the module is the program (``python -m``): the command line's tier, whatever
    the module's own."""
    skipped: set[int] = set()
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
        ):
            skipped |= {id(n) for n in ast.walk(node)}
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def upward_imports() -> set[tuple[str, str]]:
    """(module, imported) for every import of ours that reaches a later tier than its module's."""
    files = modules()
    known = set(files)
    found = set()
    for module, path in files.items():
        nodes = _outside_main_block(ast.parse(path.read_text(encoding="utf-8")))
        for target, _ in import_edges(module, path, nodes, known):
            if target in known and target != module:
                mine, theirs = tier_of(module), tier_of(target)
                if mine is not None and theirs is not None and theirs > mine:
                    found.add((module, target))
    return found


def test_every_module_has_a_tier():
    assert sorted(m for m in modules() if tier_of(m) is None) == []


def test_packages_import_only_their_own_tier_and_the_ones_below():
    found = upward_imports()
    assert sorted(found) == [], "an import reaches a package above its own (PACKAGE_ORDER)"


def test_the_tier_check_finds_an_upward_import_and_skips_the_main_block(tmp_path):
    assert tier_of("stateaware.records.writer") == 2 and tier_of("stateaware.analysis.store.views") == 5
    assert tier_of("stateaware.cli") == 6 and tier_of("stateaware.clocks") == 0
    source = "def f():\n    from stateaware.config import x\nif __name__ == '__main__':\n    import stateaware.cli\n"
    path = tmp_path / "m.py"
    path.write_text(source)
    nodes = _outside_main_block(ast.parse(source))
    known = {"stateaware.config", "stateaware.cli"}
    assert {t for t, _ in import_edges("stateaware.records.m", path, nodes, known)} == {"stateaware.config"}


def _imports_inside_functions() -> dict[str, int]:
    """Module -> how many import statements stand inside its functions (each counted once)."""
    return {
        module: len(_function_imports(ast.parse(path.read_text(encoding="utf-8"))))
        for module, path in modules().items()
    }


def _function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements inside ``tree``'s functions, each once, in line order."""
    found = {
        id(node): node
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }
    return sorted(found.values(), key=lambda node: node.lineno)


#: The NOTE a module may give once for all its lazy imports; each then carries the bare tag.
LAZY_NOTE = "NOTE [ Lazy imports ]"


def unexplained_imports(source: str) -> list[int]:
    """The lines of the imports inside functions of ``source`` that do not say why they are there.

    The rule: an import inside a function is explained by a ``# lazy: REASON`` comment on its
    own line, or on the line just above the run of consecutive import lines it belongs to (one
    comment for a group); or by the bare tag ``# lazy`` on its line when the module states the
    reason once in a ``NOTE [ Lazy imports ]`` block.
    """
    lines = source.splitlines()
    noted = LAZY_NOTE in source
    imports = _function_imports(ast.parse(source))
    ends = {node.end_lineno for node in imports}
    out = []
    for node in imports:
        first = node.lineno
        while first - 1 in ends:  # walk up the run of import lines this one belongs to
            first = min(n.lineno for n in imports if n.end_lineno == first - 1)
        above = lines[first - 2].strip() if first >= 2 else ""
        own = lines[node.lineno - 1]
        if "# lazy:" in own or (above.startswith("#") and "lazy:" in above) or (noted and "# lazy" in own):
            continue
        out.append(node.lineno)
    return out


def _unexplained() -> dict[str, list[int]]:
    found = {m: unexplained_imports(p.read_text(encoding="utf-8")) for m, p in modules().items()}
    return {m: lines for m, lines in found.items() if lines}


#: Imports inside functions across the three source folders: a function-level import hides a
#: dependency until it runs, so each new one needs a reason (torch kept out of the analysis,
#: start-up time) and this number may only fall. Lower it when you remove some.
MOST_IMPORTS_INSIDE_FUNCTIONS = 112


def test_imports_inside_functions_do_not_grow():
    assert sum(_imports_inside_functions().values()) <= MOST_IMPORTS_INSIDE_FUNCTIONS


def test_every_import_inside_a_function_says_why():
    # (module, line) of each import inside a function without a ``# lazy`` reason (``unexplained_imports``).
    assert sorted((m, line) for m, lines in _unexplained().items() for line in lines) == []


@pytest.mark.parametrize(
    "source, unexplained",
    [
        ("def f():\n    import torch\n", [2]),
        ("def f():\n    import torch  # lazy: the analysis never loads torch\n", []),
        ("def f():\n    # lazy: start-up of the command line\n    import torch\n    import jax\n", []),
        ("def f():\n    # lazy: start-up\n    import torch\n\n    import jax\n", [5]),
        ("def f():\n    # a comment, no reason\n    import torch\n", [3]),
        ("def f():\n    import torch  # lazy\n", [2]),
        ("# NOTE [ Lazy imports ]\n# torch only when called.\ndef f():\n    import torch  # lazy\n", []),
        ("import os\nclass A:\n    def m(self):\n        from a import (\n            b,\n        )\n", [4]),
    ],
)
def test_the_reason_rule_accepts_a_comment_on_the_line_above_the_line_or_a_note(source, unexplained):
    assert unexplained_imports(source) == unexplained
