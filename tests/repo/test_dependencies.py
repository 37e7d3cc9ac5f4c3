"""The environment cannot hide a missing dependency, and each install is sized to its use.

``make install`` creates ``.venv`` with ``--system-site-packages`` so an already installed
torch is reused; that is safe only if nothing the code imports comes from outside what
pyproject declares. These checks make a fresh machine and this one equivalent: every
third-party module the code (or the tests) imports belongs to a declared distribution,
and every declared distribution is installed at a version its range allows.

The extras divide the code into three layers, each covered by the extras it claims:

- the **library** (``stateaware/`` less the orchestration below) needs the core alone
  (torch, numpy), and ``[jax]`` inside the functions that use JAX;
- the **analysis** (``analysis/``, installed as ``stateaware.analysis``) needs ``[analysis]``
  alone — not the core: no torch, no JAX, also through the modules of ours it imports;
- the **orchestration** (cohorts, launcher, records, the CIFAR application, the command
  line) needs the core and ``[cohorts]`` (which includes ``[analysis]``), and ``[jax]`` where
  a cohort runs JAX.

``tests/repo/test_analysis_extra.py`` checks the analysis claim by running it in a venv that has
nothing else.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

from stateaware.source import source_files
from tests.repo.test_import_graph import GPU_STACK, ORCHESTRATION, import_edges, modules

REPO = Path(__file__).resolve().parents[2]

#: Modules of ours outside the library layer besides the analysis: what runs cohorts. The
#: records and the application need pyarrow and torchvision, which the core leaves out;
#: ``cost_runtime.freeze`` is a command that reads ``conf/`` through ``stateaware.config``.
ORCHESTRATION_LAYER = (
    *ORCHESTRATION,
    "stateaware.records",
    "stateaware.app",
    "stateaware.cost_runtime.freeze",
    "stateaware.cohorts",
)

#: Extras a user may leave out whose absence the code tolerates by design: ``gpu`` is read
#: when present (pynvml), and ``make install`` does not install it.
NOT_INSTALLED_BY_MAKE = ("gpu",)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> list[tuple[str, str | None]]:
    """Every declared requirement's text with its extra (``None``: the core), as installed."""
    return [
        (text, match.group(1) if (match := re.search(r'extra == "([^"]+)"', text)) else None)
        for text in md.requires("stateaware") or []
    ]


def _expand(extras: set[str | None]) -> set[str | None]:
    """``extras`` with those they name through ``stateaware[...]`` requirements, transitively."""
    from packaging.requirements import Requirement

    out, todo = set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra in out:
            continue
        out.add(extra)
        for text, owner in _requirements():
            req = Requirement(text)
            if owner == extra and _normal(req.name) == "stateaware":
                todo += sorted(req.extras)
    return out


def _declared(extras: set[str | None]) -> set[str]:
    """Normalized names of the distributions an install of ``extras`` brings (ours left out)."""
    from packaging.requirements import Requirement

    wanted = _expand(extras)
    names = {_normal(Requirement(text).name) for text, extra in _requirements() if extra in wanted}
    return names - {"stateaware"}


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
    declared = _declared(allowed_extras)
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


# -- what a layer runs ------------------------------------------------------------------

#: An import as the walk follows it: (module, name taken from it or None).
Edge = tuple[str, str | None]


def _edges(module: str, path: Path, nodes, known: set[str], guarded: set[ast.AST]) -> set[Edge]:
    return import_edges(module, path, (node for node in nodes if node not in guarded), known)


def _outside_functions(node: ast.AST):
    """``node`` and what it contains, less every function (which runs only when called)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _outside_functions(child)


def _scan(module: str, path: Path, known: set[str]) -> tuple[set[Edge], dict[str, set[Edge]]]:
    """``module``'s required imports: those importing it runs (every statement outside a
    function body), and by top-level name those its functions and classes run when used
    (a class with all its methods)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = _guarded(tree)
    at_import: set[Edge] = set()
    named: dict[str, set[Edge]] = {}
    for stmt in tree.body:
        at_import |= _edges(module, path, _outside_functions(stmt), known, guarded)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            named[stmt.name] = _edges(module, path, ast.walk(stmt), known, guarded)
    return at_import, named


