"""part_problem: every kind of damaged or foreign part is named; our own parts pass."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stateaware.records.check import part_problem
from stateaware.records.schema import SCHEMA_VERSION, TABLES
from stateaware.records.writer import Identity, RecordWriter


@pytest.fixture
def part(tmp_path):
    writer = RecordWriter(tmp_path, Identity("r", "c", 0, "h" * 64, "cpu", 1.0))
    # enough distinct values that the pages outweigh the footer (the truncation test cuts pages)
    return writer.write(
        "timings",
        {
            "method": ["joint"] * 500,
            "step": list(range(500)),
            "step_ms": [i * 1.000001 for i in range(500)],
            "peak_allocated_bytes": [i * 7919 for i in range(500)],
        },
    )


def _write(path, table, metadata=None):
    if metadata:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path)
    return path


def test_our_parts_pass_for_every_table(tmp_path):
    writer = RecordWriter(tmp_path, Identity("r", "c", 0, "h", "cpu", 1.0))
    for table, schema in TABLES.items():
        assert part_problem(writer.write(table, []), schema) is None, table


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda b: b"", "zero bytes (an interrupted copy or a full disk)"),
        (lambda b: b[: len(b) // 2], "not a Parquet file (no footer): truncated, damaged or foreign"),
        (lambda b: b[:-1], "not a Parquet file (no footer): truncated, damaged or foreign"),
        (lambda b: os.urandom(len(b)), "not a Parquet file (no footer): truncated, damaged or foreign"),
    ],
)
def test_damaged_bytes_are_named(part, damage, expected):
    part.write_bytes(damage(part.read_bytes()))
    assert part_problem(part, TABLES["timings"]) == expected


def test_a_footer_pointing_past_the_end_is_truncation(part):
    data = part.read_bytes()
    footer_len = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - footer_len :]
    part.write_bytes(data[:4] + footer)  # the footer survives, the pages do not
    assert part_problem(part, TABLES["timings"]).startswith("truncated: its footer points to byte ")


def test_foreign_schemas_are_named(part, tmp_path):
    table = pq.read_table(part)
    schema = TABLES["timings"]
    cases = {
        "missing": (table.drop(["step"]), "missing column(s) 'step'"),
        "retyped": (
            table.set_column(2, "process_index", pa.array(["x"] * 500)),
            "column 'process_index' is string, expected int32",
        ),
        "extra": (table.append_column("zz", pa.array([1] * 500)), "column(s) 'zz' not in the table (a foreign file?)"),
        "other": (
            pa.table({"a": [1], "b": [2], "c": [3], "d": [4], "e": [5]}),
            "column(s) 'a', 'b', 'c', 'd' and 1 more not in the table (a foreign file?)",
        ),
    }
    for name, (arrow, expected) in cases.items():
        assert part_problem(_write(tmp_path / f"{name}.parquet", arrow), schema) == expected, name


def test_an_older_schema_version_may_lack_later_columns_but_never_identity(part, tmp_path):
    table = pq.read_table(part)
    older = {b"stateaware.schema_version": str(SCHEMA_VERSION - 1).encode()}
    assert part_problem(_write(tmp_path / "old.parquet", table.drop(["step"]), older), TABLES["timings"]) is None
    assert (
        part_problem(_write(tmp_path / "old-id.parquet", table.drop(["run_id"]), older), TABLES["timings"])
        == "missing column(s) 'run_id'"
    )


def test_a_directory_named_like_a_part_is_not_a_part(tmp_path):
    (tmp_path / "x.parquet").mkdir()
    assert part_problem(tmp_path / "x.parquet", TABLES["runs"]) == "not a regular file"


def test_decode_reads_the_pages_the_footer_alone_trusts(part):
    data = bytearray(part.read_bytes())
    data[4:200] = b"\x00" * 196  # pages zeroed, footer intact
    part.write_bytes(bytes(data))
    assert part_problem(part, "timings") is None  # a table name works as the schema
    assert part_problem(part, "timings", decode=True).startswith("data does not decode (")
