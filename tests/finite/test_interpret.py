"""Interpreter and version graph: reads precede writes; versions keep operands."""

import numpy as np

from stateaware.finite.derivatives import graph_output
from stateaware.finite.generate import random_program
from stateaware.finite.interpret import execute
from stateaware.finite.program import Cells, Op, Program


def _program(ops, n=4):
    return Program(
        name="hand",
        seed=0,
        family="hand",
        cells0=np.arange(1.0, n + 1),
        slots0=np.zeros(n, np.int32),
        ops=tuple(ops),
        weights=np.ones(n),
        rng_seed=1,
    )


def test_overlapping_shift_reads_versions_before_its_writes():
    # cells[1:4] = cells[0:3]: a buffer-order copy would smear cells[0] across the range.
    shift = Op("affine", Cells(1, 1, 3), (Cells(0, 1, 3), Cells(0, 1, 3)), a=1.0, b=0.0)
    trace = execute(_program([shift]))
    assert trace.final_cells.tolist() == [1.0, 1.0, 2.0, 3.0]
    graph = trace.graph
    assert graph.parents0[0].tolist() == [0, 1, 2]  # operand versions are the leaves, not the new nodes
    assert graph.nodes[0].tolist() == [4, 5, 6]
    assert graph.final.tolist() == [0, 4, 5, 6]


def test_every_write_creates_a_new_version():
    ops = [Op("affine", Cells(0, 1, 2), (Cells(0, 1, 2), Cells(2, 1, 2)), a=0.5, b=0.5)] * 3
    trace = execute(_program(ops))
    assert trace.graph.size == 4 + 3 * 2
    assert trace.graph.final.tolist() == [8, 9, 2, 3]


def test_graph_reproduces_the_scalar_output_exactly():
    for seed in range(20):
        trace = execute(random_program(seed, 8, 16, ("strided", "overlapping", "gather")[seed % 3]))
        assert graph_output(trace) == trace.output()


def test_recorded_draws_replay_without_a_generator():
    program = random_program(5, 8, 12, "strided")
    first = execute(program)
    again = execute(program, draws=first.draws)
    assert np.array_equal(first.final_bytes, again.final_bytes)
    assert again.rng_before is None