def _reach(starts: set[str], files: dict[str, Path], *, whole: bool = True) -> dict[str, set[str]]:
    """Third-party top-level module -> our modules importing it, of what ``starts`` run.

    A module of ``starts`` counts with every required import in its file (``whole``: its
    functions run too) or only with those importing it runs (``whole=False``). Another
    module of ours that the walk reaches counts with what importing it runs (its packages'
    ``__init__`` included) and, where ``whole``, the imports inside each top-level function
    taken from it by name (``from m import f``: taken, so counted as called), transitively.

    Limits: a function reached through an attribute (``m.f()``) or called by another
    function of a reached module counts only by its module's import; guarded imports
    (``except ImportError``) are optional and never counted. The fresh-venv test of the
    analysis extra covers what static reading cannot.
    """
    known = set(files)
    scans = {m: _scan(m, files[m], known) for m in files}
    found: dict[str, set[str]] = {}
    seen: set[tuple[str, str | None]] = set()
    todo: list[tuple[str, str | None]] = [(m, "*" if whole else None) for m in sorted(starts)]
    while todo:
        module, part = todo.pop()
        if (module, part) in seen:
            continue
        seen.add((module, part))
        at_import, functions = scans[module]
        if part is None:
            edges = at_import | {(p, None) for p in _parents(module) if p in known}
        elif part == "*":
            edges = at_import.union(*functions.values()) | {(p, None) for p in _parents(module) if p in known}
        else:
            edges = functions.get(part, set())
        for target, name in edges:
            if target in known:
                todo.append((target, None))
                if whole and name is not None and name in scans[target][1]:
                    todo.append((target, name))
            elif target.split(".")[0] not in sys.stdlib_module_names:
                found.setdefault(target.split(".")[0], set()).add(module)
    return found


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


#: The command lines over a results folder: they need what the analysis needs, and no more.
ANALYSIS_COMMANDS = ("stateaware.commands.analysis", "stateaware.commands.sections", "stateaware.commands.arguments")


def _layer(module: str) -> str:
    if module.startswith("stateaware.analysis") or module in ANALYSIS_COMMANDS:
        return "analysis"
    if any(module == o or module.startswith(o + ".") for o in ORCHESTRATION_LAYER):
        return "orchestration"
    return "library"


def _modules_of(layer: str) -> set[str]:
    return {m for m in modules() if _layer(m) == layer}


# -- the layers --------------------------------------------------------------------------


def test_the_library_needs_only_the_core_and_jax_where_it_runs_jax():
    files = modules()
    library = _modules_of("library")
    assert {"stateaware.torch_replay.checkpoint", "stateaware.auto", "stateaware.plan"} <= library
    assert _undeclared(_reach(library, files), {None, "jax"}) == []
    # Importing any library module needs the core alone: JAX is imported where it is used.
    assert _undeclared(_reach(library, files, whole=False), {None}) == []


