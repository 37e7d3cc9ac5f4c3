"""Semantic checks and measured steps for one workload shape and a set of method policies.

``semantic_checks`` runs every method for one step in FP32 and FP64 against the
functional program without any checkpoint (the reference): the loss, the last output,
the final state bytes and the gradients of two backward passes over the same graph must
agree within ``TOLERANCE``. ``measure`` times warm-up and measured steps of one method and
measures its peak in one extra, untimed step.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointError
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from stateaware.clocks import StepTime
from stateaware.cost_runtime.measure import Peak, live_bytes, peak_step, timed_steps
from stateaware.cost_runtime.methods import forward
from stateaware.cost_runtime.workloads import Shape, Workload, build, loss_of, seed_step, segment_forward, step_rows
from stateaware.torch_replay.checkpoint import ReplayError, UndeclaredStateError

__all__ = ["PRECISIONS", "TOLERANCE", "CONTROL", "Check", "refusals", "semantic_checks", "measure"]

#: Precisions of the semantic checks (timing runs in FP32).
PRECISIONS = {"fp32": torch.float32, "fp64": torch.float64}

#: Largest accepted error relative to the reference's largest magnitude (per compared
#: tensor). Replays run the same kernels on the same inputs, so agreement is normally
#: exact; these bounds only absorb a different summation order in a different kernel.
TOLERANCE = {"fp32": 1e-5, "fp64": 1e-12}

#: The negative control: ``torch.utils.checkpoint`` with the state hidden in a closure.
CONTROL = "torch_checkpoint"


def refusals() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the runtime refused this execution" (outcome ``reject``).

    The checkpoint runtimes' own refusals: PyTorch's ``CheckpointError`` (recomputed tensors
    differ in metadata) and our replay's ``ReplayError``/``UndeclaredStateError``. Any other
    exception is a bug or a broken environment, recorded as ``error`` — never as a refusal,
    which a reader would take for a documented property of the method.
    """
    return (CheckpointError, ReplayError, UndeclaredStateError)


@dataclass(frozen=True)
class Check:
    """One semantic check outcome: ``match``, ``diverge``, ``reject`` (a runtime refusal) or
    ``error`` (any other exception; ``exception_type``/``exception_message`` say which)."""

    method: str
    precision: str
    outcome: str
    phase: str | None
    max_error: float | None
    tolerance: float
    exception_type: str | None = None
    exception_message: str | None = None

    def row(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "precision": self.precision,
            "outcome": self.outcome,
            "phase": self.phase,
            "max_error": self.max_error,
            "tolerance": self.tolerance,
            "exception_type": self.exception_type,
            "exception_message": self.exception_message,
        }


def _observe(workload: Workload, run) -> dict[str, list[torch.Tensor]]:
    seed_step(workload.seed, 0)
    loss, y = run()
    first = torch.autograd.grad(loss, workload.params, retain_graph=True)
    second = torch.autograd.grad(loss, workload.params)
    return {
        "forward": [loss.detach(), y.detach()],
        "state": [workload.state.detach()],
        "backward1": list(first),
        "backward2": list(second),
    }


def _control_run(workload: Workload, rows):
    shape, state = workload.shape, workload.state
    x = workload.x0
    for i, (u, v) in enumerate(workload.weights):

        def segment(xx, u=u, v=v, i=i):
            return segment_forward(shape, state, u, v, xx, rows.reads[i], rows.writes[i])

        x = torch_checkpoint(segment, x, use_reentrant=False)
    return loss_of(x), x


def _compare(got: Mapping[str, list[torch.Tensor]], want: Mapping[str, list[torch.Tensor]], tol: float):
    worst_phase, worst = None, 0.0
    for phase in ("forward", "state", "backward1", "backward2"):
        for a, b in zip(got[phase], want[phase], strict=True):
            if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
                # NaN compares false with everything: a non-finite value is never a match
                return "diverge", phase, math.inf
            scale = max(float(b.abs().max()), 1e-30)
            error = float((a - b).abs().max()) / scale
            if error > worst:
                worst_phase, worst = phase, error
            if error > tol:
                return "diverge", phase, error
    return "match", worst_phase, worst


def semantic_checks(
    shape: Shape,
    policies: Mapping[str, Sequence[str] | str],
    *,
    seed: int,
    device: str | torch.device = "cpu",
    control: bool = True,
) -> list[Check]:
    """Check every method's policy in FP32 and FP64 against the functional reference.

    ``policies`` maps a method name to its policy (``"functional"`` or one option per
    segment). With ``control`` the negative control (``CONTROL``) runs too; it is expected
    to diverge wherever replay needs state history. A runtime's refusal (``refusals``)
    is a ``reject``, any other exception an ``error``, a numeric disagreement a ``diverge``.
    Only a ``match`` in both precisions makes a method eligible for timing.
    """
    refused = refusals()
    checks = []
    rows = step_rows(shape, seed=seed, step=0, device=device)
    for precision, dtype in PRECISIONS.items():
        tol = TOLERANCE[precision]
        # Every run starts from a copy of one instance built from the seed: the same values
        # as a build of its own (build draws them from the seed alone), without drawing them
        # again per method (12 ms each, 18 per process on the CPU profile).
        fresh = build(shape, seed=seed, dtype=dtype, device=device)
        ref = fresh.clone()
        want = _observe(ref, functools.partial(forward, ref, rows, "functional", checkpointed=False))
        runs = dict(policies)
        if control:
            runs[CONTROL] = CONTROL
        for method, policy in runs.items():
            wl = fresh.clone()
            run = (
                (lambda wl=wl: _control_run(wl, rows))
                if policy == CONTROL
                else (lambda wl=wl, policy=policy: forward(wl, rows, policy))
            )
            try:
                got = _observe(wl, run)
            except Exception as exc:  # noqa: BLE001 - recorded, with its type and message, not raised
                outcome = "reject" if isinstance(exc, refused) else "error"
                checks.append(Check(method, precision, outcome, None, None, tol, type(exc).__name__, str(exc)[:2000]))
                continue
            outcome, phase, error = _compare(got, want, tol)
            checks.append(Check(method, precision, outcome, phase, error, tol))
    return checks


def measure(
    shape: Shape, policy: Sequence[str] | str, *, seed: int, warmup: int, steps: int, device: str | torch.device = "cpu"
) -> tuple[list[StepTime], Peak]:
    """Time ``warmup + steps`` FP32 training steps of ``policy``, then measure its peak.

    A step: the step's rows, the forward of every segment, the loss, the backward, and
    the gradients released. Returns ``timed_steps``'s ``StepTime`` list and the
    ``Peak`` of one extra, untimed step.
    """
    device = torch.device(device)
    workload = build(shape, seed=seed, device=device)

    def step(index: int) -> None:
        rows = step_rows(shape, seed=seed, step=index, device=device)
        seed_step(seed, index)
        loss, _ = forward(workload, rows, policy)
        loss.backward()
        for p in workload.params:
            p.grad = None

    times = timed_steps(step, warmup=warmup, steps=steps, device=device)
    peak = peak_step(
        lambda: step(warmup + steps),
        device=device,
        live=lambda: live_bytes([workload.state, workload.x0, *workload.params]),
    )
    return times, peak
