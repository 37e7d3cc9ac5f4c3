"""The tables' columns as plain data (``stateaware.records.columns``) and the Arrow schemas built
from them (``stateaware.records.schema``): one definition, read alike by both."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateaware.records import part_cache, schema
from stateaware.records.columns import ARROW_TYPES, RESULT_COLUMNS, TABLE_COLUMNS, Column, Columns, columns_for
from stateaware.records.schema import RESULT_TABLES


def test_every_type_text_is_what_arrow_prints_for_the_type_it_builds():
    # The part cache's digest of a table reads `str(field.type)`: a text that Arrow printed
    # otherwise would give a Columns and its Arrow schema two digests, and no cached answer.
    assert {text: str(schema._ARROW[text]) for text in ARROW_TYPES} == {text: text for text in ARROW_TYPES}


@pytest.mark.parametrize("table", [*TABLE_COLUMNS, *RESULT_COLUMNS])
def test_a_table_reads_alike_as_columns_and_as_its_arrow_schema(table):
    columns = {**TABLE_COLUMNS, **RESULT_COLUMNS}[table]
    arrow = {**schema.TABLES, **RESULT_TABLES}[table]
    assert schema.arrow_schema(columns) is arrow  # built once
    assert columns.names == arrow.names
    assert [(c.name, c.type, c.nullable) for c in columns] == [(f.name, str(f.type), f.nullable) for f in arrow]
    assert all(columns.field(n).type == str(arrow.field(n).type) for n in arrow.names)
    for missing_ok in (False, True):
        assert part_cache._schema_digest(columns, missing_ok) == part_cache._schema_digest(arrow, missing_ok)


def test_identity_columns_lead_every_table_and_only_they_are_not_nullable():
    identity = [f.name for f in schema.IDENTITY]
    for table, columns in TABLE_COLUMNS.items():
        assert columns.names[: len(identity)] == identity, table
        assert [c.name for c in columns if not c.nullable] == [f.name for f in schema.IDENTITY if not f.nullable]


@given(st.lists(st.sampled_from(ARROW_TYPES), min_size=1, max_size=8))
def test_arrow_schema_keeps_names_types_and_nullability_in_order(types):
    columns = Columns(Column(f"c{i}", t, nullable=i % 2 == 0) for i, t in enumerate(types))
    built = schema.arrow_schema(columns)
    assert [(f.name, str(f.type), f.nullable) for f in built] == list(columns)
    assert schema.arrow_schema(built) is built  # an Arrow schema is taken as it is


def test_bad_columns_are_refused_naming_the_column():
    with pytest.raises(ValueError, match=r"column 'x': type 'float32'; allowed: string, int16"):
        Columns([Column("x", "float32")])
    with pytest.raises(ValueError, match=r"column 'x' given twice"):
        Columns([Column("x", "string"), Column("x", "int64")])
    with pytest.raises(KeyError, match=r"no column 'nope'; columns: run_id, cohort"):
        TABLE_COLUMNS["timings"].field("nope")
    with pytest.raises(KeyError, match=r"unknown table 'timing'; valid tables are: runs, processes"):
        columns_for("timing")
    with pytest.raises(KeyError, match=r"unknown table 'timing'"):
        schema.schema_for("timing")


def test_the_columns_module_needs_no_arrow():
    import subprocess
    import sys

    probe = (
        "import sys; import stateaware.records.columns, stateaware.analysis.result_columns, "
        "stateaware.records.verdicts, stateaware.records.part_cache; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'numpy')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
