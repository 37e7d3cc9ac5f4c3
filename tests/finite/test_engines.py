"""The five engines recover exactly what eager retention saw; a weakened journal is caught."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.finite.derivatives import forward_jacobian, gradient_tolerance, reverse_trace
from stateaware.finite.engines import ENGINES, reads_equal, reads_of, recover, retain, verify_engine
from stateaware.finite.generate import FAMILIES, PATTERNS, WRITES, random_program, workload_program
from stateaware.finite.interpret import apply, execute, storage_from_bytes
from stateaware.finite.program import Cells, Op, Program

workloads = st.builds(
    workload_program,
    seed=st.integers(0, 2**32),
    pattern=st.sampled_from(PATTERNS),
    writes=st.sampled_from(WRITES),
    dimension=st.sampled_from([16, 32, 64]),
    operations=st.integers(1, 16),
    segment=st.integers(1, 5),
    aliases=st.just(True),
)
random_programs = st.builds(
    random_program,
    seed=st.integers(0, 2**32),
    dimension=st.sampled_from([4, 8, 16]),
    operations=st.integers(1, 16),
    family=st.sampled_from(FAMILIES),
    segment=st.integers(1, 5),
)


def _check_all_engines(program):
    trace = execute(program, keep_prestates=True)
    _, reference = forward_jacobian(program, trace.draws)
    eager_reads = recover(retain("eager", trace), program, storage_from_bytes(trace.final_bytes, program.n))
    for engine in ENGINES:
        live = storage_from_bytes(trace.final_bytes, program.n)
        reads = recover(retain(engine, trace), program, live)
        assert all(reads_equal(a, b) for a, b in zip(reads, eager_reads, strict=True)), engine
        assert live.buf.tobytes() == trace.final_bytes.tobytes(), engine
        result = verify_engine(engine, trace)
        assert result.recovered, engine
        assert np.max(np.abs(result.gradient - reference)) <= gradient_tolerance(reference)


@settings(max_examples=30, deadline=None)
@given(workloads)
def test_every_engine_recovers_what_eager_saw_on_workloads(program):
    _check_all_engines(program)


@settings(max_examples=30, deadline=None)
@given(random_programs)
def test_every_engine_recovers_what_eager_saw_on_random_programs(program):
    _check_all_engines(program)


def _weakened_journal_reads(program, trace):
    """A region journal that keeps only each segment's own overwritten values: it undoes
    segment s's writes on the final storage, ignoring later segments' destroying writes."""
    journal = [(e.dst, e.old) for e in trace.events]
    out = [None] * len(program.ops)
    for seg in reversed(program.segments):
        storage = storage_from_bytes(trace.final_bytes, program.n)
        for k in reversed(seg):
            storage.cells[journal[k][0]] = journal[k][1]
        for k in seg:
            out[k] = reads_of(apply(k, program.ops[k], storage, recorded=trace.events[k].draws))
    return out


def _has_hazard(program, trace):
    """Whether a later segment changed a cell that segment s reads but does not write."""
    final = trace.final_bytes[: 8 * program.n].view("<f8")
    for seg in program.segments:
        entry = trace.prestates[seg.start][: 8 * program.n].view("<f8")
        read = set().union(*(set(trace.events[k].src0) | set(trace.events[k].src1) for k in seg))
        written = set().union(*(set(trace.events[k].dst) for k in seg))
        if any(final[c].tobytes() != entry[c].tobytes() for c in read - written):
            return True
    return False


@settings(max_examples=40, deadline=None)
@given(st.one_of(workloads, random_programs))
def test_weakened_journal_is_caught_exactly_when_later_writes_destroy_needed_history(program):
    trace = execute(program, keep_prestates=True)
    truth = [reads_of(e) for e in trace.events]
    weakened = _weakened_journal_reads(program, trace)
    caught = not all(reads_equal(a, b) for a, b in zip(weakened, truth, strict=True))
    assert caught == _has_hazard(program, trace)
    full = recover(retain("region_journal", trace), program, storage_from_bytes(trace.final_bytes, program.n))
    assert all(reads_equal(a, b) for a, b in zip(full, truth, strict=True))


def test_weakened_journal_gives_a_wrong_gradient_on_a_ring_queue():
    program = workload_program(1, "queue", "sparse", 16, 16, segment=2)
    trace = execute(program, keep_prestates=True)
    assert _has_hazard(program, trace)
    _, reference = forward_jacobian(program, trace.draws)
    wrong = reverse_trace(program, _weakened_journal_reads(program, trace))
    assert np.max(np.abs(wrong - reference)) > gradient_tolerance(reference)


def _hand(ops, n=16):
    return Program(
        "hand", 0, "hand", np.linspace(-1, 1, n), np.zeros(n, np.int32), tuple(ops), np.ones(n), 1, segment=1
    )


def test_guarded_region_chooses_by_payload_bytes():
    sparse = _hand([Op("affine", Cells(0, 1, 1), (Cells(1, 1, 1), Cells(2, 1, 1)), a=0.5, b=0.5)] * 3)
    dense = _hand([Op("affine", Cells(0, 1, 16), (Cells(0, 1, 16), Cells(0, 1, 16)), a=0.5, b=0.5, act="tanh")] * 3)
    for program, anchored in ((sparse, 0), (dense, 3)):
        retained = retain("guarded_region", execute(program, keep_prestates=True))
        assert len(retained.state["anchors"]) == anchored
        assert len(retained.state["journal"]) == 3 - anchored


def test_retained_bytes_are_measured_from_what_each_engine_keeps():
    # 16 cells + 16 slots = 192 storage bytes; 3 ops, segment 1, no random draws.
    program = _hand([Op("affine", Cells(0, 1, 1), (Cells(1, 1, 1), Cells(2, 1, 1)), a=0.5, b=0.5)] * 3)
    trace = execute(program, keep_prestates=True)
    sizes = {e: retain(e, trace).retained_bytes for e in ENGINES}
    assert sizes == {
        "eager": 3 * 192,
        "whole": 3 * 192,
        "read_set": 3 * 16,
        "region_journal": 3 * (4 + 8 + 8),
        "guarded_region": 3 * 20,
    }


def test_unknown_engine_lists_the_engines():
    trace = execute(random_program(0, 4, 2, "strided"), keep_prestates=True)
    with pytest.raises(ValueError, match="allowed values are: eager, whole, read_set, region_journal, guarded_region"):
        retain("journal", trace)
