"""Byte-level replay (eq. 2): both valid paths reproduce bytes and RNG state; a wrong RNG is caught."""

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.finite.generate import FAMILIES, random_program
from stateaware.finite.interpret import execute, rng_state_bytes, storage_from_bytes
from stateaware.finite.replay import byte_journal, region_undo, snapshot_replay, wrong_rng_replay

byte_programs = st.builds(
    random_program,
    seed=st.integers(0, 2**32),
    dimension=st.sampled_from([4, 8, 16]),
    operations=st.integers(1, 16),
    family=st.sampled_from(FAMILIES),
    integer_writes=st.just(True),
)


@settings(max_examples=40, deadline=None)
@given(byte_programs)
def test_snapshot_replay_and_region_undo_reproduce_bytes_and_generator(program):
    trace = execute(program)
    assert snapshot_replay(program, trace).match
    assert region_undo(program, trace).match


@settings(max_examples=30, deadline=None)
@given(byte_programs)
def test_undoing_the_journal_recovers_the_initial_bytes(program):
    trace = execute(program)
    buf = trace.final_bytes.copy()
    for offsets, old, _ in reversed(byte_journal(program, trace.events)):
        buf[offsets] = old
    assert buf.tobytes() == program.initial_bytes().tobytes()


@settings(max_examples=30, deadline=None)
@given(byte_programs)
def test_wrong_rng_is_caught_when_draws_are_uniform_masks(program):
    # Uniform masks consume exactly one generator output per element, so a stream advanced
    # by one output stays one output ahead: the final generator state must differ.
    program = dataclasses.replace(
        program, ops=tuple(dataclasses.replace(op, sigma=0.0) if op.kind != "int_write" else op for op in program.ops)
    )
    check = wrong_rng_replay(program)
    assert not check.match and not check.rng_equal


def test_wrong_rng_changes_bytes_as_well_as_state():
    program = random_program(4, 8, 12, "strided", integer_writes=True)
    check = wrong_rng_replay(program)
    assert not check.bytes_equal and not check.rng_equal and check.mismatched_bytes > 0


def test_equal_bytes_with_a_differently_advanced_generator_is_a_mismatch():
    program = random_program(9, 4, 6, "gather")
    trace = execute(program)
    rng = np.random.default_rng(program.rng_seed)
    replay = execute(program, storage_from_bytes(program.initial_bytes(), program.n), rng)
    rng.random()  # the replay ended right, then the generator moved once more
    assert np.array_equal(replay.final_bytes, trace.final_bytes)
    assert rng_state_bytes(rng) != trace.rng_after
