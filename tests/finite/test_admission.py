"""Admission: integer-write programs get no float gradient, before anything executes."""

import pytest

from stateaware.finite.admission import UnsupportedProgram, admit
from stateaware.finite.derivatives import complex_step, forward_jacobian, reverse_versions
from stateaware.finite.engines import retain
from stateaware.finite.generate import integer_write_variant, random_program, workload_program
from stateaware.finite.interpret import execute
from stateaware.finite.replay import snapshot_replay


def test_integer_write_variant_is_unsupported_with_a_reason():
    program = workload_program(11, "prototype", "sparse", 32, 16, aliases=True)
    assert admit(program).supported
    variant = integer_write_variant(program, 11)
    decision = admit(variant)
    assert decision.outcome == "unsupported"
    assert "writes int32 bytes" in decision.reason and "integer write" in decision.reason
    assert sum(op.kind == "int_write" for op in variant.ops) == 1 and len(variant.ops) == 17


def test_no_gradient_path_accepts_an_integer_write_program():
    variant = integer_write_variant(workload_program(2, "queue", "sparse", 32, 8), 2)
    trace = execute(variant, keep_prestates=True)  # byte execution itself is fine
    for attempt in (
        lambda: reverse_versions(trace),
        lambda: forward_jacobian(variant, trace.draws),
        lambda: complex_step(variant, trace.draws),
        lambda: retain("eager", trace),
    ):
        with pytest.raises(UnsupportedProgram, match="integer write"):
            attempt()


def test_byte_replay_admits_integer_writes():
    program = random_program(3, 8, 16, "gather", integer_writes=True)
    assert any(op.kind == "int_write" for op in program.ops)
    assert admit(program, gradient=False).supported
    assert snapshot_replay(program).match
