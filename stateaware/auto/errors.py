"""What ``stateaware.auto`` raises when the fault is the user's model, not the planning.

NOTE [ The model's own failure ]
    Profiling starts with one plain eager training step of the model on its example
    inputs (``stateaware.auto.profiler``: the all-eager step it measures anyway, not an
    extra run). When that step raises, nothing of ours has run in the model yet, so the
    bug is the model's own and would fail the same without stateaware: torch's error
    would otherwise surface deep inside the profiler, as if the profiler had caused it.
    ``ModelStepError`` says so in one paragraph and chains the original exception, whose
    traceback (ending in the user's code) is kept. An exception of stateaware's own (a
    stateaware checkpoint inside the model refusing it) passes through unchanged, and the
    step leaves the model, its gradients, the RNG and the inputs as given.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ModelStepError", "model_step_error"]


class ModelStepError(RuntimeError):
    """The model's own training step failed in plain eager, before any planning; the
    original exception is its ``__cause__`` (NOTE [ The model's own failure ])."""


def model_step_error(model: Any, error: BaseException) -> ModelStepError:
    """The one-paragraph ``ModelStepError`` for ``error``, raised by ``model``'s own step;
    the caller raises it ``from error``."""
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    said = " ".join(str(error).split())  # torch's messages span lines; one paragraph reads as one
    return ModelStepError(
        f"{type(model).__name__}'s own training step (forward, then backward of its outputs) failed in plain "
        f"eager on the example inputs, before stateaware planned or changed anything: {name}: {said}. It "
        "fails the same without stateaware (run the model on these inputs and call backward); the original "
        "exception and its traceback are chained above."
    )
