"""The tree stays lint-clean, formatted and type-checked: `make test` (what CI runs) enforces
the same ruff and mypy checks as the pre-commit hooks, with their configuration read from
pyproject.toml. The tools run from this interpreter (the venv), so CI and a developer's
hooks use the same versions.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize(
    "command",
    [("ruff", "check", "."), ("ruff", "format", "--check", "."), ("mypy",)],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_tool_finds_nothing(command):
    # mypy reads its files and cache_dir from [tool.mypy]; a cold cache takes a minute or two.
    proc = _run(*command)
    assert proc.returncode == 0, f"`{' '.join(command)}` found problems:\n{proc.stdout}{proc.stderr}"


#: Where the tree is read by users and maintainers: code, configuration and docs.
CITING_FOLDERS = ("stateaware", "analysis", "cohorts", "bench", "conf", "slurm", "tests", "docs", "examples")
CITING_FILES = ("README.md", "pyproject.toml", "Makefile", "mkdocs.yml")
#: bench/results/ holds dated measurement records: each names the branch it was measured on.
NOT_CITING = ("bench/results",)
TEXT_SUFFIXES = {".py", ".md", ".sql", ".yaml", ".yml", ".sh", ".toml", ".txt", ".cfg", ""}
#: An issue number (the word, then a number) or the design document kept outside the repository.
ISSUE_CITATION = re.compile(r"\bissues? ?#?\d+|\bDESIGN\.md\b|\bdesign[ ]note\b", re.IGNORECASE)


def issue_citations(root: Path) -> list[str]:
    """``path:line: text`` for each line under ``root`` that cites an issue number or the design document."""
    paths = [root / name for name in CITING_FILES if (root / name).is_file()]
    for folder in CITING_FOLDERS:
        paths += sorted(p for p in (root / folder).rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
    found = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(root).parts):
            continue
        if rel.startswith(NOT_CITING):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file: nobody reads it as text
        found += [
            f"{rel}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if ISSUE_CITATION.search(line)
        ]
    return found


def test_no_code_comment_or_doc_cites_an_issue_number_or_the_design_document():
    # An issue number means nothing to a user; the reason it stands for does (or a docs/ page).
    assert issue_citations(ROOT) == []


@pytest.mark.parametrize(
    "line, cited",
    [
        ("# slow since issue" + " 26", True),
        ("see Issues" + " #4 and 5", True),
        ("(" + "DESIGN" + ".md, 'Layout')", True),
        ("a design" + " note said so", True),
        ("the issues at hand", False),
        ("tis" + "sue 3", False),  # a word that ends in the letters, not a citation
    ],
)
def test_the_citation_check_finds_an_issue_number_and_the_design_document(tmp_path, line, cited):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(f"intro\n{line}\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "old.md").write_text(line)  # a dated record: not checked
    assert issue_citations(tmp_path) == ([f"docs/page.md:2: {line}"] if cited else [])


#: A Sphinx role (``:class:`Plan```, ``:func:`~a.b```): the site renders docstrings as written,
#: and ``--help`` prints them, so a role shows as markup in both; names are ``backticked``.
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|type):`")
DOCSTRING_FOLDERS = ("stateaware", "analysis", "cohorts", "examples", "bench")


def sphinx_roles(root: Path) -> list[str]:
    """``path:line: text`` for each line of Python under ``root``'s source folders holding a Sphinx role."""
    found = []
    for folder in DOCSTRING_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            rel = path.relative_to(root).as_posix()
            found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(lines, 1) if SPHINX_ROLE.search(line)]
    return found


def test_docstrings_use_one_style_backticked_names_and_no_sphinx_roles():
    assert sphinx_roles(ROOT) == []


@pytest.mark.parametrize(
    "line, role",
    [
        ('"""See :class:' + '`Plan`."""', True),
        ("# :func:" + "`~stateaware.auto.wrap`", True),
        ('"""See ``Plan``."""', False),
        ("x = 'a:b'  # a colon", False),
    ],
)
def test_the_role_check_finds_a_role(tmp_path, line, role):
    (tmp_path / "stateaware").mkdir()
    (tmp_path / "stateaware" / "m.py").write_text(f"{line}\n")
    assert sphinx_roles(tmp_path) == ([f"stateaware/m.py:1: {line}"] if role else [])
