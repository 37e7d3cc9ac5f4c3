"""The cost runtime's workloads and methods: rows, semantics against the functional program."""

from __future__ import annotations

import math

import pytest
import torch

from stateaware.cost_runtime.method_steps import CONTROL, semantic_checks
from stateaware.cost_runtime.methods import FUNCTIONAL, METHODS, forward, uniform_policy
from stateaware.cost_runtime.workloads import WORKLOADS, Shape, build, seed_step, step_rows


def tiny(workload="feature_queue", fraction=0.05, live=4):
    return Shape(
        workload,
        buffer_bytes=64 * 256,
        write_fraction=fraction,
        live_segments=live,
        granularity_bytes=256,
        width=16,
        batch=8,
        rank=2,
    )


def test_shape_validation_names_the_field():
    with pytest.raises(ValueError, match="workload='queue'; valid workloads are: feature_queue"):
        tiny(workload="queue")
    with pytest.raises(ValueError, match="write_fraction=0"):
        tiny(fraction=0)
    with pytest.raises(ValueError, match="granularity_bytes=6"):
        Shape("feature_queue", 4096, 0.1, 2, 6, 4, 4, 1)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_sparse_rows_regions_cover_every_later_write(workload):
    shape = tiny(workload, fraction=0.05, live=6)
    assert shape.n_rows == 64 and shape.rows_written == math.ceil(0.05 * 64) == 4
    rows = step_rows(shape, seed=3, step=2)
    for i in range(shape.live_segments):
        assert rows.writes[i].shape == (4,)
        later = set(torch.cat(rows.writes[i:]).tolist())
        assert set(rows.regions[i].tolist()) == later  # exactly the union, no more
    # deterministic in (seed, step)
    again = step_rows(shape, seed=3, step=2)
    assert all(torch.equal(a, b) for a, b in zip(rows.reads, again.reads, strict=True))


def test_dense_rows_write_everything():
    shape = tiny(fraction=1.0)
    rows = step_rows(shape, seed=0, step=0)
    assert shape.rows_written == shape.n_rows
    assert all(w is None for w in rows.writes)
    assert all(torch.equal(r, torch.arange(shape.n_rows)) for r in rows.regions)


def test_feature_queue_later_segments_overwrite_what_earlier_ones_read():
    shape = tiny("feature_queue", fraction=0.05, live=4)
    rows = step_rows(shape, seed=0, step=0)
    assert set(rows.reads[0].tolist()) & set(rows.writes[1].tolist())


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("fraction", [0.05, 1.0])
def test_every_method_matches_the_functional_program_and_the_native_checkpoint_does_not(workload, fraction):
    shape = tiny(workload, fraction)
    policies = {m: uniform_policy(m, shape.live_segments) for m in ("eager", "whole", "regions", "functional")}
    policies["mixed"] = ("eager", "region", "whole", "region")
    checks = semantic_checks(shape, policies, seed=5)
    assert len(checks) == 2 * (len(policies) + 1)
    for c in checks:
        if c.method == CONTROL:
            # State written after the forward reaches the native replay: wrong gradients.
            assert c.outcome == "diverge" and c.phase in ("backward1", "backward2"), c
        else:
            assert c.outcome == "match", c
            assert c.max_error <= c.tolerance


def test_forward_leaves_the_same_state_under_every_method():
    shape = tiny("prototype_memory", 0.05)
    rows = step_rows(shape, seed=1, step=0)
    states = []
    for policy in (("eager",) * 4, ("whole",) * 4, ("region",) * 4, FUNCTIONAL):
        wl = build(shape, seed=1)
        seed_step(1, 0)
        loss, _ = forward(wl, rows, policy)
        loss.backward()
        states.append(wl.state)
    assert all(torch.equal(states[0], s) for s in states[1:])
    assert not torch.equal(states[0], build(shape, seed=1).state)  # the step did write


def test_policy_errors_list_the_valid_values():
    shape = tiny()
    wl, rows = build(shape, seed=0), step_rows(shape, seed=0, step=0)
    with pytest.raises(ValueError, match="valid options are: eager, whole, region"):
        forward(wl, rows, ("eager", "eager", "snapshot", "eager"))
    with pytest.raises(ValueError, match="4 segments"):
        forward(wl, rows, ("eager",))
    with pytest.raises(ValueError, match="fixed-policy methods are"):
        uniform_policy("joint", 4)
    assert METHODS == ("eager", "whole", "regions", "functional", "agnostic", "eager_whole", "joint")


def test_a_deep_stack_keeps_a_nonzero_output_and_the_control_still_diverges():
    # 64 segments of dropout: the output must not collapse to zero (which would make every
    # gradient check vacuous), and a non-finite or zero reference is never called a match.
    shape = Shape(
        "feature_queue",
        buffer_bytes=2048 * 256,
        write_fraction=0.001,
        live_segments=64,
        granularity_bytes=256,
        width=16,
        batch=8,
        rank=1,
    )
    wl, rows = build(shape, seed=1, dtype=torch.float64), step_rows(shape, seed=1, step=0)
    seed_step(1, 0)
    loss, y = forward(wl, rows, ("eager",) * 64)
    assert float(loss.detach()) > 0 and torch.isfinite(y).all()
    control = [c for c in semantic_checks(shape, {}, seed=1) if c.method == CONTROL]
    assert [c.outcome for c in control] == ["diverge", "diverge"]
