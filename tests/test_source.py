"""Source identity: which files count, and a hash that is stable yet sensitive."""

from __future__ import annotations

import hashlib

import pytest

from stateaware import source


def test_the_hash_covers_the_library_cohorts_analysis_and_config():
    names = [name for name, _ in source.source_files()]
    assert names == sorted(names) and len(names) == len(set(names))
    for expected in (
        "stateaware/cli.py",
        "stateaware/records/schema.py",
        "stateaware/cohorts/demo.py",
        "stateaware/analysis/store/views.py",
        "stateaware/conf/config.yaml",
        "stateaware/conf/cohort/demo.yaml",
    ):
        assert expected in names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)


def test_the_hash_is_the_documented_digest(monkeypatch):
    files = source.source_files()
    digest = hashlib.sha256()
    for name, path in files:
        data = path.read_bytes()
        digest.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    assert source.source_hash() == digest.hexdigest()


def test_editing_or_renaming_a_file_changes_the_hash(monkeypatch, tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    monkeypatch.setattr(source, "source_files", lambda user_code=(): [("stateaware/a.py", a)])
    before = source.source_hash()
    a.write_text("x = 2\n")
    assert source.source_hash() != before
    a.write_text("x = 1\n")
    assert source.source_hash() == before
    monkeypatch.setattr(source, "source_files", lambda user_code=(): [("stateaware/b.py", a)])
    assert source.source_hash() != before


def test_a_users_module_counts_by_its_file_and_a_package_by_its_folder(monkeypatch, tmp_path):
    (tmp_path / "solo.py").write_text("def run(spec, writer): ...\n")
    (tmp_path / "lab" / "kinds" / "__pycache__").mkdir(parents=True)
    for name in (
        "lab/__init__.py",
        "lab/kinds/fast.py",
        "lab/kinds/grid.yaml",
        "lab/kinds/notes.txt",
        "lab/kinds/__pycache__/fast.cpython-311.pyc",
        "lab/.hidden.py",
    ):
        (tmp_path / name).write_text("x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert source.user_code_files("solo") == [("solo.py", tmp_path / "solo.py")]
    assert [n for n, _ in source.user_code_files("lab")] == [
        "lab/__init__.py",
        "lab/kinds/fast.py",
        "lab/kinds/grid.yaml",
    ]
    library = source.source_files()
    assert source.source_files(("solo", "lab")) == sorted(
        library + source.user_code_files("solo") + source.user_code_files("lab")
    )
    before = source.source_hash(("lab",))
    assert before != source.source_hash()
    (tmp_path / "lab" / "kinds" / "fast.py").write_text("y\n")
    assert source.source_hash(("lab",)) != before
    for bad, why in (
        ("lab.kinds", "expected a top-level module name"),
        ("stateaware", "other than 'stateaware'"),
        ("no_such_module_here", "is not importable from here"),
        ("sys", "not a Python source file"),
    ):
        with pytest.raises(source.UserCodeError, match=why):
            source.user_code_files(bad)
