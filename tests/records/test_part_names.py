"""The store's file names, written and read back by one rule (``stateaware/records/part_names.py``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stateaware.names import InvalidName
from stateaware.records.part_names import (
    MAX_PART_NAME,
    compacted_file_name,
    compacted_files,
    parse_part_name,
    part_file_name,
    run_folder,
    status_parts,
    unstamped,
)
from stateaware.records.writer import part_path

_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-="
#: Any text of the part-name alphabet and a little more: the writer refuses what the rule does not allow.
PARTS = st.text(alphabet=_CHARACTERS + "/ é", min_size=0, max_size=MAX_PART_NAME + 2)


@given(st.integers(0, 10**9), PARTS)
def test_the_writer_makes_exactly_the_names_that_read_back_as_its_process_and_part(tmp_path_factory, index, part):
    out = tmp_path_factory.getbasetemp()
    try:
        path = part_path(out, "timings", "c", "r", index, part)
    except InvalidName:  # refused by the writer: no name of it is a part either
        assert parse_part_name(part_file_name(index, part)) is None
        return
    assert path.name == part_file_name(index, part)
    assert path.parent == run_folder(out, "timings", "c", "r")
    assert parse_part_name(path.name) == (index, part)


@given(st.text(alphabet="0123456789abcdef", min_size=12, max_size=64))
def test_a_compacted_name_is_never_a_part(digest):
    name = compacted_file_name(digest)
    assert name == f"compacted-{digest[:12]}.parquet"
    assert parse_part_name(name) is None


def test_names_the_writer_would_not_make_are_not_parts():
    # Fewer than six digits, a sign, a stamp after the suffix, a temporary file: none is a part.
    for name in ["p1-a1.parquet", "p-000001-a1.parquet", "p000001-a1.parquet.20261205T010203.000000Z",
                 ".p000001-a1.parquet.tmp-host-12", "p000001-.parquet", "p000001-a1.parquet.parquet2"]:  # fmt: skip
        assert parse_part_name(name) is None, name
    # A process past a million writes seven digits, and reads back as itself.
    assert parse_part_name(part_file_name(1_234_567, "a2")) == (1_234_567, "a2")
    assert unstamped("p000001-a1.parquet.20261205T010203.000000Z") == "p000001-a1.parquet"


def test_the_globs_find_exactly_one_process_status_parts_and_the_compacted_files(tmp_path):
    names = [part_file_name(1, "a1"), part_file_name(1, "a2"), part_file_name(12, "a1"), part_file_name(1, "x"),
             compacted_file_name("0" * 12), ".p000001-a3.parquet.tmp-h-1"]  # fmt: skip
    for name in names:
        (tmp_path / name).write_bytes(b"")
    stamped = tmp_path / (part_file_name(1, "a3") + ".20261205T010203.000000Z")
    stamped.write_bytes(b"")
    assert [p.name for p in status_parts(tmp_path, 1)] == [part_file_name(1, "a1"), part_file_name(1, "a2")]
    assert [p.name for p in status_parts(tmp_path, 1, stamped=True)][-1] == stamped.name
    assert [p.name for p in compacted_files(tmp_path)] == [compacted_file_name("0" * 12)]
