"""Source identity: which files count, and a hash that is stable yet sensitive."""

from __future__ import annotations

import hashlib

from stateaware import source


def test_the_hash_covers_the_library_cohorts_analysis_and_config():
    names = [name for name, _ in source.source_files()]
    assert names == sorted(names) and len(names) == len(set(names))
    for expected in ("stateaware/cli.py", "stateaware/records/schema.py", "stateaware/cohorts/demo.py",
                     "stateaware/analysis/views.py", "stateaware/conf/config.yaml", "stateaware/conf/cohort/demo.yaml"):
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
    monkeypatch.setattr(source, "source_files", lambda: [("stateaware/a.py", a)])
    before = source.source_hash()
    a.write_text("x = 2\n")
    assert source.source_hash() != before
    a.write_text("x = 1\n")
    assert source.source_hash() == before
    monkeypatch.setattr(source, "source_files", lambda: [("stateaware/b.py", a)])
    assert source.source_hash() != before
