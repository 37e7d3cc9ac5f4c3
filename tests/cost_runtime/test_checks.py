"""Semantic checks of the timing runner: a runtime's refusal is `reject`, any other exception `error`."""

from __future__ import annotations

import pytest

from stateaware.cost_runtime import method_steps as runner
from stateaware.cost_runtime.workloads import Shape

SHAPE = Shape(
    "feature_queue",
    buffer_bytes=4096,
    write_fraction=0.001,
    live_segments=2,
    granularity_bytes=256,
    width=4,
    batch=2,
    rank=1,
)


@pytest.mark.parametrize(
    "raised, outcome",
    [
        (
            lambda: __import__("stateaware.torch_replay.checkpoint", fromlist=["x"]).ReplayError("cannot replay"),
            "reject",
        ),
        (lambda: __import__("torch.utils.checkpoint", fromlist=["x"]).CheckpointError("metadata differs"), "reject"),
        (lambda: TypeError("unsupported operand"), "error"),
        (lambda: KeyError("segment"), "error"),
        (lambda: RuntimeError("CUDA error: out of memory"), "error"),
    ],
)
def test_an_exception_in_a_check_is_a_refusal_only_when_the_runtime_refused(monkeypatch, raised, outcome):
    real = runner.forward
    broken = ("whole", "whole")

    def forward(workload, rows, policy, **kwargs):
        if policy == broken:
            raise raised()
        return real(workload, rows, policy, **kwargs)

    monkeypatch.setattr(runner, "forward", forward)
    checks = runner.semantic_checks(SHAPE, {"ok": "functional", "bad": broken}, seed=3, control=False)
    assert [(c.method, c.precision, c.outcome) for c in checks] == [
        ("ok", "fp32", "match"),
        ("bad", "fp32", outcome),
        ("ok", "fp64", "match"),
        ("bad", "fp64", outcome),
    ]
    bad = [c for c in checks if c.method == "bad"]
    error = raised()
    assert {(c.exception_type, c.exception_message) for c in bad} == {(type(error).__name__, str(error))}


def test_every_checked_run_starts_from_the_values_its_seed_builds(monkeypatch):
    """A run that started from an instance another run had stepped would see that run's state writes."""
    import torch

    from stateaware.cost_runtime.workloads import build

    real, seen = runner.forward, []

    def forward(workload, rows, policy, **kwargs):
        seen.append((workload.state.clone(), [t.detach().clone() for t in workload.params], workload.x0.clone()))
        return real(workload, rows, policy, **kwargs)

    monkeypatch.setattr(runner, "forward", forward)
    runner.semantic_checks(SHAPE, {"a": "functional", "b": ("whole", "whole")}, seed=3, control=False)
    assert len(seen) == 6  # per precision: the reference, then a and b
    for i, (state, params, x0) in enumerate(seen):
        want = build(SHAPE, seed=3, dtype=torch.float32 if i < 3 else torch.float64)
        assert torch.equal(state, want.state) and torch.equal(x0, want.x0)
        assert all(torch.equal(p, q) for p, q in zip(params, want.params, strict=True))