def test_every_library_module_imports_with_the_core_alone():
    # What the static walk claims, run: with every module of the extras refused (as on a
    # core-only install), each library module still imports.
    owners = md.packages_distributions()
    extra_only = _declared({"all"}) - _declared({None})
    refused = sorted({m for m, dists in owners.items() if {_normal(d) for d in dists} & extra_only} - {"numpy"})
    assert {"duckdb", "hydra", "jax", "matplotlib", "omegaconf", "pyarrow", "scipy", "submitit"} <= set(refused)
    library = sorted(_modules_of("library"))
    script = (
        "import importlib, sys\n"
        f"refused = set({refused!r})\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in refused:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        f"for name in {library!r}:\n"
        "    importlib.import_module(name)\n"
        "print(len(refused & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr[-2000:]


def test_the_analysis_needs_only_its_extra_and_never_the_gpu_stack():
    files = modules()
    needed = _reach(_modules_of("analysis"), files)
    assert {m: sorted(f) for m, f in needed.items() if m in GPU_STACK} == {}
    assert _undeclared(needed, {"analysis"}) == []
    assert set(needed) == {"duckdb", "matplotlib", "numpy", "omegaconf", "pyarrow", "scipy", "tqdm"}


def test_the_orchestration_needs_the_core_and_the_cohorts_extra():
    files = modules()
    orchestration = _modules_of("orchestration")
    assert {"stateaware.launch.launcher", "stateaware.cli", "stateaware.cohorts.semantic"} <= orchestration
    assert _undeclared(_reach(orchestration, files), {None, "cohorts", "jax"}) == []


def test_the_walk_follows_module_level_imports_and_functions_taken_by_name(tmp_path):
    # The check can fail: an analysis module that takes `f` from a library module needs what
    # the library imports at module level and inside `f`, not what its other functions import.
    (tmp_path / "lib.py").write_text(
        "import numpy\n\ndef f():\n    import torch\n\ndef g():\n    import jax\n\n"
        "def h():\n    try:\n        import scipy\n    except ImportError:\n        pass\n"
    )
    (tmp_path / "user.py").write_text("def run():\n    from stateaware.lib import f\n")
    (tmp_path / "bare.py").write_text("import stateaware.lib\n")
    files = {
        "stateaware.lib": tmp_path / "lib.py",
        "stateaware.user": tmp_path / "user.py",
        "stateaware.bare": tmp_path / "bare.py",
    }
    assert _reach({"stateaware.user"}, files) == {"numpy": {"stateaware.lib"}, "torch": {"stateaware.lib"}}
    assert _reach({"stateaware.bare"}, files) == {"numpy": {"stateaware.lib"}}
    assert _reach({"stateaware.user"}, files, whole=False) == {}
    assert _reach({"stateaware.lib"}, files) == {n: {"stateaware.lib"} for n in ("numpy", "torch", "jax")}


def test_the_extras_expand_through_their_self_references():
    assert _expand({"cohorts"}) == {"cohorts", "analysis"}
    assert _expand({"all"}) == {"all", "analysis", "cohorts", "jax", "docs", "test"}
    assert "torch" not in _declared({"analysis"}) and "duckdb" in _declared({"cohorts"})
    assert _declared({None}) == {"numpy", "torch"}


def test_plan_plot_without_matplotlib_names_the_install_in_one_line(tmp_path):
    # matplotlib is the analysis extra's; a core install (simulated by refusing the import)
    # gets one line saying what to install, before any planning, and no image.
    card = REPO / "tests" / "data" / "cards" / "handwritten_large_sparse.json"
    image = tmp_path / "frontier.png"
    refuse = (
        "import runpy, sys\n"
        "class NoMatplotlib:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, NoMatplotlib())\n"
        f"sys.argv = ['plan', {str(card)!r}, '--budget', '32GiB', '--plot', {str(image)!r}]\n"
        "runpy.run_module('stateaware.plan', run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", refuse], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "--plot needs matplotlib, which the core install leaves out: pip install 'stateaware[analysis]'\n"
    )
    assert not image.exists()


# -- every import declared, every declaration installed ------------------------------------


def test_every_module_the_code_imports_is_a_declared_dependency():
    code = [path for name, path in source_files() if name.endswith(".py")]
    assert _undeclared(_imported(code), {None, "analysis", "cohorts", "jax"}) == []


def test_an_optional_import_that_is_installed_comes_from_a_declared_extra():
    # Not installed, an optional import hides nothing (the code runs without it); installed,
    # it must be one a user can ask for by name (pyproject's optional dependencies).
    code = [path for name, path in source_files() if name.endswith(".py")]
    owners = md.packages_distributions()
    present = {m: f for m, f in _imported(code, optional=True).items() if m in owners}
    extras = {extra for _, extra in _requirements()}
    assert _undeclared(present, extras) == []


def test_every_module_the_tests_import_is_a_declared_dependency():
    tests = sorted((REPO / "tests").rglob("*.py"))
    assert _undeclared(_imported(tests), {None, "all"}) == []


def test_every_declared_dependency_is_installed_within_its_range():
    from packaging.requirements import Requirement

    wrong = []
    for text, extra in _requirements():
        req = Requirement(text)
        if _normal(req.name) == "stateaware":
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            if extra not in NOT_INSTALLED_BY_MAKE:  # what make install installs: .[all]
                wrong.append(f"{text}: not installed")
            continue
        if version not in req.specifier:
            wrong.append(f"{text}: {version} installed")
    assert wrong == [], f"re-run make install (pip install -e '.[all]'): {wrong}"


def test_ranges_are_ranges_never_exact_pins():
    from packaging.requirements import Requirement

    pinned = [t for t, _ in _requirements() if any(s.operator in ("==", "===") for s in Requirement(t).specifier)]
    assert pinned == []


def test_gpu_stays_outside_all():
    assert "gpu" not in _expand({"all"})


def test_the_checks_see_an_undeclared_import():
    # The check itself can fail: a module no declared distribution provides is named.
    assert _undeclared({"yaml": {"x.py"}, "json": {"x.py"}, "numpy": {"x.py"}}, {None}) == [
        "yaml (from ['pyyaml']), imported by x.py"
    ]
    assert _undeclared({"torch": {"a.py"}}, {"analysis"}) == ["torch (from ['torch']), imported by a.py"]
