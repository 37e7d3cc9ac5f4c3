"""Programs are data: validated descriptors, a printable listing, JSON, typed aliases."""

import json

import numpy as np
import pytest

from stateaware.finite.generate import random_program, workload_program
from stateaware.finite.program import Alias, Cells, Indexed, Op, describe, to_json


def test_program_is_data_and_prints_one_line_per_operation():
    program = random_program(7, 8, 12, "overlapping", integer_writes=True)
    listing = describe(program).splitlines()
    assert len(listing) == 1 + 12
    data = json.loads(to_json(program))
    assert len(data["ops"]) == 12 and data["seed"] == 7
    assert random_program(7, 8, 12, "overlapping", integer_writes=True).to_dict() == program.to_dict()


def test_invalid_descriptors_name_the_field_and_allowed_values():
    with pytest.raises(ValueError, match="Op.kind 'copy'; allowed values are: affine, mul, int_write"):
        Op("copy", Cells(0, 1, 2), (Cells(0, 1, 2), Cells(0, 1, 2)))
    with pytest.raises(ValueError, match="Op.act 'relu'"):
        Op("affine", Cells(0, 1, 2), (Cells(0, 1, 2), Cells(0, 1, 2)), act="relu")
    with pytest.raises(ValueError, match="different lengths"):
        Op("affine", Cells(0, 1, 2), (Cells(0, 1, 3), Cells(0, 1, 2)))
    with pytest.raises(ValueError, match="slot_count=1"):
        Op("affine", Indexed(0, 1, 2, 0, 4, 1), (Cells(0, 1, 2), Cells(0, 1, 2)))
    with pytest.raises(ValueError, match="Alias.dtype 'int8x'"):
        Alias("int8x", 0, 1, 1)
    with pytest.raises(ValueError, match="family 'mixed'"):
        random_program(0, 4, 4, "mixed")


def test_typed_aliases_share_the_storage_bytes():
    buf = np.zeros(16, dtype=np.uint8)
    view = Alias("int32", 4, 8, 2).view(buf)
    view[:] = [1, 2]
    assert buf[4] == 1 and buf[12] == 2
    assert np.frombuffer(buf.tobytes(), dtype="<f8")[0] != 0.0  # the int32 write changed float bytes


def test_indexed_view_selects_rows_by_integer_read():
    view = Indexed(slot_start=1, slot_stride=1, slot_count=2, base=4, rows=3, row=2)
    assert view.resolve(np.array([9, 2, 4], dtype=np.int32)).tolist() == [8, 9, 6, 7]  # rows 2 and 1


def test_workload_programs_declare_aliases_and_their_write_density():
    sparse = workload_program(3, "queue", "sparse", 32, 16, aliases=True)
    dense = workload_program(3, "queue", "dense", 32, 16)
    assert len(sparse.aliases) == 5 and sparse.writes == "sparse" and dense.aliases == ()
    assert max(op.dst.length for op in sparse.ops) == 4
    assert max(op.dst.length for op in dense.ops) == 28
