"""Three derivative paths agree; the final-storage control is caught."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.finite.derivatives import (
    complex_step,
    forward_jacobian,
    gradient_tolerance,
    reverse_trace,
    reverse_versions,
)
from stateaware.finite.engines import reads_of
from stateaware.finite.generate import FAMILIES, PATTERNS, WRITES, random_program, workload_program
from stateaware.finite.interpret import execute
from stateaware.finite.program import Cells, Op, Program

random_programs = st.builds(
    random_program,
    seed=st.integers(0, 2**32),
    dimension=st.sampled_from([4, 8, 16]),
    operations=st.integers(1, 16),
    family=st.sampled_from(FAMILIES),
)
workloads = st.builds(
    workload_program,
    seed=st.integers(0, 2**32),
    pattern=st.sampled_from(PATTERNS),
    writes=st.sampled_from(WRITES),
    dimension=st.sampled_from([16, 32]),
    operations=st.integers(1, 12),
)


@settings(max_examples=40, deadline=None)
@given(random_programs)
def test_version_graph_matches_forward_jacobian_and_complex_step(program):
    trace = execute(program)
    output, reference = forward_jacobian(program, trace.draws)
    assert output == trace.output()
    tol = gradient_tolerance(reference)
    assert np.max(np.abs(reverse_versions(trace) - reference)) <= tol
    assert np.max(np.abs(complex_step(program, trace.draws) - reference)) <= tol
    assert np.max(np.abs(reverse_trace(program, [reads_of(e) for e in trace.events]) - reference)) <= tol


@settings(max_examples=15, deadline=None)
@given(workloads)
def test_workload_gradients_agree(program):
    trace = execute(program)
    _, reference = forward_jacobian(program, trace.draws)
    assert np.max(np.abs(reverse_versions(trace) - reference)) <= gradient_tolerance(reference)


def test_jacobian_of_a_hand_program():
    # x1 <- tanh(2*x0); then x0 <- x1 * x0 (mul, overlapping); output x0 + x1.
    ops = (
        Op("affine", Cells(1, 1, 1), (Cells(0, 1, 1), Cells(0, 1, 1)), a=2.0, b=0.0, act="tanh"),
        Op("mul", Cells(0, 1, 1), (Cells(1, 1, 1), Cells(0, 1, 1)), a=1.0),
    )
    program = Program("hand", 0, "hand", np.array([0.3, 5.0]), np.zeros(2, np.int32), ops, np.ones(2), 1)
    trace = execute(program)
    t = np.tanh(0.6)
    expected = (1 - t * t) * 2 * 0.3 + t + (1 - t * t) * 2  # d/dx0 of tanh(2x0)*x0 + tanh(2x0)
    _, grad = forward_jacobian(program, trace.draws)
    assert np.allclose(grad, [expected, 0.0], rtol=0, atol=1e-15)
    assert np.allclose(reverse_versions(trace), grad, rtol=0, atol=1e-15)
    # the control reads x0 = tanh(0.6)*0.3 (final) where the op read 0.3: caught
    assert abs(reverse_versions(trace, "final")[0] - expected) > 1e-3


def test_final_storage_control_is_caught_on_sixty_dimension_8_programs():
    caught = 0
    for seed in range(60):
        program = random_program(seed, 8, 12, FAMILIES[seed % 3])
        trace = execute(program)
        _, reference = forward_jacobian(program, trace.draws)
        caught += np.max(np.abs(reverse_versions(trace, "final") - reference)) > gradient_tolerance(reference)
    assert caught == 60


# The suite's programs (cohorts/derivative.py): dimensions 4/8/16, 8/12/16 operations.
suite_programs = st.builds(
    random_program,
    seed=st.integers(0, 2**32),
    dimension=st.sampled_from([4, 8, 16]),
    operations=st.sampled_from([8, 12, 16]),
    family=st.sampled_from(FAMILIES),
    overwritten_dependence=st.just(True),
)


def _control_error(program):
    trace = execute(program)
    _, reference = forward_jacobian(program, trace.draws)
    return float(np.max(np.abs(reverse_versions(trace, "final") - reference))), gradient_tolerance(reference)


@settings(max_examples=60, deadline=None)
@given(suite_programs)
def test_suite_programs_depend_on_an_overwritten_value_and_the_control_sees_it(program):
    from stateaware.finite.generate import depends_on_overwritten

    assert depends_on_overwritten(program)
    error, tol = _control_error(program)
    assert error > tol  # the rule's meaning: reading the final storage changes the gradient


def test_degenerate_first_draws_are_redrawn_and_obeying_ones_kept():
    from stateaware.finite.generate import depends_on_overwritten

    # suite program 19 (seed 610019, d8, 8 ops, gather): its first draw reads no overwritten
    # value in its gradient — the control computes the right gradient from final storage
    first = random_program(610019, 8, 8, "gather")
    assert not depends_on_overwritten(first)
    error, tol = _control_error(first)
    assert error <= tol
    redrawn = random_program(610019, 8, 8, "gather", overwritten_dependence=True)
    assert depends_on_overwritten(redrawn) and redrawn.to_dict() != first.to_dict()
    assert (redrawn.n, len(redrawn.ops), redrawn.family, redrawn.seed) == (8, 8, "gather", 610019)
    assert random_program(610019, 8, 8, "gather", overwritten_dependence=True).to_dict() == redrawn.to_dict()
    # a first draw that obeys the rule is kept as drawn
    assert (
        random_program(610020, 16, 8, "gather", overwritten_dependence=True).to_dict()
        == random_program(610020, 16, 8, "gather").to_dict()
    )


def test_a_program_that_cannot_obey_the_rule_is_refused_by_name():
    import pytest

    with pytest.raises(ValueError, match=r"no draw in 64 has a gradient that depends on an overwritten value"):
        random_program(1, 4, 0, "strided", overwritten_dependence=True)  # no operation overwrites anything
    with pytest.raises(ValueError, match="integer_writes programs have no float gradient"):
        random_program(1, 4, 8, "strided", integer_writes=True, overwritten_dependence=True)
